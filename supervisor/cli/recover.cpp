// Crash recovery on the command line (scheduling/recovery.hpp): `subagent-supervisor recover`,
// and the settling every command that uses the state directory does when it starts.
#include <cstdio>

#include "cli/cli.hpp"
#include "scheduling/hub.hpp"
#include "scheduling/recovery.hpp"
#include "records/terminal.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;

void recover_at_start(const fs::path& state_dir, const std::string& command) {
  RecoveryReport r = recover_dead_supervisors(state_dir, command);
  for (const auto& line : r.lines)
    if (line.find(") abandoned: ") != std::string::npos)  // one line a child; `recover` shows every step
      print_for_terminal(stderr, "subagent-supervisor %s: recovered %s\n", command.c_str(), line.c_str());
  for (const auto& p : r.problems)
    print_for_terminal(stderr, "subagent-supervisor %s: recovery: %s\n", command.c_str(), p.c_str());
}

void register_supervisor(HubConfig& hc, const std::string& command) {
  recover_at_start(hc.workspaces.state_dir, command);
  RegistryInfo info;
  info.state_dir = hc.workspaces.state_dir;
  info.lock_dir = hc.workspaces.lock_dir;
  if (hc.transcripts) info.transcript_dir = hc.transcripts->dir();
  if (hc.audit) info.audit_file = hc.audit->file();
  info.command = command;
  std::string error;
  hc.registry = SupervisorRegistry::open(info, &error);
  if (!hc.registry)
    print_for_terminal(stderr,
                       "subagent-supervisor %s: no crash-recovery registry (%s): if this process is killed, "
                       "`subagent-supervisor recover` cannot settle its children\n",
                       command.c_str(), error.c_str());
}

int cmd_recover(Args args) {
  fs::path state_dir = default_workspace_config().state_dir;
  while (auto a = args.next()) {
    if (*a == "-h" || *a == "--help") {
      std::puts(
          "usage: subagent-supervisor recover [--state-dir DIR]\n\n"
          "Settles what supervisors that died without cleaning up (SIGKILL, the OOM killer, a host's hard\n"
          "stop) left under the state directory: each of their children's transcripts still \"running\" is\n"
          "marked \"abandoned\" with the reason and an \"abandoned\" line goes to their audit log; their\n"
          "worktrees are removed and unregistered from the repository (sandboxed `git worktree prune`; no\n"
          "repository code runs); their cgroups are removed. A live supervisor's registry is never touched.\n"
          "run, serve, mcp, apply and audit do the same when they start; this command prints every step.\n"
          "Exit status 0, or 1 when something could not be settled (it is kept for the next start).");
      return 0;
    } else if (*a == "--state-dir")
      state_dir = fs::absolute(args.value(*a));
    else
      throw UsageError("unknown option '" + *a + "' (see recover --help)");
  }
  RecoveryReport r = recover_dead_supervisors(state_dir, "recover");
  for (const auto& line : r.lines) print_for_terminal(stdout, "%s\n", line.c_str());
  for (const auto& p : r.problems) print_for_terminal(stderr, "subagent-supervisor recover: %s\n", p.c_str());
  std::printf("%zu dead supervisor%s, %zu child%s settled under %s\n", r.supervisors, r.supervisors == 1 ? "" : "s",
              r.children, r.children == 1 ? "" : "ren", (state_dir / "supervisors").string().c_str());
  return r.problems.empty() ? 0 : 1;
}

}  // namespace supervisor::cli
