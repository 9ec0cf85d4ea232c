// Runs in the child between clone and execve.
//
// ASYNC-SIGNAL-SAFE CODE ONLY. The child is a copy of a possibly multi-threaded parent: another
// thread may have held malloc's or stdio's lock at clone time. No malloc, no new, no std::string,
// no locks, no logging, no exceptions, no stdio, no atexit handlers. Only raw syscalls and thin
// libc syscall wrappers on data the parent prepared. Leave only through execve or _exit.
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

// Exit status when the supervisor vanished before releasing us; nobody reads the status pipe then.
constexpr int kExitParentGone = 125;
constexpr int kExitStepFailed = 126;

[[noreturn]] void fail(int status_fd, Step step, int error) noexcept {
  StatusRecord record{static_cast<std::int32_t>(step), error};
  // A pipe write of <= PIPE_BUF bytes is atomic; nothing useful to do if it fails.
  while (::write(status_fd, &record, sizeof record) < 0 && errno == EINTR) {
  }
  ::_exit(kExitStepFailed);
}

int close_except(int lowest, int keep_a, int keep_b) noexcept {
  if (keep_a > keep_b) {
    int t = keep_a;
    keep_a = keep_b;
    keep_b = t;
  }
  unsigned next = static_cast<unsigned>(lowest);
  for (int keep : {keep_a, keep_b}) {
    if (keep < lowest) continue;
    if (static_cast<unsigned>(keep) > next && sys::close_range(next, static_cast<unsigned>(keep) - 1, 0) != 0)
      return -1;
    next = static_cast<unsigned>(keep) + 1;
  }
  return sys::close_range(next, ~0U, 0);
}

