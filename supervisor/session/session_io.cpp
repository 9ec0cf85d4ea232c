// ChildSession's I/O (session.hpp): reading and decoding the child's protocol lines, its stderr and
// log, its end as its runtime reports it, and the write queue to its stdin.
#include "session/session.hpp"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace supervisor {

namespace asio = boost::asio;
namespace proto = protocol;
using nlohmann::json;

// ---- reading the child ---------------------------------------------------------------------------

void ChildSession::do_read() {
  // No speculative read: the loop is one thread, so nothing can take the readiness edge between
  // the last (short) read and this wait, and data that came in the meantime wakes it at once.
  from_child_.async_wait(asio::posix::descriptor_base::wait_read,
                         [self = shared_from_this()](boost::system::error_code ec) { self->on_readable(ec); });
}

void ChildSession::on_readable(boost::system::error_code ec) {
  if (ec) return on_read_end(ec);  // cancelled (the drain timer gave up) or the descriptor failed
  const int fd = from_child_.native_handle();
  for (std::size_t taken = 0;;) {
    if (taken >= kReadPerTurn) {
      // Enough for one turn: the other children's ready pipes and timers go first.
      asio::post(io_, [self = shared_from_this()] {
        if (!self->stdout_eof_ && self->from_child_.is_open() && !self->intake_busy_) self->on_readable({});
      });
      return;
    }
    if (over_read_rate()) return;  // rate_timer_ reads on
    const ssize_t n = ::read(fd, read_buf_.data(), read_buf_.size());
    if (n > 0) {
      taken += static_cast<std::size_t>(n);
      consume(std::string_view(read_buf_.data(), static_cast<std::size_t>(n)));
      if (intake_busy_) {  // a large line is being decoded: read on once it is handled
        read_paused_ = true;
        return;
      }
      if (state_ == State::done || !from_child_.is_open()) return;
      if (static_cast<std::size_t>(n) < read_buf_.size()) break;  // the pipe is empty now
      continue;
    }
    if (n == 0) return on_read_end(asio::error::eof);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;  // a spurious wake-up
    return on_read_end(boost::system::error_code(errno, boost::system::system_category()));
  }
  do_read();
}

void ChildSession::charge_read_rate(std::size_t bytes, const proto::Decoded<proto::ChildMessage>& decoded) {
  // Short lines are not charged: their cost is per message (a read, a decision, a write), which the
  // one-read-per-turn rule shares out, and a fast tool loop of small requests is honest work. Log
  // lines are, at any size: nothing paces them (they need no answer).
  model_request_charge_ = 0;
  const bool log = decoded && std::holds_alternative<proto::Log>(*decoded.message);
  if (bytes < kRateChargedLine && !log) return;
  read_tokens_ -= static_cast<double>(bytes);
  // A model request that starts a model call gets its charge back (handle(ModelRequest)): the model
  // paces those and the token budget bounds them, and they carry the whole conversation, so a long
  // session's are large. One answered at once without a call (after the wrap-up turn, once
  // cancelled) keeps it: nothing else paces those.
  if (decoded && std::holds_alternative<proto::ModelRequest>(*decoded.message))
    model_request_charge_ = static_cast<double>(bytes);
}

bool ChildSession::over_read_rate() {
  // An exited child's pipe is drained at once (its drain timer bounds the wait for it).
  if (cfg_.read_rate == 0 || exited_) return false;
  const auto now = std::chrono::steady_clock::now();
  const double rate = static_cast<double>(cfg_.read_rate);
  // A burst of 0 would never let the bucket rise above 0: one byte at least.
  const double burst = std::max(static_cast<double>(cfg_.read_burst), 1.0);
  read_tokens_ = std::min(burst, read_tokens_ + rate * std::chrono::duration<double>(now - read_filled_).count());
  read_filled_ = now;
  if (read_tokens_ > 0) return false;
  rate_paused_ = true;
  ++rate_pauses_;
  rate_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>((std::min(kResumeBytes, burst) - read_tokens_) / rate)));
  rate_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || !self->rate_paused_) return;
    self->resume_after_rate();
  });
  return true;
}

void ChildSession::resume_after_rate() {
  rate_paused_ = false;
  if (state_ == State::done || stdout_eof_ || !from_child_.is_open()) return;
  if (intake_busy_) {  // a long line is being decoded: on_intake_done() reads on
    read_paused_ = true;
    return;
  }
  on_readable({});
}

void ChildSession::consume(std::string_view chunk) {
  frames_.clear();
  reader_.feed(chunk, frames_);
  handle_frames();
}

void ChildSession::handle_frames() {
  for (std::size_t i = 0; i < frames_.size(); ++i) {
    if (intake_busy_) {  // behind a large line: in order, after it
      held_frames_.push_back(std::move(frames_[i]));
      continue;
    }
    if (state_ == State::finishing || state_ == State::done) break;
    handle_frame(frames_[i]);
  }
}

