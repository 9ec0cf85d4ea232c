// The prepared launch plan: plain data built in the parent, read (never written) by the child.
// Errors: the child side (run_child) never throws and never returns: a failed step is a
// StatusRecord {step, errno} on the status pipe, which launch.cpp turns into a SandboxError.
#pragma once

#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cgroup.hpp"
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
  // The new root and identity steps, in the order the child takes them (the numbers only travel
  // between the two halves of one binary, so their values carry no meaning of their own).
  kRootClone,      // open_tree of one root to bind into the new root
  kRootTmpfs,      // the tmpfs that becomes the child's /
  kRootBuild,      // a directory, file, symlink or bind in the new root
  kPivotRoot,      // pivot_root into the new root and detach the host's tree
  kIdentity,       // setresgid/setresuid to the ids mapped for the child
  kReceiveMounts,  // the id-mapped mounts the parent passes over the sync socket
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
  kCgroupJoin,  // writing "0" into a v1 cgroup's tasks file (the tree limits)
  kProcMount,   // the procfs of the child's own PID namespace at /proc in the new root
  kHomeMount,   // the private home: a tmpfs of the child's own at kHomePath in the new root
  kInit,        // the minimal init: its fork, its signal mask or its own seccomp filter
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

// The child's root filesystem (rootfs.cpp builds it, child.cpp applies it): an empty tmpfs that
// receives a detached clone of each policy path, so nothing of the host exists in the child but
// those paths, each read-only unless it is a write root.
struct RootBind {
  std::string source;     // canonical host path (no symlink in it)
  bool writable = false;  // a write root: the clone keeps its flags; otherwise read-only
  bool idmapped = false;  // the parent makes this clone, id-mapped through the child's user ns
};
struct RootOp {
  enum Kind { kDir, kFile, kSymlink, kBind, kProc, kHome } kind;
  std::string path;    // relative to the new root, e.g. "usr/lib"
  std::string target;  // kSymlink: the link's text, as on the host
  int bind = -1;       // kBind: index into root_binds
};
inline constexpr int kMaxRootBinds = 64;

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
  // prepare() assumed, without a probe, that the kernel grants these namespaces / a procfs of the
  // child's own (namespaces.hpp): a refusal at launch is then a NamespaceRefusedError, not final.
  bool assumed_namespaces = false;
  bool assumed_proc = false;
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

  // New root (needs the mount namespace); empty root_ops = the host's tree, as it is.
  std::vector<RootBind> root_binds;
  std::vector<RootOp> root_ops;
  // Root: the parent makes the tmpfs and clones every root bind, and sends the fds with the
  // release (tmpfs first, then root_binds in order): it can reach and id-map what the child, root
  // only in its own user namespace, cannot. Otherwise the child makes them itself.
  bool parent_clones = false;
  // A read-only procfs of the child's own PID namespace at /proc (a kProc op), readable through
  // Landlock: it shows the child's processes only, never the host's.
  bool private_proc = false;
  // A private home at kHomePath (a kHome op): an empty tmpfs made in the child, owned by the
  // child's uid, gone with its mount namespace. home_access is its Landlock rule (0: no Landlock).
  bool private_home = false;
  bool home_writable = false;
  const char* home_size = "256m";  // tmpfs size= when writable: smaller without a memory cap
  std::uint64_t home_access = 0;

  // Identity (root supervisor with a user namespace): the child's uid/gid inside its namespace are
  // the workspace owner's; outside they are kIdentityBase + the child's host pid (see rootfs.hpp).
  bool identity = false;
  uid_t inner_uid = 0;
  gid_t inner_gid = 0;

  CgroupPlan cgroups;  // per-launch cgroups for the tree limits (sandbox/cgroup.hpp)

  // A minimal init as PID 1 (LaunchRequest::init): after Landlock, the child forks; the parent
  // stays as init (forwards signals, reaps, exits with the target's status) under init_bpf, a
  // filter of its own that allows only that; the new process applies `bpf` and execs the target.
  bool init = false;
  std::vector<sock_filter> init_bpf;

  std::vector<LayerStatus> layers;
};

// Per-launch fds the child uses; everything is open before clone.
// By value: a child cloned with CLONE_VM reads this while the parent goes on (launch.cpp keeps it
// in the launch's state until the child has exec'd).
struct ChildFds {
  int status = -1;                                   // close-on-exec status pipe (write end)
  int sync = -1;                                     // release pipe (read end)
  int sync_peer = -1;                                // its other end, the parent's: closed first
  int cgroup_join[LaunchCgroups::kMaxJoinFds] = {};  // v1 `tasks` files to write "0" into, first thing
  int cgroup_join_count = 0;
};

// Child side (child.cpp). Never returns: execs the target or _exits after reporting a step.
[[noreturn]] void run_child(const Plan& plan, const ChildFds& fds) noexcept;

}  // namespace sandbox
