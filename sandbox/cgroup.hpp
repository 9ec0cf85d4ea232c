// The process cap as a pids cgroup: RLIMIT_NPROC does not bind uid 0 (the kernel exempts
// INIT_USER), so a supervisor running as root caps each child's task count with pids.max instead.
#pragma once

#include <cstdint>
#include <string>

namespace sandbox {

struct PidsCgroupRoot {
  std::string path;    // directory under which per-launch cgroups are made; empty = unavailable
  std::string detail;  // "cgroup v1 pids at ..." or why there is none
};

// Finds (once, cached) a writable pids hierarchy: cgroup v1 "pids", else cgroup v2 when the
// supervisor sits at the root of its cgroup namespace. Removes empty leftovers of earlier runs.
const PidsCgroupRoot& pids_cgroup_root();

// Creates root/<pid>-<n> with pids.max = max. Throws SandboxError.
std::string create_pids_cgroup(const std::string& root, std::uint64_t max);
void add_to_cgroup(const std::string& cgroup, pid_t pid);  // throws SandboxError
void remove_cgroup(const std::string& cgroup) noexcept;

}  // namespace sandbox
