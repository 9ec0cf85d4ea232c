#include "sandbox/launch.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

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

// What a child cloned with CLONE_VM starts from: it reads this in the parent's memory until it
// has exec'd, so it lives in the launch's state, never on start()'s stack.
struct ChildStart {
  const Plan* plan = nullptr;
  ChildFds fds;
};

// Cloning with CLONE_VM (as posix_spawn does) spares the kernel a copy of the supervisor's page
// tables at every launch and the supervisor the copy-on-write faults after it: fork write-protects
// every page the supervisor has, and while the copy runs (preempted, on a busy machine, for
// milliseconds) every page fault of every supervisor thread waits for the memory map's lock. The
// child then runs in the supervisor's memory on a stack of its own until execve, which is why
// run_child writes nothing but its own stack (child.cpp), and why the thread that cloned must
// outlive that execve (the child reads its stack-protector canary; PR_SET_PDEATHSIG asks the same).
// What is shared with the supervisor until then, and so rules a plan out (share_memory below):
//   - dumpable belongs to the memory. A child that makes itself dumpable for its id maps
//     (dumpable_for_maps) would make the supervisor dumpable; the identity layer's setresuid sets
//     it to fs.suid_dumpable, so only where that is 0 and the launcher already is not dumpable.
//   - an init lives on beside the target: never in the supervisor's memory.
//   - CLONE_NEWTIME would be entered only at execve: excluded to keep the plan simple.
//   - the OOM killer kills every process that shares its victim's memory. A child's own memory
//     cgroup cannot pick it before execve (its set-up charges far less than the 16 MiB floor of
//     tree_limits.memory_mb); a machine-wide OOM that picks it in those milliseconds takes the
//     supervisor with it, as it would have picked the supervisor (the same memory, the same score).
// Not in sanitizer or fuzz builds (their runtimes would act as the cloning thread), before Linux
// 5.4 (clone3 read args->stack as the stack pointer until 5.3.11), and on x86_64 only: the entry
// below. Any clone that fails with CLONE_VM is tried once more as a plain clone.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(hwaddress_sanitizer) || __has_feature(coverage_sanitizer)
#define SANDBOX_INSTRUMENTED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(SUBAGENT_SANITIZER_BUILD)
#define SANDBOX_INSTRUMENTED 1
#endif
#if defined(__x86_64__) && !defined(SANDBOX_INSTRUMENTED)
#define SANDBOX_CLONE_VM 1

[[noreturn]] void child_entry(void* start) noexcept {
  const auto* s = static_cast<const ChildStart*>(start);
  run_child(*s->plan, s->fds);
}

// clone3 for a child with a stack of its own (args->stack): it starts there with the caller's
// registers but rax (0) and rsp, calls entry(arg) and never returns. The caller gets the pid or a
// negative errno. entry and arg travel in r12 and r13, which the kernel leaves as they were.
long clone3_on_stack(struct clone_args* args, void (*entry)(void*), void* arg) noexcept {
  register long r12 asm("r12") = reinterpret_cast<long>(entry);
  register long r13 asm("r13") = reinterpret_cast<long>(arg);
  long ret = SYS_clone3;
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xorl %%ebp, %%ebp\n\t"
      "movq %%r13, %%rdi\n\t"
      "callq *%%r12\n\t"
      "ud2\n"
      "1:"
      : "+a"(ret)
      : "D"(args), "S"(sizeof *args), "r"(r12), "r"(r13)
      : "rcx", "r11", "memory", "cc");
  return ret;
}
#else
#define SANDBOX_CLONE_VM 0
#endif

bool kernel_at_least_5_4() noexcept {
  static const bool yes = [] {
    struct utsname u {};
    int major = 0, minor = 0;
    return ::uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
           (major > 5 || (major == 5 && minor >= 4));
  }();
  return yes;
}

// A change of the child's uid leaves the shared memory's dumpable flag as it is: the kernel sets it
// to fs.suid_dumpable, so both must be 0 already (the supervisor's protect_self; a process that is
// still dumpable, a test or a library user, would lose it, and so would whatever it forks later).
bool setuid_keeps_memory_as_it_is() noexcept {
  if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) return false;
  Fd f(::open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC));
  char c = 0;
  return f.get() >= 0 && ::read(f.get(), &c, 1) == 1 && c == '0';
}

// The stacks of CLONE_VM children, kept for the next launch: no mmap or munmap (the memory map's
// lock, taken for writing) per launch. Each is kStackBytes with a PROT_NONE guard page below.
constexpr std::size_t kStackBytes = 128 << 10;
constexpr std::size_t kKeptStacks = 16;

