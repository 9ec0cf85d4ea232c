// Limits over a child's whole process tree, as per-launch cgroups: pids (the process cap for a root
// supervisor, where RLIMIT_NPROC does not bind: the kernel exempts INIT_USER), memory (RSS, page
// cache and kernel memory of every process together; swap does not extend it) and cpu (a CFS
// bandwidth quota). cgroup v1 hierarchies (each controller where it is mounted) and cgroup v2 (one
// unified hierarchy) are both handled; a controller may sit in either on a hybrid system.
//
// Joining costs: writing a pid into a v1 cgroup.procs takes the kernel's global
// cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period (~12 ms per hierarchy
// measured here once the lock has been idle). A thread that writes "0" to a v1 `tasks` file moves
// only itself, and the kernel skips that lock (cgroup_procs_write_start: pid 0, not a threadgroup:
// "the thread is current, it won't exit under our hands"). So the parent opens each `tasks` file
// before clone (v1 checks the opener's credentials, not the writer's) and the child, still
// single-threaded, writes "0" into each as its first step: ~0.1 ms for three hierarchies here.
// On v2 the child is born in its cgroup (clone3 with CLONE_INTO_CGROUP, Linux 5.7).
//
// Errors: parent-side setup throws SandboxError naming the file; a missing or unwritable hierarchy
// is no error but a LayerStatus (applied false, with the reason); cleanup never throws.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/launch.hpp"

namespace sandbox {

enum class Controller : unsigned { kPids = 0, kMemory = 1, kCpu = 2 };
inline constexpr unsigned kControllerCount = 3;
const char* to_string(Controller c) noexcept;  // "pids", "memory", "cpu"

inline constexpr std::uint64_t kCpuPeriodUs = 100000;  // the CFS period the quota is given in

// Where per-launch cgroups of one controller are made.
struct ControllerRoot {
  std::string parent;      // ".../subagent-sandbox"; empty = unavailable
  int version = 0;         // 1 or 2
  bool swap_file = false;  // memory only: memory.memsw.limit_in_bytes (v1) or memory.swap.max (v2)
  std::string detail;      // "cgroup v1 memory under /sys/fs/cgroup/memory/..." or why there is none
};

// Finds (once per process, cached, thread-safe) a writable hierarchy for `c`: the v1 hierarchy
// that carries it (from /proc/self/mountinfo and /proc/self/cgroup), else cgroup v2 when the
// supervisor sits at the root of its cgroup namespace. Removes empty leftovers of dead supervisors.
const ControllerRoot& cgroup_root(Controller c);

// What one launch limits; 0 = not limited.
struct CgroupLimits {
  std::uint64_t pids_max = 0;
  std::uint64_t memory_bytes = 0;
  std::uint64_t cpu_quota_us = 0;  // per kCpuPeriodUs
};

// The cgroup part of a plan (plain data, built by prepare()): one entry per hierarchy directory.
struct CgroupPlan {
  struct Hierarchy {
    std::string parent;
    int version = 0;
    unsigned controllers = 0;  // bit (1 << Controller)
    bool swap_file = false;
  };
  std::vector<Hierarchy> hierarchies;
  CgroupLimits limits;
  bool empty() const { return hierarchies.empty(); }
  // Adds `c` at `root` (which must be available), sharing a directory with controllers co-mounted
  // in the same hierarchy.
  void add(Controller c, const ControllerRoot& root);
};

// The cgroups of one launch, made in the parent before clone. Owns its fds and, until release(),
// its directories (the destructor removes them: a launch that failed leaves nothing behind).
class LaunchCgroups {
 public:
  static constexpr int kMaxJoinFds = static_cast<int>(kControllerCount);

  // Creates <parent>/<pid>-<n> in each hierarchy, writes the limits and opens what the child needs
  // to join. Throws SandboxError naming the file.
  explicit LaunchCgroups(const CgroupPlan& plan);
  LaunchCgroups(const LaunchCgroups&) = delete;
  LaunchCgroups& operator=(const LaunchCgroups&) = delete;
  ~LaunchCgroups();

  // v1 `tasks` files (O_WRONLY|O_CLOEXEC) the child writes "0" into.
  const int* join_fds() const { return join_fds_; }
  int join_count() const { return join_count_; }
  // A v2 cgroup directory fd for clone3's CLONE_INTO_CGROUP, or -1.
  int clone_into_fd() const { return v2_fd_; }
  // When clone3 is unavailable: moves `pid` into the v2 cgroup through cgroup.procs (slow path).
  void add_to_v2(pid_t pid) const;  // throws SandboxError
  // Closes every fd (after clone) and hands the directories over (after a successful launch).
  void close_fds() noexcept;
  std::vector<std::string> release() noexcept;

 private:
  std::vector<std::string> dirs_;
  std::string v2_dir_;
  int join_fds_[kMaxJoinFds] = {-1, -1, -1};
  int join_count_ = 0;
  int v2_fd_ = -1;
};

// The three tree-limit layers of `policy` (process_cap, memory_cap, cpu_cap, in that order), and
// what `plan` must create per launch for them. process_cap is RLIMIT_NPROC for a non-root uid (the
// rlimits already hold it) and pids.max for root.
std::vector<LayerStatus> plan_tree_limits(const Policy& policy, CgroupPlan* plan);

// The same three layers for `policy explain`: whether this process could apply them at all.
std::vector<LayerStatus> tree_limit_support();

// Removes per-launch cgroups once their tasks are gone (EBUSY otherwise: the garbage collector of a
// later supervisor removes them). Never throws.
void remove_cgroups(const std::vector<std::string>& dirs) noexcept;

}  // namespace sandbox