void ChildSession::offload_frame(proto::Frame& f) {
  intake_busy_ = true;
  const std::size_t size = f.line.size();
  struct Intake {
    proto::Decoded<proto::ChildMessage> decoded;
    std::optional<json> args_scrubbed;
  };
  // The worker touches only what it is given: the line and the (immutable, thread-safe) scrubber.
  std::shared_ptr<const Scrubber> scrubber = cfg_.on_event_args_scrubbed ? cfg_.scrubber : nullptr;
  intake_.run(
      io_,
      [line = std::move(f.line), scrubber] {
        Intake in;
        in.decoded = proto::decode_child_message(line);
        if (scrubber && in.decoded)
          if (auto* req = std::get_if<proto::ToolRequest>(&*in.decoded.message))
            in.args_scrubbed = scrubber->scrub_json(req->args);
        return in;
      },
      [self = shared_from_this(), size](Outcome<Intake> r) {
        self->intake_busy_ = false;
        if (r) self->charge_read_rate(size, r.value->decoded);
        if (self->state_ != State::finishing && self->state_ != State::done) {
          if (!r) {
            self->fail(proto::Status::failed, "the supervisor could not decode a line of the child's: " + r.error);
          } else {
            self->args_scrubbed_ = std::move(r.value->args_scrubbed);
            self->handle_decoded(r.value->decoded);
            self->args_scrubbed_.reset();
          }
        }
        self->on_intake_done();
      });
}

void ChildSession::on_intake_done() {
  while (!held_frames_.empty() && !intake_busy_) {
    proto::Frame f = std::move(held_frames_.front());
    held_frames_.pop_front();
    if (state_ == State::finishing || state_ == State::done) continue;  // dropped, as handle_frames drops them
    handle_frame(f);
  }
  if (intake_busy_) return;  // another large line: its handler goes on from here
  if (read_paused_) {
    read_paused_ = false;
    if (!stdout_eof_ && from_child_.is_open() && state_ != State::done) {
      on_readable({});  // what the pipe holds now (or a wait for it)
      return;
    }
  }
  maybe_finish();
}

void ChildSession::on_read_end(boost::system::error_code) {
  frames_.clear();
  reader_.finish(frames_);  // a line the child left unterminated
  handle_frames();
  stdout_eof_ = true;
  boost::system::error_code ignored;
  from_child_.close(ignored);
  if (!exited_ && !final_ && state_ != State::finishing && state_ != State::done) {
    // Its output closed but the child lives on: it can never report again. A child that is just
    // exiting closes stdout a moment before the kernel says it exited, so wait that moment first.
    stdout_closed_timer_.expires_after(cfg_.exit_grace);
    stdout_closed_timer_.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (e || self->exited_ || self->final_) return;
      self->fail(proto::Status::protocol_error,
                 "protocol error: the child closed its stdout but kept running (still alive " +
                     std::to_string(self->cfg_.exit_grace.count()) + " ms later)");
    });
  }
  maybe_finish();
}

void ChildSession::handle_frame(proto::Frame& f) {
  if (f.error != proto::FrameError::none) {
    std::string what = std::string("protocol error: ") + proto::to_string(f.error);
    if (f.error == proto::FrameError::line_too_long)
      what += " (a line of at least " + std::to_string(f.size) + " bytes; the limit is " +
              std::to_string(reader_.max_line()) + ")";
    else if (f.error == proto::FrameError::truncated)
      what += " (the child's output ended inside a line of " + std::to_string(f.size) + " bytes)";
    else
      what += " (a line of " + std::to_string(f.size) + " bytes is not valid UTF-8)";
    fail(proto::Status::protocol_error, what);
    return;
  }
  if (f.line.empty()) {  // blank lines are allowed and ignored, but not free: one costs a frame
    read_tokens_ -= kBlankLineCharge;
    return;
  }
  if (f.line.size() >= kOffloadLine) return offload_frame(f);
  auto decoded = proto::decode_child_message(f.line);
  charge_read_rate(f.line.size(), decoded);
  handle_decoded(decoded);
}

void ChildSession::handle_decoded(proto::Decoded<proto::ChildMessage>& decoded) {
  if (!decoded) {
    fail(proto::Status::protocol_error, "protocol error: " + decoded.error);
    return;
  }
  auto& m = *decoded.message;
  if (state_ == State::handshake && !std::holds_alternative<proto::Hello>(m) &&
      !std::holds_alternative<proto::Log>(m)) {
    fail(proto::Status::protocol_error,
         std::string("protocol error: expected hello first, got ") + proto::type_name(m));
    return;
  }
  std::visit([this](auto& msg) { handle(msg); }, m);
}

namespace {
// What one child may send to the parent's log, stderr lines and `log` messages together: a child
// that floods its log must not flood the parent (or the supervisor's queue to a slow parent).
constexpr std::size_t kMaxLogBytes = 1 << 20;
}  // namespace

