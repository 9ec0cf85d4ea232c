// The per-launch cgroups (sandbox/cgroup.hpp: "<supervisor pid>-<n>" under each controller's
// subagent-sandbox directory) that a supervisor killed without cleaning up left behind, for crash
// recovery (scheduling/recovery.hpp).
//
// Errors: none thrown; what could not be removed is returned.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace sandbox {

struct CgroupLeftovers {
  std::vector<std::string> removed;
  std::vector<std::string> busy;  // still held processes after `wait` (rmdir: EBUSY)
};

// Removes the cgroups named "<pid>-<n>" of a supervisor process that is known to be dead (its
// registry lock was free). The pid may be in use again by another process: then only the cgroups
// made before that process started are removed (a younger one is the new process's). A cgroup whose
// processes are still dying (the children got their parent-death signal a moment ago) is retried
// for up to `wait`. Touches nothing when the host offers no cgroup hierarchy to the supervisor.
CgroupLeftovers remove_dead_supervisor_cgroups(pid_t pid, std::chrono::milliseconds wait) noexcept;

}  // namespace sandbox
