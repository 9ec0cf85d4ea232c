// The in-process runtime (in_process_runtime.hpp): a scripted child on the session's loop, over pipes.
#include "runtime/in_process_runtime.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <system_error>

#include "protocol/framing.hpp"
#include "sandbox/layer.hpp"

namespace supervisor {

namespace asio = boost::asio;
namespace proto = protocol;

namespace {

// Both ends non-blocking and close-on-exec: the session's end as the local runtime gives it, the
// script's end for Asio.
std::pair<int, int> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  return {fds[0], fds[1]};
}

class Scripted final : public ScriptedChild, public std::enable_shared_from_this<Scripted> {
 public:
  Scripted(asio::io_context& io, LaunchSpec spec, std::shared_ptr<std::size_t> alive)
      : io_(io), spec_(std::move(spec)), in_(io), out_(io), err_(io), lose_timer_(io), alive_(std::move(alive)) {
    ++*alive_;
  }
  ~Scripted() override {
    if (!ended_) --*alive_;
  }

  // The pipes: returns the supervisor's ends (stdin's write end, stdout's and stderr's read ends).
  std::array<int, 3> open() {
    std::array<int, 3> ours{-1, -1, -1};  // the supervisor's ends, closed again if a later pipe2 fails
    try {
      auto [in_r, in_w] = make_pipe();
      in_.assign(in_r);
      ours[0] = in_w;
      auto [out_r, out_w] = make_pipe();
      out_.assign(out_w);
      ours[1] = out_r;
      auto [err_r, err_w] = make_pipe();
      err_.assign(err_w);
      ours[2] = err_r;
    } catch (...) {
      for (int fd : ours)
        if (fd >= 0) ::close(fd);
      throw;
    }
    return ours;
  }

  void begin(std::chrono::milliseconds lose_after) {
    do_read();
    if (lose_after.count() > 0) {
      lose_timer_.expires_after(lose_after);
      lose_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec) self->end({RuntimeState::lost, {}, {}, "the node went away (the in-process runtime's lose_after)"});
      });
    }
  }

  // ScriptedChild
  void send(const proto::ChildMessage& m) override { send_raw(proto::encode_line(m)); }
  void send_raw(std::string bytes) override {
    if (ended_ || stdout_closed_) return;
    out_q_.push_back(std::move(bytes));
    if (!out_writing_) write_out();
  }
  void log(std::string line) override {
    if (ended_) return;
    err_q_.push_back(std::move(line) + "\n");
    if (!err_writing_) write_err();
  }
  void on_message(std::function<void(const proto::SupervisorMessage&)> h) override { handler_ = std::move(h); }
  void close_stdout() override {
    stdout_closed_ = true;
    if (!out_writing_) {
      boost::system::error_code ignored;
      out_.close(ignored);
    }
  }
  void exit(int code) override {
    if (ended_ || exit_code_) return;
    exit_code_ = code;
    if (!out_writing_) end({RuntimeState::exited, code, {}, {}});
  }
  bool ended() const override { return ended_; }
  const std::string& id() const override { return spec_.child_id; }
  const LaunchSpec& spec() const override { return spec_; }

  // The RunningChild side.
  void set_end_handler(RunningChild::EndHandler h) {
    if (ended_) {
      asio::post(io_, [h = std::move(h), e = end_] { h(e); });
      return;
    }
    end_handler_ = std::move(h);
  }
  void kill() { end({RuntimeState::exited, {}, SIGKILL, {}}); }
  void detach() {
    end_handler_ = nullptr;
    kill();
  }

 private:
  void do_read() {
    in_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      if (self->ended_) return;
      if (ec) return;  // the supervisor closed our stdin: a script decides what that means
      std::vector<proto::Frame> frames;
      self->reader_.feed(std::string_view(self->buf_.data(), n), frames);
      for (auto& f : frames) {
        if (self->ended_) return;
        auto d = f.error == proto::FrameError::none
                     ? proto::decode_supervisor_message(f.line)
                     : proto::Decoded<proto::SupervisorMessage>{std::nullopt, "a broken line"};
        if (!d.message) {
          self->exit(12);  // as the fake child does with a line it cannot read
          return;
        }
        // A copy: the script may end its child from the handler, which drops handler_.
        if (auto h = self->handler_) h(*d.message);
      }
      self->do_read();
    });
  }

  void write_out() {
    if (out_q_.empty()) {
      out_writing_ = false;
      if (exit_code_) return end({RuntimeState::exited, *exit_code_, {}, {}});
      if (stdout_closed_) {
        boost::system::error_code ignored;
        out_.close(ignored);
      }
      return;
    }
    out_writing_ = true;
    asio::async_write(out_, asio::buffer(out_q_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (self->ended_) return;
                        if (ec) {  // the supervisor closed our stdout: a real child gets EPIPE and dies
                          self->out_q_.clear();
                          self->out_writing_ = false;
                          return self->end({RuntimeState::exited, {}, SIGPIPE, {}});
                        }
                        self->out_q_.pop_front();
                        self->write_out();
                      });
  }

  void write_err() {
    if (err_q_.empty()) {
      err_writing_ = false;
      return;
    }
    err_writing_ = true;
    asio::async_write(err_, asio::buffer(err_q_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (self->ended_ || ec) return;
                        self->err_q_.pop_front();
                        self->write_err();
                      });
  }

  void end(ChildEnd e) {
    if (ended_) return;
    ended_ = true;
    --*alive_;
    end_ = e;
    out_q_.clear();
    err_q_.clear();
    boost::system::error_code ignored;
    in_.close(ignored);
    out_.close(ignored);
    err_.close(ignored);
    lose_timer_.cancel();
    handler_ = nullptr;  // what the script captured (often this object) goes with it
    if (auto h = std::move(end_handler_)) asio::post(io_, [h = std::move(h), e] { h(e); });
  }

  asio::io_context& io_;
  LaunchSpec spec_;
  asio::posix::stream_descriptor in_, out_, err_;
  asio::steady_timer lose_timer_;
  std::shared_ptr<std::size_t> alive_;
  std::array<char, 65536> buf_{};
  proto::LineReader reader_{proto::kDefaultMaxLine};
  std::function<void(const proto::SupervisorMessage&)> handler_;
  std::deque<std::string> out_q_, err_q_;
  bool out_writing_ = false, err_writing_ = false, stdout_closed_ = false;
  std::optional<int> exit_code_;
  bool ended_ = false;
  ChildEnd end_;
  RunningChild::EndHandler end_handler_;
};

