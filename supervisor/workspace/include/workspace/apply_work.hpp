// `subagent-supervisor apply ID` (and serve's `apply`, MCP's `agent_apply`, both through
// frontends/operations.hpp): whichever a finished child left, its patch (workspace/patch.hpp) or its
// held later-execution files (held.hpp), put into its workspace under the workspace's writer lock.
//
// Errors: none thrown; every failure is an ApplyResult with ok false and a message that names it.
#pragma once

#include <filesystem>
#include <string>

#include "workspace/patch.hpp"

namespace supervisor {

// Holds the writer lock of the child's workspace (workspace/lock.hpp, in `lock_dir`) while it
// applies, so that no worker child writes there meanwhile and no second apply interleaves; refused
// with nothing changed while another writer holds it.
ApplyResult apply_child_work(const std::filesystem::path& state_dir, const std::filesystem::path& lock_dir,
                             const std::string& id, bool allow_flagged);

}  // namespace supervisor
