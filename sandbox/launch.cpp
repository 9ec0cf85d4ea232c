#include "sandbox/launch.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "cgroup.hpp"
#include "namespaces.hpp"
#include "plan.hpp"
#include "rootfs.hpp"
#include "syscalls.hpp"

namespace sandbox {
namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

void reap(pid_t pid) noexcept {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

const char* step_name(Step step) noexcept {
  switch (step) {
    case Step::kMapsReady:
      return "id_maps_ready";
    case Step::kSignals:
      return "reset_signals";
    case Step::kDumpable:
      return "dumpable_for_id_maps";
    case Step::kPdeathsig:
      return "pdeathsig";
    case Step::kDupStdio:
      return "dup_stdio";
    case Step::kSetsid:
      return "setsid";
    case Step::kCloseFds:
      return "close_fds";
    case Step::kSetgroups:
      return "setgroups";
    case Step::kLoopback:
      return "loopback_up";
    case Step::kMountSlave:
      return "mount_make_slave";
    case Step::kProtect:
      return "protect_read_only";
    case Step::kRlimits:
      return "setrlimit";
    case Step::kSecurebits:
      return "securebits";
    case Step::kCapBounding:
      return "capability_bounding_set";
    case Step::kCapAmbient:
      return "capability_ambient_clear";
    case Step::kCapset:
      return "capset";
    case Step::kNoNewPrivs:
      return "no_new_privs";
    case Step::kChdir:
      return "chdir_workspace";
    case Step::kLandlock:
      return "landlock_restrict_self";
    case Step::kSeccomp:
      return "seccomp_set_mode_filter";
    case Step::kExecve:
      return "execve";
    case Step::kRootClone:
      return "clone_root_path";
    case Step::kRootTmpfs:
      return "root_tmpfs";
    case Step::kRootBuild:
      return "build_root";
    case Step::kPivotRoot:
      return "pivot_root";
    case Step::kIdentity:
      return "set_identity";
    case Step::kReceiveMounts:
      return "receive_root_fds";
    case Step::kCgroupJoin:
      return "join_cgroup";
    case Step::kProcMount:
      return "mount_proc";
    case Step::kHomeMount:
      return "mount_private_home";
    case Step::kInit:
      return "init";
  }
  return "unknown";
}

Plan::~Plan() {
  if (landlock_fd >= 0) ::close(landlock_fd);
}

void PlanDeleter::operator()(Plan* p) const noexcept { delete p; }

Child launch(const Plan& plan) {
  int status_pipe[2], sync_pipe[2];  // sync: a socket, to pass the new root's fds (rootfs.hpp)
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: pipe2 failed: ") + std::strerror(err));
  }
  Fd status_read(status_pipe[0]), status_write(status_pipe[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync_pipe) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: socketpair failed: ") + std::strerror(err));
  }
  Fd sync_read(sync_pipe[0]), sync_write(sync_pipe[1]);

  Child child;
  std::optional<LaunchCgroups> cgroups;
  if (!plan.cgroups.empty()) cgroups.emplace(plan.cgroups);
  ChildFds fds{status_write.get(), sync_read.get(), cgroups ? cgroups->join_fds() : nullptr,
               cgroups ? cgroups->join_count() : 0};
  const int into_fd = cgroups ? cgroups->clone_into_fd() : -1;

  // No parent signal handler may run in the child (it would act on the parent's state).
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  struct clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = plan.clone_flags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (into_fd >= 0) {  // cgroup v2: born inside its cgroup, no migration at all
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<std::uint64_t>(into_fd);
  }
  bool v2_by_pid = false;
  long pid = sys::clone3(&args);
  if (pid < 0 && errno == EINVAL && into_fd >= 0) {  // clone3 before Linux 5.7: no CLONE_INTO_CGROUP
    args.flags &= ~static_cast<std::uint64_t>(CLONE_INTO_CGROUP);
    args.cgroup = 0;
    pid = sys::clone3(&args);
    v2_by_pid = true;
  }
  if (pid < 0 && errno == ENOSYS) {  // e.g. the supervisor itself runs under such a filter
    pid = sys::clone_legacy(plan.clone_flags | CLONE_PIDFD | SIGCHLD, &pidfd);
    v2_by_pid = into_fd >= 0;
  }
  if (pid == 0) run_child(plan, fds);
  int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (cgroups) cgroups->close_fds();
  if (pid < 0)
    throw SandboxError(std::string("sandbox step 'clone' failed: ") + std::strerror(clone_errno));
  child.pid = static_cast<pid_t>(pid);
  child.pidfd = pidfd;
  status_write.reset();
  sync_read.reset();

  auto abandon = [&]() noexcept {
    ::kill(child.pid, SIGKILL);
    reap(child.pid);
    ::close(child.pidfd);
  };
  // Reads one record: EOF means execve succeeded; a record names a step (kMapsReady, or a failure).
  auto read_status = [&](StatusRecord* record) {
    ssize_t n;
    while ((n = ::read(status_read.get(), record, sizeof *record)) < 0 && errno == EINTR) {
    }
    if (n == 0 || n == static_cast<ssize_t>(sizeof *record)) return n != 0;
    int read_errno = errno;
    abandon();
    throw SandboxError(std::string("launch: reading the child's status failed: ") +
                       (n < 0 ? std::strerror(read_errno) : "short record"));
  };
  auto step_failed = [&](const StatusRecord& record) -> SandboxError {
    abandon();
    std::string what =
        std::string("sandbox step '") + step_name(static_cast<Step>(record.step)) + "' failed";
    if (static_cast<Step>(record.step) == Step::kExecve) what += " for '" + plan.executable + "'";
    what += std::string(": ") + std::strerror(record.error);
    if (static_cast<Step>(record.step) == Step::kExecve && record.error == EACCES && !plan.exec_hint.empty())
      what += " (" + plan.exec_hint + ")";
    if (static_cast<Step>(record.step) == Step::kExecve) throw ExecError(what, record.error);
    return SandboxError(what);
  };
  StatusRecord record{};
  if (plan.dumpable_for_maps) {
    if (!read_status(&record)) {
      abandon();
      throw SandboxError("launch: the child exited before its id maps were written");
    }
    if (static_cast<Step>(record.step) != Step::kMapsReady) throw step_failed(record);
  }
  std::vector<int> root_fds;
  try {
    if (plan.identity) {
      const uid_t outside = kIdentityBase + static_cast<uid_t>(child.pid);
      write_id_maps(child.pid, plan.inner_uid, outside, plan.inner_gid, outside, plan.drop_groups);
    } else if (plan.user_ns) {
      write_id_maps(child.pid, plan.uid, plan.gid, plan.drop_groups);
    }
    if (v2_by_pid) cgroups->add_to_v2(child.pid);
    if (plan.parent_clones) root_fds = clone_roots(plan, child.pid);
    send_release(sync_write.get(), root_fds);
  } catch (...) {
    for (int fd : root_fds) ::close(fd);
    abandon();
    throw;
  }
  for (int fd : root_fds) ::close(fd);
  sync_write.reset();

  if (!read_status(&record)) {  // close-on-exec closed the pipe: execve succeeded
    if (cgroups) child.cgroups = cgroups->release();
    return child;
  }
  throw step_failed(record);
}

void release(const Child& child) noexcept { remove_cgroups(child.cgroups); }

}  // namespace sandbox
