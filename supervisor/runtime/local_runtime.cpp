// The local runtime (local_runtime.hpp): prepare and clone off the loop, wait for the exec and the
// exit without blocking it.
#include "runtime/local_runtime.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <system_error>

#include "offload/offload.hpp"
#include "sandbox/launch.hpp"

namespace supervisor {

namespace asio = boost::asio;

namespace {

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
    read = fds[0];
    write = fds[1];
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
  int release_read() { return std::exchange(read, -1); }
  int release_write() { return std::exchange(write, -1); }
};

// The session writes and reads these with write(2) and read(2) directly: they must never block.
void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::system_error(errno, std::generic_category(), "making the child's pipes non-blocking");
}

class LocalChild final : public RunningChild {
 public:
  LocalChild(asio::io_context& io, const sandbox::Child& child, AppliedLayers layers)
      : core_(std::make_shared<Core>(io, child)) {
    layers_ = std::move(layers);
    runtime_id_ = std::to_string(child.pid);
    local_pid_ = child.pid;
    core_->pidfd.assign(child.pidfd);
  }

  ~LocalChild() override {
    close_untaken();
    Core& c = *core_;
    if (c.ended) return;
    // No child outlives its session (invariant 6), and none is left a zombie: only reached with the
    // child alive when its owner drops it early (the supervisor is exiting).
    ::kill(-c.child.pid, SIGKILL);
    ::kill(c.child.pid, SIGKILL);
    if (c.pidfd.is_open()) {
      const int fd = c.pidfd.native_handle();
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // Asio set it; this wait must block
      siginfo_t info{};
      while (::waitid(P_PIDFD, static_cast<id_t>(fd), &info, WEXITED) < 0 && errno == EINTR) {
      }
    }
    c.ended = true;
    boost::system::error_code ignored;
    c.pidfd.close(ignored);
    c.rewait.cancel();
    sandbox::release(c.child);
  }

  // The pipes' supervisor ends; owned by this child from here (closed with it when not taken).
  void set_stdio(int in, int out, int err) noexcept {
    stdin_ = in;
    stdout_ = out;
    stderr_ = err;
  }

  void on_end(EndHandler h) override { wait_exit(core_, std::make_shared<EndHandler>(std::move(h))); }

  void kill_tree() noexcept override {
    if (core_->ended) return;
    // setsid() in the child made it a process-group leader; a PID namespace (when applied) takes the rest.
    ::kill(-core_->child.pid, SIGKILL);
    ::kill(core_->child.pid, SIGKILL);
  }

 private:
  struct Core {
    Core(asio::io_context& io, const sandbox::Child& c) : pidfd(io), rewait(io), child(c) {}
    asio::posix::stream_descriptor pidfd;
    asio::steady_timer rewait;
    sandbox::Child child;
    bool ended = false;
  };

  // The end handler travels with the wait, never stored in Core: it holds the session, which owns
  // this child, so storing it would make a cycle that only the child's end breaks. With the wait, an
  // io_context destroyed while the child runs releases the session, and ~LocalChild kills and reaps.
  static void wait_exit(std::shared_ptr<Core> core, std::shared_ptr<EndHandler> handler) {
    core->pidfd.async_wait(asio::posix::descriptor_base::wait_read, [core, handler](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted || core->ended) return;
      siginfo_t info{};
      int rc;
      while ((rc = ::waitid(P_PIDFD, static_cast<id_t>(core->pidfd.native_handle()), &info, WEXITED | WNOHANG)) < 0 &&
             errno == EINTR) {
      }
      // Asio made the pidfd non-blocking: then a child that has not exited yet gives EAGAIN.
      if ((rc == 0 && info.si_pid == 0) || (rc < 0 && errno == EAGAIN)) {
        // Not exited yet: look again shortly rather than spin on a level-triggered wake-up.
        core->rewait.expires_after(std::chrono::milliseconds(5));
        core->rewait.async_wait([core, handler](boost::system::error_code e) {
          if (!e && !core->ended) wait_exit(core, handler);
        });
        return;
      }
      ChildEnd end;
      end.state = RuntimeState::exited;
      if (rc == 0) {
        if (info.si_code == CLD_EXITED)
          end.code = info.si_status;
        else
          end.signal = info.si_status & 0x7f;  // killed or dumped: the signal number
      } else {
        end.code = 0;  // not ours to reap any more (ECHILD): nothing more is known
        end.detail = std::string("waitid: ") + std::strerror(errno);
      }
      core->ended = true;
      boost::system::error_code ignored;
      core->pidfd.close(ignored);
      // The leader is gone; anything it left behind in its process group goes too.
      ::kill(-core->child.pid, SIGKILL);
      sandbox::release(core->child);
      if (*handler) (*handler)(end);
    });
  }

  std::shared_ptr<Core> core_;
};