class InProcessChild final : public RunningChild {
 public:
  InProcessChild(std::shared_ptr<Scripted> s, std::array<int, 3> fds, std::size_t n) : s_(std::move(s)) {
    stdin_ = fds[0];
    stdout_ = fds[1];
    stderr_ = fds[2];
    runtime_id_ = "in-process-" + std::to_string(n);
    layers_.missing.assign(sandbox::kLayers.begin(), sandbox::kLayers.end());
  }
  ~InProcessChild() override {
    close_untaken();
    s_->detach();
  }
  void on_end(EndHandler h) override { s_->set_end_handler(std::move(h)); }
  void kill_tree() noexcept override { s_->kill(); }

 private:
  std::shared_ptr<Scripted> s_;
};

class InProcessStart final : public PendingStart {
 public:
  explicit InProcessStart(asio::io_context& io) : timer(io) {}
  void abandon() noexcept override {
    over = true;
    timer.cancel();
  }
  asio::steady_timer timer;
  bool over = false;
};

// The handle returned to the caller: abandons its start when dropped before the start is over.
class StartHandle final : public PendingStart {
 public:
  explicit StartHandle(std::shared_ptr<InProcessStart> s) : s_(std::move(s)) {}
  ~StartHandle() override { abandon(); }
  void abandon() noexcept override { s_->abandon(); }

 private:
  std::shared_ptr<InProcessStart> s_;
};

}  // namespace

InProcessRuntime::InProcessRuntime(ChildScript script, Options options)
    : script_(std::move(script)), options_(std::move(options)) {}

RuntimeAbilities InProcessRuntime::abilities() const {
  RuntimeAbilities a;  // no layer: nothing here is sandboxed
  a.may_queue = options_.queued_for.count() > 0;
  a.may_lose = options_.lose_after.count() > 0;
  return a;
}

std::unique_ptr<PendingStart> InProcessRuntime::start(asio::io_context& io, LaunchSpec spec, StartHandlers handlers) {
  auto st = std::make_shared<InProcessStart>(io);
  auto on_state = handlers.on_state;
  auto go = [&io, st, spec = std::move(spec), handlers = std::move(handlers), script = script_, options = options_,
             started = started_, alive = alive_]() mutable {
    if (st->over) return;
    st->over = true;
    if (handlers.on_state) handlers.on_state(RuntimeState::starting);
    if (!options.fail_start.empty()) return handlers.on_started(nullptr, options.fail_start);
    auto s = std::make_shared<Scripted>(io, std::move(spec), alive);
    std::unique_ptr<InProcessChild> child;
    try {
      child = std::make_unique<InProcessChild>(s, s->open(), ++*started);
    } catch (const std::exception& e) {
      s->detach();
      return handlers.on_started(nullptr, e.what());
    }
    s->begin(options.lose_after);
    handlers.on_started(std::move(child), {});
    if (!s->ended()) script(s);
  };
  if (options_.queued_for.count() > 0) {
    asio::post(io, [st, on_state] {
      if (!st->over && on_state) on_state(RuntimeState::queued);
    });
    st->timer.expires_after(options_.queued_for);
    st->timer.async_wait([go = std::move(go)](boost::system::error_code ec) mutable {
      if (!ec) go();
    });
  } else {
    asio::post(io, std::move(go));
  }
  return std::make_unique<StartHandle>(st);
}

}  // namespace supervisor
