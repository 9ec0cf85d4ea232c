#include "sandbox/launch.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <utility>

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
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
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

// Everything one launch holds between start() and the end of finish().
struct PendingLaunch::State {
  const Plan* plan = nullptr;
  Fd status_read, sync_write;
  std::optional<LaunchCgroups> cgroups;
  bool v2_by_pid = false;  // cgroup v2 without CLONE_INTO_CGROUP: the parent moves the child
  bool released = false;   // the id maps, cgroup and root fds are done and the child is released
  Child child;             // pid and pidfd until finish() hands them over (then pid is -1)

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (child.pid > 0) abandon();  // started, never finished: no child outlives its launch
  }

  void abandon() noexcept {
    ::kill(child.pid, SIGKILL);
    reap(child.pid);
    ::close(child.pidfd);
    child.pid = -1;
    child.pidfd = -1;
  }

  // Reads one record: EOF means execve succeeded; a record names a step (kMapsReady, or a
  // failure). nullopt: nothing to read yet (a non-blocking fd that was not readable).
  std::optional<bool> read_status(StatusRecord* record) {
    ssize_t n;
    while ((n = ::read(status_read.get(), record, sizeof *record)) < 0 && errno == EINTR) {
    }
    if (n == 0 || n == static_cast<ssize_t>(sizeof *record)) return n != 0;
    int read_errno = errno;
    if (n < 0 && (read_errno == EAGAIN || read_errno == EWOULDBLOCK)) return std::nullopt;
    abandon();
    throw SandboxError(std::string("launch: reading the child's status failed: ") +
                       (n < 0 ? std::strerror(read_errno) : "short record"));
  }

  [[noreturn]] void step_failed(const StatusRecord& record) {
    abandon();
    if (static_cast<Step>(record.step) == Step::kProcMount && plan->assumed_proc) {
      private_proc_refused_at_launch();
      throw NamespaceRefusedError(std::string("sandbox step 'mount_proc' failed: ") + std::strerror(record.error) +
                                  " (a procfs of the child's own was assumed; prepare again to probe it)");
    }
    std::string what = std::string("sandbox step '") + step_name(static_cast<Step>(record.step)) + "' failed";
    if (static_cast<Step>(record.step) == Step::kExecve) what += " for '" + plan->executable + "'";
    what += std::string(": ") + std::strerror(record.error);
    if (static_cast<Step>(record.step) == Step::kExecve && record.error == EACCES && !plan->exec_hint.empty())
      what += " (" + plan->exec_hint + ")";
    if (static_cast<Step>(record.step) == Step::kExecve) throw ExecError(what, record.error);
    throw SandboxError(what);
  }

  // The parent's half before the child may go on: its id maps, its cgroup (v2 without
  // CLONE_INTO_CGROUP), the new root's clones; then one byte (with the fds) releases it.
  void release_child() {
    std::vector<int> root_fds;
    try {
      if (plan->identity) {
        const uid_t outside = kIdentityBase + static_cast<uid_t>(child.pid);
        write_id_maps(child.pid, plan->inner_uid, outside, plan->inner_gid, outside, plan->drop_groups);
      } else if (plan->user_ns) {
        write_id_maps(child.pid, plan->uid, plan->gid, plan->drop_groups);
      }
      if (v2_by_pid) cgroups->add_to_v2(child.pid);
      if (plan->parent_clones) root_fds = clone_roots(*plan, child.pid);
      send_release(sync_write.get(), root_fds);
    } catch (...) {
      for (int fd : root_fds) ::close(fd);
      abandon();
      throw;
    }
    for (int fd : root_fds) ::close(fd);
    sync_write.reset();
    released = true;
  }
};