// One start, from the request to the exec. Lives while its prepare or its exec wait is in flight.
class LocalStart : public std::enable_shared_from_this<LocalStart> {
 public:
  LocalStart(asio::io_context& io, LaunchSpec spec, StartHandlers handlers)
      : io_(io), spec_(std::move(spec)), handlers_(std::move(handlers)), exec_status_(io) {}

  void begin() {
    try {
      pipes_ = std::make_unique<Pipes>();
      sandbox::LaunchRequest req;
      req.executable = spec_.executable.string();
      req.argv.push_back(spec_.executable.string());
      req.argv.insert(req.argv.end(), spec_.args.begin(), spec_.args.end());
      req.workspace = spec_.workspace;
      req.allow_unsafe_workspace = spec_.allow_unsafe_workspace;
      req.child_dir = spec_.executable;  // ${child}: the one program this child may exec
      req.extra_env = spec_.extra_env;
      req.stdin_fd = pipes_->in.read;
      req.stdout_fd = pipes_->out.write;
      req.stderr_fd = pipes_->err.write;
      request_ = std::make_shared<const sandbox::LaunchRequest>(std::move(req));
    } catch (const std::exception& e) {
      std::string why = e.what();
      asio::post(io_, [self = shared_from_this(), why] { self->failed(why); });
      return;
    }
    if (handlers_.on_state) asio::post(io_, [self = shared_from_this()] { self->state(RuntimeState::starting); });
    prepare();
  }

  void abandon() noexcept {
    if (over_) return;
    over_ = true;
    handlers_ = {};  // what the caller's handlers hold goes now, not when the operation ends
    boost::system::error_code ignored;
    exec_status_.close(ignored);
    pending_.reset();  // kills and reaps a child that was cloned
    plan_.reset();
    pipes_.reset();
  }

 private:
  struct Pipes {
    Pipe in, out, err;
  };

  void state(RuntimeState s) {
    if (!over_ && handlers_.on_state) handlers_.on_state(s);
  }

  // What the worker hands back: the plan and, unless a step failed, the child cloned from it and
  // waiting for its exec. Declared in this order so that a launch dropped unfinished (the start was
  // abandoned meanwhile) kills and reaps its child before its plan goes.
  struct Cloned {
    sandbox::PlanPtr plan;
    std::optional<sandbox::PendingLaunch> pending;
    std::string error;     // set when no child was cloned
    bool refused = false;  // a namespace the plan assumed was refused: prepare again, probing
  };

  void prepare() {
    // The preparation and the clone into new namespaces (with the cgroups made for it and, as root,
    // the new root's mount trees) run on a worker: eight children starting at once cost the loop
    // no more than eight posts, so the running children's answers do not wait for them. The pool's
    // threads live as long as the process, so the child's PR_SET_PDEATHSIG (which fires when the
    // *thread* that cloned it exits) still means "when the supervisor dies". Only the (immutable)
    // preset and request go to the worker; what it returns comes back to the loop, which alone
    // touches the pending launch from then on (finish() reads the exec status there).
    jobs_.run(
        io_,
        [preset = spec_.preset, req = request_] {
          Cloned c;
          try {
            c.plan = sandbox::prepare(preset->sandbox, *req);
            c.pending.emplace(sandbox::start(*c.plan));
          } catch (const sandbox::NamespaceRefusedError& e) {  // start() itself killed and reaped a clone
            c.error = e.what();
            c.refused = true;
          } catch (const std::exception& e) {
            c.error = e.what();
          }
          return c;
        },
        [self = shared_from_this()](Outcome<Cloned> c) { self->cloned(std::move(c)); });
  }

  void cloned(Outcome<Cloned> c) {
    if (over_) return;  // abandoned: `c` kills and reaps the child as it goes
    if (!c) return failed(c.error);
    Cloned& got = *c.value;
    if (got.refused) return refused(got.error);
    if (!got.error.empty()) return failed(got.error);
    try {
      layers_ = {};
      for (const auto& l : sandbox::layers(*got.plan))
        (l.applied ? layers_.applied : layers_.missing).push_back(l.layer);
      plan_ = std::move(got.plan);
      pending_ = std::move(got.pending);
      const int status_fd = ::fcntl(pending_->status_fd(), F_DUPFD_CLOEXEC, 0);
      if (status_fd < 0) throw std::system_error(errno, std::generic_category(), "dup of the launch's status pipe");
      exec_status_.assign(status_fd);
    } catch (const std::exception& e) {
      pending_.reset();  // kills and reaps the child
      plan_.reset();
      return failed(e.what());
    }
    await_exec();
  }

