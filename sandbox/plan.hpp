// The prepared launch plan: plain data built in the parent, read (never written) by the child.
#pragma once

#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/launch.hpp"

namespace sandbox {

// Steps the child reports on the status pipe; names appear in SandboxError messages.
enum class Step : std::int32_t {
  kMapsReady = 0,  // not a failure: the child can now be given its uid/gid maps (see Plan)
  kSignals = 1,
  kDumpable,
  kPdeathsig,
  kDupStdio,
  kSetsid,
  kCloseFds,
  kSetgroups,
  kLoopback,
  kMountSlave,
  kProtect,
  kRlimits,
  kSecurebits,
  kCapBounding,
  kCapAmbient,
  kCapset,
  kNoNewPrivs,
  kChdir,
  kLandlock,
  kSeccomp,
  kExecve,
};
const char* step_name(Step step) noexcept;

struct StatusRecord {
  std::int32_t step;
  std::int32_t error;
};

// A path bind-mounted onto itself read-only in the child's mount namespace. `flags` carries the
// remount flags, including the ones the original mount has locked (nosuid, nodev, noexec, atime).
struct ProtectedMount {
  std::string path;
  unsigned long flags;
};

struct Limit {
  int resource;
  struct rlimit value;
};

class Plan {
 public:
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan();

  std::string policy_source;
  std::string executable;
  std::string exec_hint;  // why execve would get EACCES from the execute rules, for the error ("" if none)
  std::vector<std::string> argv_store, env_store;
  std::vector<char*> argv, envp;  // null-terminated, pointing into *_store
  std::string workspace;
  int stdio[3] = {0, 1, 2};

  std::vector<Limit> limits;
  std::vector<sock_filter> bpf;
  int landlock_fd = -1;

  unsigned long clone_flags = 0;  // CLONE_NEW* only
  bool user_ns = false;
  uid_t uid = 0;
  gid_t gid = 0;
  // The parent writes the child's /proc/PID/{uid,gid}_map. Those files belong to the child's
  // "dump owner": root while the child is non-dumpable, which it inherits from a supervisor that
  // called protect_self(). Root may write them anyway; any other uid needs the child dumpable, so
  // the child sets PR_SET_DUMPABLE 1, reports kMapsReady, and resets it to 0 once released.
  bool dumpable_for_maps = false;
  bool drop_groups = false;             // setgroups(0, NULL) in the child
  bool have_setpcap = false;            // can set securebits and empty the bounding set
  bool loopback = false;                // bring up lo in the new network namespace
  std::vector<ProtectedMount> protect;  // needs the mount namespace

  std::string cgroup_root;  // per-launch pids cgroups are made here; empty = none
  std::uint64_t pids_max = 0;

  std::vector<LayerStatus> layers;
};

// Child side (child.cpp). Never returns: execs the target or _exits after reporting a step.
[[noreturn]] void run_child(const Plan& plan, int status_fd, int sync_fd) noexcept;

}  // namespace sandbox
