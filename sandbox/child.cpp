// Runs in the child between clone and execve.
//
// ASYNC-SIGNAL-SAFE CODE ONLY, AND NOTHING WRITTEN OUTSIDE OUR OWN STACK. The child is a copy of a
// possibly multi-threaded parent (another thread may have held malloc's or stdio's lock at clone
// time), or with CLONE_VM (launch.cpp) it runs in the parent's own memory on a stack of its own
// until execve. No malloc, no new, no std::string, no locks, no logging, no exceptions, no stdio,
// no atexit handlers, and no libc syscall wrappers: they write errno, the thread-local storage of
// the thread that cloned us. Only sys::raw and sys::call (the kernel's result, a negative errno),
// on data the parent prepared and keeps unchanged until we exec. Leave only through execve or
// leave().
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "plan.hpp"
#include "sandbox/policy.hpp"
#include "syscalls.hpp"

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
#define SECBIT_NO_SETUID_FIXUP (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

namespace sandbox {
namespace {

using sys::call;

// Exit status when the supervisor vanished before releasing us; nobody reads the status pipe then.
constexpr int kExitParentGone = 125;
constexpr int kExitStepFailed = 126;

[[noreturn]] void leave(int status) noexcept {
  call(SYS_exit_group, status);
  __builtin_unreachable();
}

// `error`: the kernel's negative errno (as sys::call returns it) or a positive one.
[[noreturn]] void fail(int status_fd, Step step, long error) noexcept {
  StatusRecord record{static_cast<std::int32_t>(step), static_cast<std::int32_t>(error < 0 ? -error : error)};
  // A pipe write of <= PIPE_BUF bytes is atomic; nothing useful to do if it fails.
  while (call(SYS_write, status_fd, &record, sizeof record) == -EINTR) {
  }
  leave(kExitStepFailed);
}

// The kernel's struct sigaction (x86_64 and arm64 alike) and its 64-bit signal mask.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};
constexpr long kMaskBytes = sizeof(std::uint64_t);
constexpr std::uint64_t bit(int sig) noexcept { return std::uint64_t{1} << (sig - 1); }

int close_except(int lowest, int keep_a, int keep_b) noexcept {
  if (keep_a > keep_b) {
    int t = keep_a;
    keep_a = keep_b;
    keep_b = t;
  }
  unsigned next = static_cast<unsigned>(lowest);
  for (int keep : {keep_a, keep_b}) {
    if (keep < lowest) continue;
    if (static_cast<unsigned>(keep) > next) {
      if (int r = sys::raw::close_range(next, static_cast<unsigned>(keep) - 1, 0); r != 0) return r;
    }
    next = static_cast<unsigned>(keep) + 1;
  }
  return sys::raw::close_range(next, ~0U, 0);
}

// 0, or a negative errno.
long bring_up_loopback() noexcept {
  const long fd = call(SYS_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fd;
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::memcpy(ifr.ifr_name, "lo", 3);
  long rc = call(SYS_ioctl, fd, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    rc = call(SYS_ioctl, fd, SIOCSIFFLAGS, &ifr);
  }
  call(SYS_close, fd);
  return rc;
}

// Waits for the parent's release: one byte, with the new root's fds attached when the parent made
// them (tmpfs first, then plan.root_binds in order). Returns how many fds arrived, or -1 on EOF.
int receive_release(int sync_fd, int* fds, int max_fds, int status_fd) noexcept {
  char go = 0;
  struct iovec iov = {&go, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kMaxRootBinds + 1))];
  struct msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  long n;
  while ((n = call(SYS_recvmsg, sync_fd, &msg, MSG_CMSG_CLOEXEC)) == -EINTR) {
  }
  if (n != 1) return -1;
  if (msg.msg_flags & MSG_CTRUNC) fail(status_fd, Step::kReceiveMounts, EMSGSIZE);
  int count = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int in_this = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    if (count + in_this > max_fds) fail(status_fd, Step::kReceiveMounts, EMSGSIZE);
    std::memcpy(fds + count, CMSG_DATA(c), sizeof(int) * static_cast<std::size_t>(in_this));
    count += in_this;
  }
  return count;
}