PendingLaunch::PendingLaunch(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
PendingLaunch::PendingLaunch(PendingLaunch&&) noexcept = default;
PendingLaunch& PendingLaunch::operator=(PendingLaunch&&) noexcept = default;
PendingLaunch::~PendingLaunch() = default;

pid_t PendingLaunch::pid() const noexcept { return state_ ? state_->child.pid : -1; }
int PendingLaunch::pidfd() const noexcept { return state_ ? state_->child.pidfd : -1; }
int PendingLaunch::status_fd() const noexcept { return state_ ? state_->status_read.get() : -1; }

std::optional<Child> PendingLaunch::finish() {
  if (!state_ || state_->child.pid <= 0) throw SandboxError("launch: finish() called on a launch that is already over");
  State& s = *state_;
  StatusRecord record{};
  try {
    const std::optional<bool> got = s.read_status(&record);
    if (!got) return std::nullopt;  // not readable yet: wait for status_fd() again
    if (!s.released) {              // only with dumpable_for_maps: the child waits for its id maps
      if (!*got) {
        s.abandon();
        throw SandboxError("launch: the child exited before its id maps were written");
      }
      if (static_cast<Step>(record.step) != Step::kMapsReady) s.step_failed(record);
      s.release_child();
      return std::nullopt;
    }
    if (*got) s.step_failed(record);
  } catch (...) {  // the child is killed and reaped; the launch is over
    state_.reset();
    throw;
  }
  // close-on-exec closed the pipe: execve succeeded
  Child child = s.child;
  if (s.cgroups) child.cgroups = s.cgroups->release();
  s.child.pid = -1;
  s.child.pidfd = -1;
  state_.reset();
  return child;
}

PendingLaunch start(const Plan& plan) {
  int status_pipe[2], sync_pipe[2];  // sync: a socket, to pass the new root's fds (rootfs.hpp)
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: pipe2 failed: ") + std::strerror(err));
  }
  auto state = std::make_unique<PendingLaunch::State>();
  state->plan = &plan;
  Fd status_write(status_pipe[1]);
  state->status_read = Fd(status_pipe[0]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync_pipe) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: socketpair failed: ") + std::strerror(err));
  }
  Fd sync_read(sync_pipe[0]);
  state->sync_write = Fd(sync_pipe[1]);

  std::optional<LaunchCgroups>& cgroups = state->cgroups;
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
  if (pid < 0) {
    std::string what = std::string("sandbox step 'clone' failed: ") + std::strerror(clone_errno);
    // What clone gives for a namespace it refuses: disabled or unsupported (EINVAL, EPERM), too
    // many of a kind or nested too deep (ENOSPC, EUSERS).
    const bool refusal =
        clone_errno == EINVAL || clone_errno == EPERM || clone_errno == ENOSPC || clone_errno == EUSERS;
    if (plan.assumed_namespaces && plan.clone_flags != 0 && refusal) {
      namespace_refused_at_launch();
      throw NamespaceRefusedError(what + " (the namespaces were assumed; prepare again to probe them)");
    }
    throw SandboxError(what);
  }
  state->child.pid = static_cast<pid_t>(pid);
  state->child.pidfd = pidfd;
  state->v2_by_pid = v2_by_pid;
  status_write.reset();
  sync_read.reset();
  // Without dumpable_for_maps the child waits for nothing but the release: give it now, so that
  // the next news on the status pipe is exec or a failed step.
  if (!plan.dumpable_for_maps) state->release_child();
  return PendingLaunch(std::move(state));
}

Child launch(const Plan& plan) {
  PendingLaunch pending = start(plan);
  for (;;) {  // the status fd is blocking: each finish() waits for the child's next record
    if (std::optional<Child> child = pending.finish()) return std::move(*child);
  }
}

Launched prepare_and_launch(const Policy& policy, const LaunchRequest& request,
                            const std::function<void(const Plan&)>& on_plan) {
  for (int attempt = 0;; ++attempt) {
    Launched out{prepare(policy, request), {}};
    if (on_plan) on_plan(*out.plan);
    try {
      out.child = launch(*out.plan);
      return out;
    } catch (const NamespaceRefusedError&) {
      // The refusal is recorded: this prepare probes, and its plan never throws this again.
      if (attempt > 0) throw;
    }
  }
}

void release(const Child& child) noexcept { remove_cgroups(child.cgroups); }

}  // namespace sandbox