int bring_up_loopback() noexcept {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::memcpy(ifr.ifr_name, "lo", 3);
  int rc = ::ioctl(fd, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    rc = ::ioctl(fd, SIOCSIFFLAGS, &ifr);
  }
  int err = errno;
  ::close(fd);
  errno = err;
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
  ssize_t n;
  while ((n = ::recvmsg(sync_fd, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
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
  int dir = ::open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  sys::LandlockPathBeneathAttr rule;
  std::memset(&rule, 0, sizeof rule);
  rule.allowed_access = access;
  rule.parent_fd = dir;
  if (dir < 0 || sys::landlock_add_rule(plan.landlock_fd, sys::kLandlockRulePathBeneath, &rule) != 0)
    fail(status_fd, step, errno);
  ::close(dir);
}

// Replaces the host's tree with the new root (see rootfs.hpp): the tmpfs goes over "/", gets the
// skeleton and the clones, becomes the root through pivot_root, and the host's tree is detached.
void build_root(const Plan& plan, int* fds, int received, int status_fd) noexcept {
  const int binds = static_cast<int>(plan.root_binds.size());
  // Without a user namespace the new mount namespace still shares propagation with the host's:
  // make it a slave first so that nothing we mount shows up outside.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) fail(status_fd, Step::kMountSlave, errno);
  if (plan.parent_clones) {
    if (received != binds + 1) fail(status_fd, Step::kReceiveMounts, EPROTO);
  } else {
    if (received != 0) fail(status_fd, Step::kReceiveMounts, EPROTO);
    fds[0] = sys::make_root_tmpfs();
    if (fds[0] < 0) fail(status_fd, Step::kRootTmpfs, errno);
    for (int i = 0; i < binds; ++i) {
      const RootBind& b = plan.root_binds[static_cast<std::size_t>(i)];
      fds[i + 1] = sys::open_tree_clone(AT_FDCWD, b.source.c_str(), 0);
      if (fds[i + 1] < 0) fail(status_fd, Step::kRootClone, errno);
      sys::MountAttr ro;
      std::memset(&ro, 0, sizeof ro);
      ro.attr_set = MOUNT_ATTR_RDONLY;
      if (!b.writable && sys::mount_setattr(fds[i + 1], "", AT_EMPTY_PATH | AT_RECURSIVE, &ro) != 0)
        fail(status_fd, Step::kRootClone, errno);
    }
  }
  const int root = fds[0];
  if (::chdir("/") != 0 ||
      ::syscall(SYS_move_mount, root, "", AT_FDCWD, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
    fail(status_fd, Step::kRootTmpfs, errno);
  for (const RootOp& op : plan.root_ops) {
    const char* path = op.path.c_str();
    int rc = 0;
    switch (op.kind) {
      case RootOp::kDir:
        rc = ::mkdirat(root, path, 0755);
        break;
      case RootOp::kFile: {
        int fd = ::openat(root, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        rc = fd < 0 ? -1 : ::close(fd);
        break;
      }
      case RootOp::kSymlink:
        rc = ::symlinkat(op.target.c_str(), root, path);
        break;
      case RootOp::kBind:
        rc = sys::move_mount_fd(fds[op.bind + 1], root, path);
        if (rc == 0) ::close(fds[op.bind + 1]);
        break;
      case RootOp::kProc: {
        // Made here, as pid 1 of the new PID namespace, while the host's /proc is still visible.
        int proc = sys::make_proc_mount();
        if (proc < 0 || sys::move_mount_fd(proc, root, path) != 0) fail(status_fd, Step::kProcMount, errno);
        ::close(proc);
        break;
      }
      case RootOp::kHome: {
        // Owned by the ids the child will run as: the workspace owner's with the identity layer,
        // else the ones it has now (ids of its own user namespace, read by the kernel there).
        const unsigned uid = plan.identity ? plan.inner_uid : ::geteuid();
        const unsigned gid = plan.identity ? plan.inner_gid : ::getegid();
        int home = sys::make_home_tmpfs(uid, gid, plan.home_writable ? plan.home_size : nullptr);
        if (home < 0 || sys::move_mount_fd(home, root, path) != 0) fail(status_fd, Step::kHomeMount, errno);
        ::close(home);
        break;
      }
    }
    if (rc != 0 && !(errno == EEXIST && op.kind != RootOp::kBind)) fail(status_fd, Step::kRootBuild, errno);
  }
  if (::fchdir(root) != 0 || sys::pivot_root(".", ".") != 0 || ::umount2(".", MNT_DETACH) != 0 || ::chdir("/") != 0)
    fail(status_fd, Step::kPivotRoot, errno);
  sys::MountAttr ro;
  std::memset(&ro, 0, sizeof ro);
  ro.attr_set = MOUNT_ATTR_RDONLY;
  if (sys::mount_setattr(AT_FDCWD, "/", 0, &ro) != 0) fail(status_fd, Step::kPivotRoot, errno);
  ::close(root);
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
[[noreturn]] void run_init(const Plan& plan, pid_t target, const sigset_t& waited, int status_fd) noexcept {
  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(plan.init_bpf.size());
  prog.filter = const_cast<sock_filter*>(plan.init_bpf.data());
  if (sys::seccomp_set_filter(&prog) != 0) {
    const int err = errno;
    ::syscall(SYS_kill, target, SIGKILL);
    fail(status_fd, Step::kInit, err);  // before the parent can see EOF: the launch fails
  }
  // The target holds the other copy of the status pipe: the parent sees EOF once it has exec'd.
  ::syscall(SYS_close, status_fd);
  for (int fd = 0; fd < 3; ++fd) ::syscall(SYS_close, fd);
  for (;;) {
    siginfo_t info;
    long sig = ::syscall(SYS_rt_sigtimedwait, &waited, &info, nullptr, NSIG / 8);
    if (sig < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      ::syscall(SYS_kill, target, SIGKILL);
      ::syscall(SYS_exit_group, kExitStepFailed);
    }
    if (sig != SIGCHLD) {
      ::syscall(SYS_kill, target, sig);
      continue;
    }
    for (;;) {
      int status = 0;
      long reaped = ::syscall(SYS_wait4, -1, &status, WNOHANG, nullptr);
      if (reaped <= 0) break;
      if (reaped == target) ::syscall(SYS_exit_group, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
  }
}

}  // namespace

void run_child(const Plan& plan, const ChildFds& fds) noexcept {
  const int status_fd = fds.status, sync_fd = fds.sync;
  // The tree limits first, before this process can do anything else. Single-threaded, we move only
  // ourselves ("0" into v1 tasks), which spares the kernel's global threadgroup lock (cgroup.hpp).
  for (int i = 0; i < fds.cgroup_join_count; ++i) {
    if (::write(fds.cgroup_join[i], "0", 1) != 1) fail(status_fd, Step::kCgroupJoin, errno);
    ::close(fds.cgroup_join[i]);
  }
  // The parent blocked every signal around clone so that none of its handlers runs here. Restore
  // default dispositions (ignored signals would survive execve) before unblocking.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);  // EINVAL for libc's own
  }
  sigset_t none;
  ::sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(status_fd, Step::kSignals, errno);

  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(status_fd, Step::kPdeathsig, errno);
  if (plan.dumpable_for_maps) {
    // Until the parent has written our id maps a same-uid process could ptrace us and read the
    // copy of the supervisor's memory we hold; the window closes right after the release below.
    if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) fail(status_fd, Step::kDumpable, errno);
    StatusRecord ready{static_cast<std::int32_t>(Step::kMapsReady), 0};
    if (::write(status_fd, &ready, sizeof ready) != static_cast<ssize_t>(sizeof ready)) ::_exit(kExitParentGone);
  }
  // The parent releases us by sending one byte, after writing our uid/gid maps and cgroup. If it
  // died before our PR_SET_PDEATHSIG (getppid() cannot tell in a new PID namespace: it reads 0),
  // its end of the socket is closed and we see EOF instead.
  int root_fds[kMaxRootBinds + 1];
  const int received = receive_release(sync_fd, root_fds, kMaxRootBinds + 1, status_fd);
  if (received < 0) ::_exit(kExitParentGone);
  ::close(sync_fd);
  if (plan.dumpable_for_maps && ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(status_fd, Step::kDumpable, errno);
  // Before anything else closes fds: the received clones are still open here.
  if (!plan.root_ops.empty()) build_root(plan, root_fds, received, status_fd);

  // Move the three request fds above every fd we still need, then into place; dup2 clears
  // close-on-exec on 0, 1 and 2.
  int lowest = 3;
  if (status_fd >= lowest) lowest = status_fd + 1;
  if (plan.landlock_fd >= lowest) lowest = plan.landlock_fd + 1;
  int moved[3];
  for (int i = 0; i < 3; ++i) {
    moved[i] = ::fcntl(plan.stdio[i], F_DUPFD_CLOEXEC, lowest);
    if (moved[i] < 0) fail(status_fd, Step::kDupStdio, errno);
  }
  for (int i = 0; i < 3; ++i)
    if (::dup2(moved[i], i) < 0) fail(status_fd, Step::kDupStdio, errno);

  if (::setsid() < 0) fail(status_fd, Step::kSetsid, errno);
  // status_fd and the Landlock ruleset are close-on-exec; everything else goes now.
  if (close_except(3, status_fd, plan.landlock_fd) != 0) fail(status_fd, Step::kCloseFds, errno);

  // Raw syscall, like every set*id call here: glibc's setgroups/setresuid/setresgid broadcast the
  // change to all threads (the setxid path: signals and a lock), which is not async-signal-safe in
  // a child cloned from a multi-threaded parent whose other threads do not exist in this copy.
  if (plan.drop_groups && ::syscall(SYS_setgroups, 0, nullptr) != 0) fail(status_fd, Step::kSetgroups, errno);
  if (plan.loopback && bring_up_loopback() != 0) fail(status_fd, Step::kLoopback, errno);
  if (!plan.protect.empty()) {
    if (plan.root_ops.empty() && ::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
      fail(status_fd, Step::kMountSlave, errno);
    for (const ProtectedMount& m : plan.protect) {
      if (::mount(m.path.c_str(), m.path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
          ::mount(nullptr, m.path.c_str(), nullptr, m.flags, nullptr) != 0)
        fail(status_fd, Step::kProtect, errno);
    }
  }

  for (const Limit& limit : plan.limits)
    if (::setrlimit(static_cast<__rlimit_resource>(limit.resource), &limit.value) != 0)
      fail(status_fd, Step::kRlimits, errno);

  if (plan.have_setpcap) {
    // Uid 0 (in its namespace) regains no capability through execve, and the bits cannot change.
    const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                               SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                               SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) fail(status_fd, Step::kSecurebits, errno);
    for (unsigned long cap = 0; cap < 64; ++cap) {
      int in_set = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
      if (in_set < 0) break;  // EINVAL past CAP_LAST_CAP
      if (in_set == 1 && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) fail(status_fd, Step::kCapBounding, errno);
    }
  }
  if (plan.identity) {
    // Raw syscalls (see setgroups above): the kernel changes this thread's ids, the only thread.
    const long g = static_cast<long>(plan.inner_gid), u = static_cast<long>(plan.inner_uid);
    if (::syscall(SYS_setresgid, g, g, g) != 0 || ::syscall(SYS_setresuid, u, u, u) != 0)
      fail(status_fd, Step::kIdentity, errno);
    // A change of credentials clears the parent-death signal: arm it again, then make sure the
    // parent did not die in between (getppid() reads 0 in a PID namespace, but the parent holds
    // the status pipe's read end until we exec: POLLERR once it is gone).
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(status_fd, Step::kPdeathsig, errno);
    struct pollfd p = {status_fd, 0, 0};
    if (::poll(&p, 1, 0) != 0 && (p.revents & POLLERR)) ::_exit(kExitParentGone);
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) fail(status_fd, Step::kCapAmbient, errno);
  if (sys::capset_zero() != 0) fail(status_fd, Step::kCapset, errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(status_fd, Step::kNoNewPrivs, errno);

  if (::chdir(plan.workspace.c_str()) != 0) fail(status_fd, Step::kChdir, errno);
  if (plan.landlock_fd >= 0) {
    if (sys::landlock_restrict_self(plan.landlock_fd) != 0) fail(status_fd, Step::kLandlock, errno);
    ::close(plan.landlock_fd);
  }
  if (plan.init) {
    // Every layer but seccomp is in force and inherited; the policy's filter may refuse fork.
    // The forwarded signals and SIGCHLD stay blocked in the init, which takes them with
    // sigtimedwait; the target gets an empty mask back before it execs.
    sigset_t waited;
    ::sigemptyset(&waited);
    for (int sig : kForwarded) ::sigaddset(&waited, sig);
    ::sigaddset(&waited, SIGCHLD);
    if (::sigprocmask(SIG_BLOCK, &waited, nullptr) != 0) fail(status_fd, Step::kInit, errno);
    const pid_t init = ::getpid();
    // A plain fork through the raw syscall: glibc's fork() would run the parent's atfork handlers.
    const long target = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0);
    if (target < 0) fail(status_fd, Step::kInit, errno);
    if (target > 0) run_init(plan, static_cast<pid_t>(target), waited, status_fd);
    // The target: killed with its init even where no PID namespace does it.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(status_fd, Step::kPdeathsig, errno);
    if (::getppid() != init) ::_exit(kExitParentGone);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(status_fd, Step::kInit, errno);
  }
  // Last: from here on the filter also applies to what we do ourselves.
  if (!plan.bpf.empty()) {
    struct sock_fprog prog;
    prog.len = static_cast<unsigned short>(plan.bpf.size());
    prog.filter = const_cast<sock_filter*>(plan.bpf.data());
    if (sys::seccomp_set_filter(&prog) != 0) fail(status_fd, Step::kSeccomp, errno);
  }
  ::execve(plan.executable.c_str(), plan.argv.data(), plan.envp.data());
  fail(status_fd, Step::kExecve, errno);
}

}  // namespace sandbox
