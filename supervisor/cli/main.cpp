// subagent-supervisor: runs AI child agents in kernel-enforced sandboxes with budgets enforced from outside.
//
// Built twice (supervisor/CMakeLists.txt). With SUBAGENT_LEAN_MAIN it is bin/subagent-supervisor, which
// links only the sandbox command (no libcurl and its thirty libraries to map at every start) and
// execv()s subagent-supervisor-core for every other command: the same pid (a parent's signals still
// reach it), argv and environment. Without it, it is that core, which runs every command.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/protect.hpp"
#include "cli/cli.hpp"
#include "cli/install_layout.hpp"

namespace {

constexpr const char* kHelp = R"(usage: subagent-supervisor COMMAND [options]

Delegates focused work to child agents that run in kernel-enforced sandboxes, with budgets
enforced from outside, and returns one capped result envelope.

Commands:
  run       run one child agent and print its result envelope (run --help)
  serve     the JSON-lines control protocol for a parent agent on stdin/stdout (serve --help)
  mcp       a Model Context Protocol server on stdio, for MCP clients (mcp --help)
  apply     apply the patch an implementation child returned, or release the later-execution files a
            worker created (held until then): apply ID [--state-dir DIR] [--allow-flagged]
  sandbox   run any command under exactly the sandbox a preset's child gets (sandbox --help)
  policy    check policy files, or explain a preset to a reviewer (policy --help)
  audit     what did child X do, which children ran commands: queries the audit log (audit --help)
  recover   settle what supervisors killed without cleaning up left behind (recover --help)
  version   print the version

Presets live in policies/ (installed: PREFIX/share/subagent-supervisor/policies), one auditable JSON
file each; see policies/README.md.
The child protocol and the envelope are specified in protocol/README.md.
)";

// The commands only the core has.
constexpr const char* kCoreCommands[] = {"run", "serve", "mcp", "apply", "policy", "audit", "recover"};

#ifdef SUBAGENT_LEAN_MAIN
// Replaces this process with the core; returns only when that failed (the reason is printed).
int exec_core(const std::string& cmd, char** argv) {
  try {
    const std::string core = supervisor::core_executable().string();
    ::execv(core.c_str(), argv);
    const int err = errno;
    std::fprintf(stderr, "subagent-supervisor %s: cannot execute %s: %s\n", cmd.c_str(), core.c_str(),
                 std::strerror(err));
  } catch (const supervisor::cli::SetupError& e) {
    std::fprintf(stderr, "subagent-supervisor %s: %s\n", cmd.c_str(), e.what());
  }
  return supervisor::cli::kSetupError;
}
#else
int run_core_command(const std::string& cmd, supervisor::cli::Args rest) {
  if (cmd == "run") return supervisor::cli::cmd_run(std::move(rest));
  if (cmd == "policy") return supervisor::cli::cmd_policy(std::move(rest));
  if (cmd == "serve") return supervisor::cli::cmd_serve(std::move(rest));
  if (cmd == "mcp") return supervisor::cli::cmd_mcp(std::move(rest));
  if (cmd == "apply") return supervisor::cli::cmd_apply(std::move(rest));
  if (cmd == "recover") return supervisor::cli::cmd_recover(std::move(rest));
  return supervisor::cli::cmd_audit(std::move(rest));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  // The supervisor holds the API keys and answers approvals: same-uid children must not read its
  // memory or environment through /proc. The core calls it again: execve resets dumpability.
  sandbox::protect_self();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kHelp, args.empty() ? stderr : stdout);
    std::fputs("\n", args.empty() ? stderr : stdout);
    std::fputs(supervisor::cli::kExitStatusTable, args.empty() ? stderr : stdout);
    return args.empty() ? supervisor::cli::kUsageError : 0;
  }
  const std::string cmd = args[0];
  bool core_command = false;
  for (const char* c : kCoreCommands) core_command |= cmd == c;
#ifdef SUBAGENT_LEAN_MAIN
  if (core_command) return exec_core(cmd, argv);
#endif
  supervisor::cli::Args rest(std::vector<std::string>(args.begin() + 1, args.end()));
  try {
#ifndef SUBAGENT_LEAN_MAIN
    if (core_command) return run_core_command(cmd, std::move(rest));
#endif
    if (cmd == "sandbox") return supervisor::cli::cmd_sandbox(std::move(rest));
    if (cmd == "version" || cmd == "--version") {
      std::printf("subagent-supervisor %s (protocol 1)\n", SUBAGENT_VERSION);
      return 0;
    }
  } catch (const supervisor::cli::UsageError& e) {
    std::fprintf(stderr, "subagent-supervisor %s: %s\n", cmd.c_str(), e.what());
    return supervisor::cli::kUsageError;
  } catch (const supervisor::cli::SetupError& e) {
    std::fprintf(stderr, "subagent-supervisor %s: %s\n", cmd.c_str(), e.what());
    return supervisor::cli::kSetupError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "subagent-supervisor %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "subagent-supervisor: unknown command '%s' (see --help)\n", cmd.c_str());
  return supervisor::cli::kUsageError;
}