  // A NamespaceRefusedError: the child died before its exec, so its copies of the pipes are closed
  // and ours are as new. Prepared once more (that plan probes), else the start fails.
  void refused(const std::string& why) {
    if (prepared_again_) return failed(why);
    prepared_again_ = true;
    prepare();
  }

  void await_exec() {
    exec_status_.async_wait(asio::posix::descriptor_base::wait_read,
                            [self = shared_from_this()](boost::system::error_code) { self->on_exec_status(); });
  }

  void on_exec_status() {
    if (over_) return;
    std::optional<sandbox::Child> child;
    auto close_wait = [this] {
      boost::system::error_code ignored;
      exec_status_.close(ignored);
    };
    try {
      child = pending_->finish();
    } catch (const sandbox::NamespaceRefusedError& e) {
      close_wait();
      pending_.reset();
      plan_.reset();
      return refused(e.what());
    } catch (const std::exception& e) {
      close_wait();
      pending_.reset();
      plan_.reset();
      return failed(e.what());
    }
    if (!child) return await_exec();  // a second turn (a user namespace's id maps)
    close_wait();
    pending_.reset();
    plan_.reset();
    std::unique_ptr<LocalChild> running;
    try {
      running = std::make_unique<LocalChild>(io_, *child, std::move(layers_));
      // Owned by `running` from here: a failure below closes them with it and kills the child.
      const int in = pipes_->in.release_write(), out = pipes_->out.release_read(), err = pipes_->err.release_read();
      running->set_stdio(in, out, err);
      set_nonblocking(in);
      set_nonblocking(out);
      set_nonblocking(err);
    } catch (const std::exception& e) {
      if (!running) {  // the child exists but nothing owns it yet
        ::kill(child->pid, SIGKILL);
        siginfo_t info{};
        while (::waitid(P_PIDFD, static_cast<id_t>(child->pidfd), &info, WEXITED) < 0 && errno == EINTR) {
        }
        ::close(child->pidfd);
        sandbox::release(*child);
      }
      running.reset();  // kills and reaps it
      return failed(e.what());
    }
    pipes_.reset();
    over_ = true;
    auto on_started = std::move(handlers_.on_started);
    on_started(std::move(running), {});
  }

  void failed(const std::string& why) {
    if (over_) return;
    over_ = true;
    pipes_.reset();
    auto on_started = std::move(handlers_.on_started);
    on_started(nullptr, why);
  }

  asio::io_context& io_;
  LaunchSpec spec_;
  StartHandlers handlers_;
  std::unique_ptr<Pipes> pipes_;
  std::shared_ptr<const sandbox::LaunchRequest> request_;
  bool prepared_again_ = false;
  bool over_ = false;  // started, failed or abandoned: no handler runs any more
  AppliedLayers layers_;
  sandbox::PlanPtr plan_;                          // kept while the launch is pending
  std::optional<sandbox::PendingLaunch> pending_;  // between sandbox::start and the exec (after plan_: goes first)
  asio::posix::stream_descriptor exec_status_;     // a dup of pending_'s status pipe
  OffloadGroup jobs_;                              // the prepare and clone; last, so it goes first
};

class PendingLocalStart final : public PendingStart {
 public:
  // Weak: a start is owned by its operation in flight (the prepare, the clone, the exec wait), never
  // by its caller, whose handlers it holds; an io_context destroyed mid-start so releases both.
  explicit PendingLocalStart(std::weak_ptr<LocalStart> s) : s_(std::move(s)) {}
  ~PendingLocalStart() override { abandon(); }
  void abandon() noexcept override {
    if (auto s = s_.lock()) s->abandon();
  }

 private:
  std::weak_ptr<LocalStart> s_;
};

}  // namespace

RuntimeAbilities LocalRuntime::abilities() const {
  RuntimeAbilities a;
  a.layers.assign(sandbox::kLayers.begin(), sandbox::kLayers.end());
  return a;
}

std::unique_ptr<PendingStart> LocalRuntime::start(asio::io_context& io, LaunchSpec spec, StartHandlers handlers) {
  auto s = std::make_shared<LocalStart>(io, std::move(spec), std::move(handlers));
  s->begin();
  return std::make_unique<PendingLocalStart>(s);
}

std::shared_ptr<ChildRuntime> local_runtime() {
  static const std::shared_ptr<ChildRuntime> runtime = std::make_shared<LocalRuntime>();
  return runtime;
}

}  // namespace supervisor