// Adds a rule for `path` (a directory made in the child's own root) to the plan's Landlock ruleset.
void add_own_rule(const Plan& plan, const char* path, std::uint64_t access, Step step, int status_fd) noexcept {
  if (plan.landlock_fd < 0) return;
  const long dir = call(SYS_openat, AT_FDCWD, path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) fail(status_fd, step, dir);
  sys::LandlockPathBeneathAttr rule;
  std::memset(&rule, 0, sizeof rule);
  rule.allowed_access = access;
  rule.parent_fd = static_cast<std::int32_t>(dir);
  if (int r = sys::raw::landlock_add_rule(plan.landlock_fd, sys::kLandlockRulePathBeneath, &rule); r != 0)
    fail(status_fd, step, r);
  call(SYS_close, dir);
}

// Replaces the host's tree with the new root (see rootfs.hpp): the tmpfs goes over "/", gets the
// skeleton and the clones, becomes the root through pivot_root, and the host's tree is detached.
void build_root(const Plan& plan, int* fds, int received, int status_fd) noexcept {
  const int binds = static_cast<int>(plan.root_binds.size());
  // Without a user namespace the new mount namespace still shares propagation with the host's:
  // make it a slave first so that nothing we mount shows up outside.
  if (long r = call(SYS_mount, nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr); r != 0)
    fail(status_fd, Step::kMountSlave, r);
  if (plan.parent_clones) {
    if (received != binds + 1) fail(status_fd, Step::kReceiveMounts, EPROTO);
  } else {
    if (received != 0) fail(status_fd, Step::kReceiveMounts, EPROTO);
    fds[0] = sys::raw::make_root_tmpfs();
    if (fds[0] < 0) fail(status_fd, Step::kRootTmpfs, fds[0]);
    for (int i = 0; i < binds; ++i) {
      const RootBind& b = plan.root_binds[static_cast<std::size_t>(i)];
      fds[i + 1] = sys::raw::open_tree_clone(AT_FDCWD, b.source.c_str(), 0);
      if (fds[i + 1] < 0) fail(status_fd, Step::kRootClone, fds[i + 1]);
      sys::MountAttr ro;
      std::memset(&ro, 0, sizeof ro);
      ro.attr_set = MOUNT_ATTR_RDONLY;
      if (b.writable) continue;
      if (int r = sys::raw::mount_setattr(fds[i + 1], "", AT_EMPTY_PATH | AT_RECURSIVE, &ro); r != 0)
        fail(status_fd, Step::kRootClone, r);
    }
  }
  const int root = fds[0];
  long r = call(SYS_chdir, "/");
  if (r == 0) r = call(SYS_move_mount, root, "", AT_FDCWD, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
  if (r != 0) fail(status_fd, Step::kRootTmpfs, r);
  for (const RootOp& op : plan.root_ops) {
    const char* path = op.path.c_str();
    long rc = 0;
    switch (op.kind) {
      case RootOp::kDir:
        rc = call(SYS_mkdirat, root, path, 0755);
        break;
      case RootOp::kFile: {
        const long fd = call(SYS_openat, root, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        rc = fd < 0 ? fd : call(SYS_close, fd);
        break;
      }
      case RootOp::kSymlink:
        rc = call(SYS_symlinkat, op.target.c_str(), root, path);
        break;
      case RootOp::kBind:
        rc = sys::raw::move_mount_fd(fds[op.bind + 1], root, path);
        if (rc == 0) call(SYS_close, fds[op.bind + 1]);
        break;
      case RootOp::kProc: {
        // Made here, as pid 1 of the new PID namespace, while the host's /proc is still visible.
        const int proc = sys::raw::make_proc_mount();
        if (proc < 0) fail(status_fd, Step::kProcMount, proc);
        if (int m = sys::raw::move_mount_fd(proc, root, path); m != 0) fail(status_fd, Step::kProcMount, m);
        call(SYS_close, proc);
        break;
      }
      case RootOp::kHome: {
        // Owned by the ids the child will run as: the workspace owner's with the identity layer,
        // else the ones it has now (ids of its own user namespace, read by the kernel there).
        const unsigned uid = plan.identity ? plan.inner_uid : static_cast<unsigned>(call(SYS_geteuid));
        const unsigned gid = plan.identity ? plan.inner_gid : static_cast<unsigned>(call(SYS_getegid));
        const int home = sys::raw::make_home_tmpfs(uid, gid, plan.home_writable ? plan.home_size : nullptr);
        if (home < 0) fail(status_fd, Step::kHomeMount, home);
        if (int m = sys::raw::move_mount_fd(home, root, path); m != 0) fail(status_fd, Step::kHomeMount, m);
        call(SYS_close, home);
        break;
      }
    }
    if (rc != 0 && !(rc == -EEXIST && op.kind != RootOp::kBind)) fail(status_fd, Step::kRootBuild, rc);
  }
  r = call(SYS_fchdir, root);
  if (r == 0) r = sys::raw::pivot_root(".", ".");
  if (r == 0) r = call(SYS_umount2, ".", MNT_DETACH);
  if (r == 0) r = call(SYS_chdir, "/");
  if (r != 0) fail(status_fd, Step::kPivotRoot, r);
  sys::MountAttr ro;
  std::memset(&ro, 0, sizeof ro);
  ro.attr_set = MOUNT_ATTR_RDONLY;
  if (int m = sys::raw::mount_setattr(AT_FDCWD, "/", 0, &ro); m != 0) fail(status_fd, Step::kPivotRoot, m);
  call(SYS_close, root);
  // The new procfs and the private home are file systems the supervisor never saw: Landlock's
  // rules cannot name them in advance, so the child adds their rules to its own ruleset (the proc
  // one read only, the home one with the rights the policy gives "${home}").
  if (plan.private_proc) add_own_rule(plan, "/proc", sys::kFsReadFile | sys::kFsReadDir, Step::kProcMount, status_fd);
  if (plan.private_home && plan.home_access != 0)
    add_own_rule(plan, kHomePath, plan.home_access, Step::kHomeMount, status_fd);
}

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

// PID 1 of the namespace while `target` runs: forwards the signals above to it, reaps every
// process that ends up as its child, and leaves with the target's status. Runs under its own
// filter (plan.init_bpf), through raw syscalls only.
// Only after a plain fork (launch.cpp never clones an init with CLONE_VM): it outlives the execve.
[[noreturn]] void run_init(const Plan& plan, pid_t target, const std::uint64_t& waited, int status_fd) noexcept {
  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(plan.init_bpf.size());
  prog.filter = const_cast<sock_filter*>(plan.init_bpf.data());
  if (int r = sys::raw::seccomp_set_filter(&prog); r != 0) {
    call(SYS_kill, target, SIGKILL);
    fail(status_fd, Step::kInit, r);  // before the parent can see EOF: the launch fails
  }
  // The target holds the other copy of the status pipe: the parent sees EOF once it has exec'd.
  call(SYS_close, status_fd);
  for (int fd = 0; fd < 3; ++fd) call(SYS_close, fd);
  for (;;) {
    siginfo_t info;
    const long sig = call(SYS_rt_sigtimedwait, &waited, &info, nullptr, kMaskBytes);
    if (sig < 0) {
      if (sig == -EINTR || sig == -EAGAIN) continue;
      call(SYS_kill, target, SIGKILL);
      call(SYS_exit_group, kExitStepFailed);  // not leave(): see below
    }
    if (sig != SIGCHLD) {
      call(SYS_kill, target, sig);
      continue;
    }
    for (;;) {
      int status = 0;
      const long reaped = call(SYS_wait4, -1, &status, WNOHANG, nullptr);
      if (reaped <= 0) break;
      // The exit itself, not through a [[noreturn]] function: a sanitizer build calls into its
      // runtime before every such call (__asan_handle_no_return: sigaltstack, gettid), which the
      // init's filter refuses, and the runtime then dies with status 1.
      if (reaped == target) call(SYS_exit_group, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
  }
}

}  // namespace

void run_child(const Plan& plan, const ChildFds& fds) noexcept {
  const int status_fd = fds.status, sync_fd = fds.sync;
  // Our copy of the parent's end of the release socket: closed, so that the parent's death before
  // our PR_SET_PDEATHSIG below is EOF on the socket, not a wait for ever (in the parent's memory).
  if (fds.sync_peer >= 0) call(SYS_close, fds.sync_peer);
  // The tree limits first, before this process can do anything else. Single-threaded, we move only
  // ourselves ("0" into v1 tasks), which spares the kernel's global threadgroup lock (cgroup.hpp).
  for (int i = 0; i < fds.cgroup_join_count; ++i) {
    if (long r = call(SYS_write, fds.cgroup_join[i], "0", 1); r != 1)
      fail(status_fd, Step::kCgroupJoin, r < 0 ? r : EIO);
    call(SYS_close, fds.cgroup_join[i]);
  }
  // The parent blocked every signal around clone so that none of its handlers runs here. Restore
  // default dispositions (ignored signals would survive execve) before unblocking.
  KernelSigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) call(SYS_rt_sigaction, sig, &dfl, nullptr, kMaskBytes);
  }
  const std::uint64_t none = 0;
  if (long r = call(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, kMaskBytes); r != 0)
    fail(status_fd, Step::kSignals, r);

  if (long r = call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); r != 0) fail(status_fd, Step::kPdeathsig, r);
  if (plan.dumpable_for_maps) {
    // Until the parent has written our id maps a same-uid process could ptrace us and read the
    // copy of the supervisor's memory we hold; the window closes right after the release below.
    // (Never with CLONE_VM: dumpable is a property of the memory, which would be the supervisor's.)
    if (long r = call(SYS_prctl, PR_SET_DUMPABLE, 1, 0, 0, 0); r != 0) fail(status_fd, Step::kDumpable, r);
    StatusRecord ready{static_cast<std::int32_t>(Step::kMapsReady), 0};
    if (call(SYS_write, status_fd, &ready, sizeof ready) != static_cast<long>(sizeof ready)) leave(kExitParentGone);
  }
  // The parent releases us by sending one byte, after writing our uid/gid maps and cgroup. If it
  // died before our PR_SET_PDEATHSIG (getppid() cannot tell in a new PID namespace: it reads 0),
  // its end of the socket is closed and we see EOF instead.
  int root_fds[kMaxRootBinds + 1];
  const int received = receive_release(sync_fd, root_fds, kMaxRootBinds + 1, status_fd);
  if (received < 0) leave(kExitParentGone);
  call(SYS_close, sync_fd);
  if (plan.dumpable_for_maps) {
    if (long r = call(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0); r != 0) fail(status_fd, Step::kDumpable, r);
  }
  // Before anything else closes fds: the received clones are still open here.
  if (!plan.root_ops.empty()) build_root(plan, root_fds, received, status_fd);

  // Move the three request fds above every fd we still need, then into place; dup2 clears
  // close-on-exec on 0, 1 and 2.
  int lowest = 3;
  if (status_fd >= lowest) lowest = status_fd + 1;
  if (plan.landlock_fd >= lowest) lowest = plan.landlock_fd + 1;
  int moved[3];
  for (int i = 0; i < 3; ++i) {
    const long fd = call(SYS_fcntl, plan.stdio[i], F_DUPFD_CLOEXEC, lowest);
    if (fd < 0) fail(status_fd, Step::kDupStdio, fd);
    moved[i] = static_cast<int>(fd);
  }
  // dup3 rather than dup2 (arm64 has no dup2); never the same fd: moved[i] >= 3 > i.
  for (int i = 0; i < 3; ++i)
    if (long r = call(SYS_dup3, moved[i], i, 0); r < 0) fail(status_fd, Step::kDupStdio, r);

  if (long r = call(SYS_setsid); r < 0) fail(status_fd, Step::kSetsid, r);
  // status_fd and the Landlock ruleset are close-on-exec; everything else goes now.
  if (int r = close_except(3, status_fd, plan.landlock_fd); r != 0) fail(status_fd, Step::kCloseFds, r);

  // Raw syscall, like every set*id call here: glibc's setgroups/setresuid/setresgid broadcast the
  // change to all threads (the setxid path: signals and a lock), which is not async-signal-safe in
  // a child cloned from a multi-threaded parent whose other threads do not exist in this copy.
  if (plan.drop_groups) {
    if (long r = call(SYS_setgroups, 0, nullptr); r != 0) fail(status_fd, Step::kSetgroups, r);
  }
  if (plan.loopback) {
    if (long r = bring_up_loopback(); r != 0) fail(status_fd, Step::kLoopback, r);
  }
  if (!plan.protect.empty()) {
    if (plan.root_ops.empty()) {
      if (long r = call(SYS_mount, nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr); r != 0)
        fail(status_fd, Step::kMountSlave, r);
    }
    for (const ProtectedMount& m : plan.protect) {
      long r = call(SYS_mount, m.path.c_str(), m.path.c_str(), nullptr, MS_BIND | MS_REC, nullptr);
      if (r == 0) r = call(SYS_mount, nullptr, m.path.c_str(), nullptr, m.flags, nullptr);
      if (r != 0) fail(status_fd, Step::kProtect, r);
    }
  }

  // prlimit64 on ourselves: setrlimit's system call (arm64 has only this one).
  for (const Limit& limit : plan.limits)
    if (long r = call(SYS_prlimit64, 0, limit.resource, &limit.value, nullptr); r != 0)
      fail(status_fd, Step::kRlimits, r);

  if (plan.have_setpcap) {
    // Uid 0 (in its namespace) regains no capability through execve, and the bits cannot change.
    const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                               SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                               SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (long r = call(SYS_prctl, PR_SET_SECUREBITS, bits, 0, 0, 0); r != 0) fail(status_fd, Step::kSecurebits, r);
    for (unsigned long cap = 0; cap < 64; ++cap) {
      const long in_set = call(SYS_prctl, PR_CAPBSET_READ, cap, 0, 0, 0);
      if (in_set < 0) break;  // EINVAL past CAP_LAST_CAP
      if (in_set == 1) {
        if (long r = call(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0); r != 0) fail(status_fd, Step::kCapBounding, r);
      }
    }
  }
  if (plan.identity) {
    // Raw syscalls (see setgroups above): the kernel changes this thread's ids, the only thread.
    const long g = static_cast<long>(plan.inner_gid), u = static_cast<long>(plan.inner_uid);
    long r = call(SYS_setresgid, g, g, g);
    if (r == 0) r = call(SYS_setresuid, u, u, u);
    if (r != 0) fail(status_fd, Step::kIdentity, r);
    // A change of credentials clears the parent-death signal: arm it again, then make sure the
    // parent did not die in between (getppid() reads 0 in a PID namespace, but the parent holds
    // the status pipe's read end until we exec: POLLERR once it is gone).
    if (long e = call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); e != 0) fail(status_fd, Step::kPdeathsig, e);
    struct pollfd p = {status_fd, 0, 0};
    const struct timespec now = {0, 0};
    if (call(SYS_ppoll, &p, 1, &now, nullptr, 0) != 0 && (p.revents & POLLERR)) leave(kExitParentGone);
  }
  if (long r = call(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); r != 0)
    fail(status_fd, Step::kCapAmbient, r);
  if (int r = sys::raw::capset_zero(); r != 0) fail(status_fd, Step::kCapset, r);
  if (long r = call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); r != 0) fail(status_fd, Step::kNoNewPrivs, r);

  if (long r = call(SYS_chdir, plan.workspace.c_str()); r != 0) fail(status_fd, Step::kChdir, r);
  if (plan.landlock_fd >= 0) {
    if (int r = sys::raw::landlock_restrict_self(plan.landlock_fd); r != 0) fail(status_fd, Step::kLandlock, r);
    call(SYS_close, plan.landlock_fd);
  }
  if (plan.init) {
    // Every layer but seccomp is in force and inherited; the policy's filter may refuse fork.
    // The forwarded signals and SIGCHLD stay blocked in the init, which takes them with
    // sigtimedwait; the target gets an empty mask back before it execs.
    std::uint64_t waited = bit(SIGCHLD);
    for (int sig : kForwarded) waited |= bit(sig);
    if (long r = call(SYS_rt_sigprocmask, SIG_BLOCK, &waited, nullptr, kMaskBytes); r != 0)
      fail(status_fd, Step::kInit, r);
    const long init = call(SYS_getpid);
    // A plain fork through the raw syscall: glibc's fork() would run the parent's atfork handlers.
    const long target = call(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (target < 0) fail(status_fd, Step::kInit, target);
    if (target > 0) run_init(plan, static_cast<pid_t>(target), waited, status_fd);
    // The target: killed with its init even where no PID namespace does it.
    if (long r = call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); r != 0) fail(status_fd, Step::kPdeathsig, r);
    if (call(SYS_getppid) != init) leave(kExitParentGone);
    if (long r = call(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, kMaskBytes); r != 0)
      fail(status_fd, Step::kInit, r);
  }
  // Last: from here on the filter also applies to what we do ourselves.
  if (!plan.bpf.empty()) {
    struct sock_fprog prog;
    prog.len = static_cast<unsigned short>(plan.bpf.size());
    prog.filter = const_cast<sock_filter*>(plan.bpf.data());
    if (int r = sys::raw::seccomp_set_filter(&prog); r != 0) fail(status_fd, Step::kSeccomp, r);
  }
  const long r = call(SYS_execve, plan.executable.c_str(), plan.argv.data(), plan.envp.data());
  fail(status_fd, Step::kExecve, r);
}

}  // namespace sandbox