void ChildSession::handle(const proto::Log& m) {
  if (!cfg_.on_log || stderr_logged_ > kMaxLogBytes) return;
  std::string line = "[subagent:" + cfg_.id + "] " + (m.level.empty() ? "" : m.level + ": ") + m.message;
  stderr_logged_ += line.size();
  cfg_.on_log(line);
  if (stderr_logged_ > kMaxLogBytes)
    cfg_.on_log("[subagent:" + cfg_.id + "] (more than 1 MiB of log; the rest is dropped)");
}

// ---- stderr, exit, timers ------------------------------------------------------------------------

void ChildSession::do_read_stderr() {
  child_err_.async_read_some(
      asio::buffer(err_buf_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        std::vector<proto::Frame> frames;
        if (ec)
          self->err_reader_.finish(frames);
        else
          self->err_reader_.feed(std::string_view(self->err_buf_.data(), n), frames);
        for (const auto& f : frames) {
          if (!self->cfg_.on_log || self->stderr_logged_ > kMaxLogBytes) continue;
          std::string text = f.error == proto::FrameError::none           ? f.line
                             : f.error == proto::FrameError::invalid_utf8 ? "(a line of invalid UTF-8)"
                             : f.error == proto::FrameError::truncated    ? "(an unterminated line)"
                                                                          : "(a line over 4096 bytes, dropped)";
          std::string line = "[subagent:" + self->cfg_.id + "] " + text;
          self->stderr_logged_ += line.size();  // the prefix too: a flood of blank lines counts
          self->cfg_.on_log(line);
          if (self->stderr_logged_ > kMaxLogBytes)
            self->cfg_.on_log("[subagent:" + self->cfg_.id + "] (more than 1 MiB of log; the rest is dropped)");
        }
        if (ec) {
          boost::system::error_code ignored;
          self->child_err_.close(ignored);
          return;
        }
        self->do_read_stderr();
      });
}

void ChildSession::on_end(const ChildEnd& end) {
  exited_ = true;
  exit_.code = end.code;
  exit_.signal = end.signal;
  json fields = {{"code", exit_.code ? json(*exit_.code) : json(nullptr)},
                 {"signal", exit_.signal ? json(*exit_.signal) : json(nullptr)}};
  if (end.state == RuntimeState::lost) fields["lost"] = end.detail;
  emit(make_event(EventKind::exit, std::move(fields)));
  if (end.state == RuntimeState::lost && !final_)
    fail(proto::Status::failed,
         "the child was lost by its runtime (" + std::string(runtime_->name()) + "): " + end.detail);
  if (rate_paused_) {  // what the child left in its pipe is read now, at any rate
    rate_timer_.cancel();
    resume_after_rate();
  }
  if (!stdout_eof_) {
    // Give buffered output a moment to drain; a grandchild holding the pipe must not keep us waiting.
    drain_timer_.expires_after(std::chrono::milliseconds(200));
    drain_timer_.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (e || self->stdout_eof_) return;
      self->stdout_eof_ = true;
      boost::system::error_code ignored;
      self->from_child_.cancel(ignored);
      self->maybe_finish();
    });
  }
  maybe_finish();
}

// ---- writing -------------------------------------------------------------------------------------

void ChildSession::send(const proto::SupervisorMessage& m) {
  if (!child_ || exited_ || !to_child_.is_open()) return;
  std::string line = proto::encode_line(m);
  if (!writing_) {
    // Nothing is queued or in flight, so writing now keeps the order. The descriptor is
    // non-blocking: a full pipe takes part of the line (or none) and the rest waits for the loop.
    std::size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::write(to_child_.native_handle(), line.data() + off, line.size() - off);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {  // EPIPE: the child closed its stdin or died; nothing more to say to it
        close_to_child();
        return;
      }
    }
    if (off == line.size()) return;
    line.erase(0, off);
  }
  write_queue_.push_back(std::move(line));
  if (!writing_) do_write();
}

void ChildSession::do_write() {
  if (write_queue_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  // Every line queued so far in one gathered write; lines queued meanwhile go in the next.
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(write_queue_.size());
  for (const std::string& line : write_queue_) buffers.push_back(asio::buffer(line));
  asio::async_write(to_child_, buffers,
                    [self = shared_from_this(), count = buffers.size()](boost::system::error_code ec, std::size_t) {
                      if (ec) return self->close_to_child();
                      self->write_queue_.erase(self->write_queue_.begin(),
                                               self->write_queue_.begin() + static_cast<std::ptrdiff_t>(count));
                      self->do_write();
                    });
}

void ChildSession::close_to_child() {
  write_queue_.clear();
  writing_ = false;
  boost::system::error_code ignored;
  to_child_.close(ignored);
}

}  // namespace supervisor
