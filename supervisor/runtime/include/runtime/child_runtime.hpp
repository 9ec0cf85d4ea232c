// The child runtime: where a child runs. The session asks a runtime to start a child from a launch
// spec and gets back a RunningChild: three stdio descriptors, one end notification, kill of the whole
// tree, and the report of what the runtime applied. The session never forks, holds a pidfd or reaps;
// the runtime does, so the same session runs a child on this host (LocalRuntime), in this process for
// tests (InProcessRuntime), or on another machine (a remote runtime: queued first, may lose the child,
// has its own id for it).
//
//   runtime->start(io, spec, {.on_state = ..., .on_started = ...});
//   // on_state(queued) and on_state(starting) may come first, then on_started exactly once, with a
//   // RunningChild or the error that kept the child from starting (nothing of it runs then).
//   child->on_end([](const ChildEnd& end) { ... });   // exactly once: exited (code/signal) or lost
//   child->kill_tree();                               // idempotent; the end still comes
//
// Thread-safety: every call and every handler runs on the io_context's one thread. A RunningChild
// owns its child: destroying it before the end kills the tree and reaps it (no child outlives its
// session), and drops the end handler.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "policy/preset.hpp"
#include "sandbox/layer.hpp"

namespace supervisor {

// What to start: the program, its arguments and the preset whose sandbox it runs under.
struct LaunchSpec {
  std::string child_id;                  // the supervisor's id (SUBAGENT_CHILD_ID in its environment)
  std::shared_ptr<const Preset> preset;  // its sandbox policy
  std::filesystem::path executable;      // absolute; the one program the child may exec (${child})
  std::vector<std::string> args;         // after argv[0]
  std::filesystem::path workspace;       // canonical; the child's cwd
  bool allow_unsafe_workspace = false;   // "/", $HOME, /etc... (sandbox/workspace_guard.hpp)
  std::vector<std::string> extra_env;    // "NAME=value", never secrets
  std::vector<std::string> handed_fds;   // names of descriptors the launch must hand back (none yet)
};

// Where a child is, as its runtime sees it. queued: accepted, waiting for room (a batch queue);
// starting: being set up; running: its stdio is live; exited: it ended with a status; lost: the
// runtime can no longer see it (its node went away) and has no status for it.
enum class RuntimeState { queued, starting, running, exited, lost };
const char* to_string(RuntimeState s) noexcept;

// How a child ended. For `exited`, at most one of code and signal is set; `lost` has neither and
// says why in `detail`.
struct ChildEnd {
  RuntimeState state = RuntimeState::exited;  // exited or lost
  std::optional<int> code;
  std::optional<int> signal;
  std::string detail;
};

// The sandbox a runtime applied to one child (sandbox/layer.hpp: names only where reported).
struct AppliedLayers {
  std::vector<sandbox::Layer> applied;
  std::vector<sandbox::Layer> missing;
};

// A descriptor a launch hands back to the supervisor (e.g. a listening socket made inside the child's
// namespaces), named as LaunchSpec::handed_fds asked.
struct HandedFd {
  std::string name;
  int fd = -1;  // owned by the RunningChild until taken
};

// A filesystem the runtime made for the child (a size-capped tmpfs, a writer's layer).
struct RuntimeMount {
  std::string what;                    // "home", "worktree", ...
  std::filesystem::path path;          // as the supervisor sees it, when it can
  std::optional<std::uint64_t> bytes;  // its cap, when it has one
};

// What a runtime can do, for `policy explain`, envelopes and choosing one. Stated once per runtime,
// not per child (a child's own report is RunningChild::layers()).
struct RuntimeAbilities {
  std::vector<sandbox::Layer> layers;  // the layers it can apply (a kernel may still refuse some)
  bool may_queue = false;              // a start can wait in a queue (on_state(queued))
  bool may_lose = false;               // a running child can be lost (ChildEnd::state lost)
  bool hands_back_fds = false;         // LaunchSpec::handed_fds is honoured
  bool makes_mounts = false;           // RunningChild::mounts() can be non-empty
};

class RunningChild {
 public:
  using EndHandler = std::function<void(const ChildEnd&)>;

  virtual ~RunningChild() = default;
  RunningChild(const RunningChild&) = delete;
  RunningChild& operator=(const RunningChild&) = delete;

  // The child's stdin (write end), stdout and stderr (read ends), non-blocking and close-on-exec.
  // Each is the caller's to take once (-1 after).
  int take_stdin() noexcept { return std::exchange(stdin_, -1); }
  int take_stdout() noexcept { return std::exchange(stdout_, -1); }
  int take_stderr() noexcept { return std::exchange(stderr_, -1); }

  // Calls `h` once, on the io thread, when the child ended (after kill_tree() too). Set it once,
  // right after on_started.
  virtual void on_end(EndHandler h) = 0;
  // Kills the child and everything it started. Idempotent; harmless once it ended.
  virtual void kill_tree() noexcept = 0;

  const AppliedLayers& layers() const noexcept { return layers_; }
  // The runtime's own id for the child: a pid here, a job id on a cluster.
  const std::string& runtime_id() const noexcept { return runtime_id_; }
  // The local process id when the child is a process of this host's (the started event's "pid").
  std::optional<pid_t> local_pid() const noexcept { return local_pid_; }
  const std::vector<RuntimeMount>& mounts() const noexcept { return mounts_; }
  std::vector<HandedFd>& handed_fds() noexcept { return handed_; }

 protected:
  RunningChild() = default;
  // Closes whatever stdio the caller did not take and the handed-back descriptors.
  void close_untaken() noexcept;

  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
  AppliedLayers layers_;
  std::string runtime_id_;
  std::optional<pid_t> local_pid_;
  std::vector<RuntimeMount> mounts_;
  std::vector<HandedFd> handed_;
};

struct StartHandlers {
  std::function<void(RuntimeState)> on_state;  // queued, starting (optional)
  // Exactly once: the child, or (null, why it could not start). Nothing of a failed child runs.
  std::function<void(std::unique_ptr<RunningChild>, std::string error)> on_started;
};

// A start in progress. Abandoning it (or destroying it before on_started) withdraws the start: a
// queued child is dequeued, one being set up is killed and reaped once it exists, and on_started is
// not called.
class PendingStart {
 public:
  virtual ~PendingStart() = default;
  virtual void abandon() noexcept = 0;
};

class ChildRuntime {
 public:
  virtual ~ChildRuntime() = default;
  // "local", "in_process", "slurm", ...
  virtual std::string_view name() const noexcept = 0;
  virtual RuntimeAbilities abilities() const = 0;
  // Starts `spec` on `io`'s thread; handlers run there, never inside start() itself.
  virtual std::unique_ptr<PendingStart> start(boost::asio::io_context& io, LaunchSpec spec, StartHandlers handlers) = 0;
};

}  // namespace supervisor
