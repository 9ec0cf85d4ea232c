// Launching a process under a sandbox plan.
//
//   PlanPtr plan = sandbox::prepare(policy, request);  // parent: allocates, compiles seccomp, opens
//                                                      // Landlock, plans the root (prepare.cpp)
//   Child child = sandbox::launch(*plan);              // clone3 (CLONE_VM where it can, launch.cpp);
//                                                      // run_child (raw syscalls only, child.cpp);
//                                                      // execve. Or start() + finish(), below.
//
// Errors: exceptions for everything the caller asked that cannot be done (SandboxError, ExecError
// for the execve step; what() names the step or the field and the errno text); layer statuses are
// values (LayerStatus: applied, or not with the reason), an error only when sandbox.required names
// the layer. A failed step never lets the target run unsandboxed. Call launch() or start() from a
// thread that will outlive the child (PR_SET_PDEATHSIG fires when the forking *thread* exits): in
// the supervisor that is a thread of the offload pool, which lives as long as the process.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/layer.hpp"
#include "sandbox/policy.hpp"

namespace sandbox {

class SandboxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The sandbox was set up but execve of the program failed in it; `error` is its errno (ENOENT: no
// such program in the child's root, EACCES: not executable there or refused by Landlock).
class ExecError : public SandboxError {
 public:
  ExecError(const std::string& what, int error) : SandboxError(what), error(error) {}
  int error;
};

// The kernel refused a namespace at the launch's clone, or the child's own procfs, which prepare()
// had assumed without probing (a probe costs a fork per namespace type at every start; the clone
// itself answers instead). Nothing of the target ran; the child, if any, is killed and reaped. The
// refusal is recorded for this process: prepare() again probes and plans exactly what the kernel
// grants (a refused layer reported as missing, a required one refused), and that plan's launch
// never throws this. prepare_and_launch() does that retry; start()'s callers do it themselves.
class NamespaceRefusedError : public SandboxError {
 public:
  using SandboxError::SandboxError;
};

struct LaunchRequest {
  std::string executable;              // absolute path of the program to exec
  std::vector<std::string> argv;       // argv[0] included
  std::filesystem::path workspace;     // the child's cwd; substituted for ${workspace}
  std::filesystem::path child_dir;     // substituted for ${child}
  std::vector<std::string> extra_env;  // "NAME=value" set by the caller (never secrets)
  // Parent fds that become the child's 0, 1 and 2. Every other fd is closed in the child.
  int stdin_fd = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;
  // "/", the home directory, system directories... are refused as the workspace or a write root
  // unless this is set (sandbox/workspace_guard.hpp; the CLI's --allow-unsafe-workspace).
  bool allow_unsafe_workspace = false;
  // A minimal init as PID 1 of the PID namespace, with the target as its only child: it forwards
  // SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH to the target, reaps orphans and
  // exits with the target's status (128 + N when signal N killed it). Without it the target is
  // PID 1 itself and ignores every signal it has no handler for (the sandbox CLI's --as-pid-1).
  bool init = false;
};

struct LayerStatus {
  LayerStatus() = default;
  LayerStatus(Layer layer, bool applied, std::string detail)
      : layer(layer), name(to_string(layer)), applied(applied), detail(std::move(detail)) {}
  Layer layer = Layer::kNoNewPrivs;
  std::string name;  // to_string(layer), e.g. "seccomp": the spelling reports and policies use
  bool applied = false;
  std::string detail;  // e.g. "ABI 7", or why it is missing
};

class Plan;  // opaque, prepared data (sandbox/plan.hpp, private to the library)

struct PlanDeleter {
  void operator()(Plan* p) const noexcept;
};
using PlanPtr = std::unique_ptr<Plan, PlanDeleter>;

// Builds the plan in the parent: no child exists yet. Throws SandboxError for a bad request (names
// the request field), a policy this kernel cannot meet (a layer sandbox.required names, protected
// paths without the mount namespace) or a path that cannot be opened; UnsafeWorkspaceError, a
// SandboxError (sandbox/workspace_guard.hpp), for an unsafe workspace or write root.
PlanPtr prepare(const Policy& policy, const LaunchRequest& request);

// Every layer, in kLayers order: applied, or not with the reason (not requested, or what the kernel
// or the supervisor's privilege lacks).
std::vector<LayerStatus> layers(const Plan& plan);

struct Child {
  pid_t pid = -1;
  int pidfd = -1;                    // owned by the caller; close-on-exec
  std::vector<std::string> cgroups;  // per-launch cgroups (tree limits); release() after reaping
};

// One launch between clone and exec, for an event loop that must not wait for the exec:
//
//   sandbox::PendingLaunch pending = sandbox::start(*plan);  // clones; returns at once
//   ...when pending.status_fd() is readable (Asio: async_wait(wait_read) on a
//   posix::stream_descriptor given ::dup(pending.status_fd()), since it closes what it owns):
//   try {
//     if (std::optional<sandbox::Child> child = pending.finish()) adopt(std::move(*child));
//     else wait_again();  // not over yet: wait for status_fd() to be readable again
//   } catch (const sandbox::SandboxError& e) {
//     report(e.what());    // same text as launch(); the child is already killed and reaped
//   }
//
// finish() reads the child's next record from the status pipe: EOF means execve succeeded and it
// returns the Child (pidfd and cgroups now the caller's); a failed step throws what launch() throws,
// with the same text, after killing and reaping the child; nullopt means call it again once
// status_fd() is readable (a non-root supervisor with a user namespace takes two turns: the child
// first reports that it is ready for its id maps, which finish() then writes before releasing it).
// Called on a blocking fd before it is readable, finish() waits for the record. The object is not
// thread-safe: one thread at a time, handed over with a happens-before (the supervisor starts on a
// worker and finishes on its loop).
// The plan must outlive the PendingLaunch. Destroying one that is not over (no Child returned, no
// exception thrown) kills the child with SIGKILL and reaps it: no child outlives its launch.
class [[nodiscard]] PendingLaunch {
 public:
  PendingLaunch(PendingLaunch&&) noexcept;
  PendingLaunch& operator=(PendingLaunch&&) noexcept;
  ~PendingLaunch();

  pid_t pid() const noexcept;                   // -1 once over
  int pidfd() const noexcept;                   // still owned by this object until finish() returns the Child
  int status_fd() const noexcept;               // read end of the close-on-exec status pipe; -1 once over
  [[nodiscard]] std::optional<Child> finish();  // throws SandboxError (ExecError for execve)

 private:
  struct State;  // launch.cpp
  explicit PendingLaunch(std::unique_ptr<State> state) noexcept;
  friend PendingLaunch start(const Plan& plan);
  std::unique_ptr<State> state_;
};

// Forks the plan's target and returns without waiting for the exec (see PendingLaunch). Call it
// from a thread that will outlive the child (PR_SET_PDEATHSIG fires when the forking *thread*
// exits): in the supervisor that is a thread of the offload pool. Throws SandboxError when a pipe or the
// clone itself fails, or when the parent's part of the setup (id maps, cgroup, the new root's
// clones) does; the child is then killed and reaped. NamespaceRefusedError (from start() or
// finish()): prepare again and start that plan instead.
PendingLaunch start(const Plan& plan);

// start() and finish() until the exec: blocks until the child has exec'd (or failed a step: then
// the child is reaped here and SandboxError names the step, e.g. "sandbox step
// 'landlock_restrict_self' failed: Operation not permitted"). A plan may be launched more than
// once. With a PID namespace the target is PID 1 of it: when it dies the kernel kills every
// descendant; note that PID 1 ignores signals it has no handler for, except SIGKILL and SIGSTOP
// (send SIGKILL, or SIGTERM to a child that handles it).
Child launch(const Plan& plan);

// prepare() and launch(), and both once more after a NamespaceRefusedError (see there): the one
// way to launch a policy in one go. on_plan, when given, sees each plan before its launch (e.g. to
// report its layers); the plan returned is the one the child runs under. Throws what prepare() and
// launch() throw.
struct Launched {
  PlanPtr plan;
  Child child;
};
Launched prepare_and_launch(const Policy& policy, const LaunchRequest& request,
                            const std::function<void(const Plan&)>& on_plan = {});

// After the caller reaped the child: removes its per-launch cgroup (if any). Never throws.
void release(const Child& child) noexcept;

}  // namespace sandbox
