// `subagent-supervisor apply ID`: the parent applies an implementation child's patch, explicitly.
#include <cstdio>

#include "records/terminal.hpp"
#include "cli/cli.hpp"
#include "workspace/apply_work.hpp"
#include "workspace/held.hpp"

namespace supervisor::cli {

int cmd_apply(Args args) {
  std::string id;
  bool allow_flagged = false;
  std::filesystem::path state_dir = default_workspace_config().state_dir;
  std::filesystem::path lock_dir = default_workspace_config().lock_dir;
  while (auto a = args.next()) {
    if (*a == "-h" || *a == "--help") {
      std::puts(
          "usage: subagent-supervisor apply ID [--state-dir DIR] [--lock-dir DIR] [--allow-flagged]\n\n"
          "Applies the patch that implementation child ID returned to the workspace it was spawned on.\n"
          "A patch that no longer applies is reported and nothing is changed (exit 1).\n"
          "A patch whose review (the envelope's artifacts.patch.review) flags symlinks, mode changes, new\n"
          "executables or later-execution paths (hooks, CI, agent and editor configuration) is refused\n"
          "unless --allow-flagged says you reviewed them. A symlink that is absolute or leads out of the\n"
          "workspace is always refused.\n\n"
          "For a worker (or a sandbox --preset worker|implementation run), ID's held later-execution files\n"
          "(the envelope's artifacts.later_execution.held: a .git, hooks, CI, agent or editor configuration it\n"
          "created, moved out of the workspace when it ended) are moved back, only with --allow-flagged, and\n"
          "never over anything that exists in the workspace now.\n\n"
          "The apply holds the workspace's writer lock (--lock-dir: the one run, serve and mcp use): while a\n"
          "worker child or another apply holds it, the apply is refused and nothing is changed.");
      return 0;
    } else if (*a == "--state-dir")
      state_dir = args.value(*a);
    else if (*a == "--lock-dir")
      lock_dir = std::filesystem::absolute(args.value(*a));
    else if (*a == "--allow-flagged")
      allow_flagged = true;
    else if (a->rfind("-", 0) == 0)
      throw UsageError("unknown option '" + *a + "'");
    else if (id.empty())
      id = *a;
    else
      throw UsageError("apply takes one child id");
  }
  if (id.empty()) throw UsageError("apply needs the child's ID");
  recover_at_start(state_dir, "apply");
  ApplyResult r = apply_child_work(state_dir, lock_dir, id, allow_flagged);
  // The message and the file names come from the child's patch.
  print_for_terminal(r.ok ? stdout : stderr, "%s\n", r.message.c_str());
  for (const auto& f : r.files) print_for_terminal(stdout, "  %s\n", f.c_str());
  return r.ok ? 0 : 1;
}

}  // namespace supervisor::cli