class StackPool {
 public:
  static std::size_t mapped_bytes() noexcept { return kStackBytes + guard(); }
  // A stack's lowest address, or nullptr when none can be mapped.
  void* take() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        void* s = free_.back();
        free_.pop_back();
        return s;
      }
    }
    void* m = ::mmap(nullptr, mapped_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    if (::mprotect(m, guard(), PROT_NONE) != 0) {
      ::munmap(m, mapped_bytes());
      return nullptr;
    }
    return m;
  }
  // Only once the child using it has exec'd or is dead.
  void give_back(void* s) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.size() < kKeptStacks) {
        free_.push_back(s);
        return;
      }
    }
    ::munmap(s, mapped_bytes());
  }

 private:
  static std::size_t guard() noexcept { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }
  std::mutex mutex_;
  std::vector<void*> free_;
};

StackPool& stacks() {
  static StackPool* pool = new StackPool;  // never destroyed: launches may end during exit
  return *pool;
}

// Moves fd above the standard three (a supervisor started with one of them closed gets the pipe
// there, and the child's dup3 onto 0..2 would close it before execve), close-on-exec.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  if (moved < 0) throw SandboxError(std::string("launch: moving a pipe above fd 2 failed: ") + std::strerror(err));
  return moved;
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
  ChildStart start;        // what the child reads (in place, when it shares our memory)
  void* stack = nullptr;   // a CLONE_VM child's stack (from stacks()), until it exec'd or died

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (child.pid > 0) abandon();  // started, never finished: no child outlives its launch
    // Here the child has exec'd (EOF on the close-on-exec status pipe) or is dead and reaped.
    if (stack) stacks().give_back(stack);
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
  state->status_read = Fd(status_pipe[0]);
  Fd status_write(above_stdio(status_pipe[1]));
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync_pipe) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: socketpair failed: ") + std::strerror(err));
  }
  state->sync_write = Fd(sync_pipe[1]);
  Fd sync_read(above_stdio(sync_pipe[0]));

  std::optional<LaunchCgroups>& cgroups = state->cgroups;
  if (!plan.cgroups.empty()) cgroups.emplace(plan.cgroups);
  ChildStart& start = state->start;
  start.plan = &plan;
  start.fds.status = status_write.get();
  start.fds.sync = sync_read.get();
  start.fds.sync_peer = state->sync_write.get();
  if (cgroups) {
    start.fds.cgroup_join_count = cgroups->join_count();
    for (int i = 0; i < cgroups->join_count(); ++i) start.fds.cgroup_join[i] = cgroups->join_fds()[i];
  }
  const int into_fd = cgroups ? cgroups->clone_into_fd() : -1;

  // Whether the child runs in our memory until execve (see SANDBOX_CLONE_VM above); without a
  // stack for it (mmap failed), a plain clone.
  bool share_memory = SANDBOX_CLONE_VM && kernel_at_least_5_4() && !plan.init && !plan.dumpable_for_maps &&
                      !(plan.clone_flags & CLONE_NEWTIME) && (!plan.identity || setuid_keeps_memory_as_it_is());
  if (share_memory) {
    state->stack = stacks().take();
    share_memory = state->stack != nullptr;
  }

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
  // The pid, 0 in a forked child (never with CLONE_VM: that child starts in child_entry), or a
  // negative errno.
  auto clone = [&]() noexcept -> long {
#if SANDBOX_CLONE_VM
    if (share_memory) {
      struct clone_args shared = args;
      shared.flags |= CLONE_VM;
      shared.stack = reinterpret_cast<std::uintptr_t>(state->stack);
      shared.stack_size = StackPool::mapped_bytes();  // the guard page is PROT_NONE: an overflow faults
      const long got = clone3_on_stack(&shared, &child_entry, &start);
      if (got >= 0) return got;
      share_memory = false;  // whatever the kernel refused, once more as a plain clone
    }
#endif
    return sys::raw::clone3(&args);
  };
  bool v2_by_pid = false;
  long pid = clone();
  if (pid == -EINVAL && into_fd >= 0) {  // clone3 before Linux 5.7: no CLONE_INTO_CGROUP
    args.flags &= ~static_cast<std::uint64_t>(CLONE_INTO_CGROUP);
    args.cgroup = 0;
    pid = clone();
    v2_by_pid = true;
  }
  if (pid == -ENOSYS) {  // e.g. the supervisor itself runs under such a filter: a plain fork
    pid = sys::raw::clone_legacy(plan.clone_flags | CLONE_PIDFD | SIGCHLD, &pidfd);
    v2_by_pid = into_fd >= 0;
  }
  if (pid == 0) run_child(plan, start.fds);
  const int clone_errno = pid < 0 ? static_cast<int>(-pid) : 0;
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
