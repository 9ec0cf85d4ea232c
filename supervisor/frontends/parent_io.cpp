#include "frontends/parent_io.hpp"

#include "protocol/messages.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace supervisor {
namespace asio = boost::asio;

namespace {
// epoll cannot watch regular files: those are read and written directly (they never block long).
bool is_regular(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

std::shared_ptr<ParentIo> ParentIo::create(asio::io_context& io, int in_fd, int out_fd, std::size_t max_line,
                                           Handlers h) {
  return std::shared_ptr<ParentIo>(new ParentIo(io, in_fd, out_fd, max_line, std::move(h)));
}

ParentIo::ParentIo(asio::io_context& io, int in_fd, int out_fd, std::size_t max_line, Handlers h)
    : io_(io), in_fd_(in_fd), out_fd_(out_fd), in_(io), out_(io), reader_(max_line), h_(std::move(h)) {
  // A parent that stopped reading must give EPIPE (then its children are still cancelled and the
  // supervisor exits 0), not kill the supervisor: before any child ran nothing else ignored SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  in_regular_ = is_regular(in_fd);
  out_regular_ = is_regular(out_fd);
  if (!in_regular_) in_.assign(::fcntl(in_fd, F_DUPFD_CLOEXEC, 3));
  if (!out_regular_) out_.assign(::fcntl(out_fd, F_DUPFD_CLOEXEC, 3));
}

void ParentIo::start() { do_read(); }

void ParentIo::do_read() {
  if (in_regular_) {
    asio::post(io_, [self = shared_from_this()] {
      ssize_t n = ::read(self->in_fd_, self->buf_.data(), self->buf_.size());
      if (n < 0 && errno == EINTR) return self->do_read();
      self->on_data(std::string_view(self->buf_.data(), n > 0 ? static_cast<std::size_t>(n) : 0), n <= 0);
    });
    return;
  }
  in_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
    self->on_data(std::string_view(self->buf_.data(), ec ? 0 : n), static_cast<bool>(ec));
  });
}

void ParentIo::on_data(std::string_view data, bool eof) {
  std::vector<protocol::Frame> frames;
  if (eof)
    reader_.finish(frames);
  else
    reader_.feed(data, frames);
  for (auto& f : frames) {
    if (f.error != protocol::FrameError::none) {
      if (h_.on_bad_line)
        h_.on_bad_line(std::string(protocol::to_string(f.error)) + " (a line of " + std::to_string(f.size) +
                       " bytes; limit " + std::to_string(reader_.max_line()) + ")");
      continue;
    }
    if (f.line.find_first_not_of(" \t") == std::string::npos) continue;
    if (!protocol::nesting_within(f.line)) {
      if (h_.on_bad_line)
        h_.on_bad_line("arrays and objects nested deeper than " + std::to_string(protocol::kMaxDepth) + " levels");
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(f.line, nullptr, false);
    if (j.is_discarded()) {
      if (h_.on_bad_line) h_.on_bad_line("not valid JSON");
      continue;
    }
    if (h_.on_message) h_.on_message(j);
  }
  if (eof) {
    if (h_.on_eof) h_.on_eof();
    return;
  }
  if (paused_) {
    read_due_ = true;
    return;
  }
  do_read();
}

void ParentIo::resume_reading() {
  paused_ = false;
  if (!read_due_) return;
  read_due_ = false;
  do_read();
}

void ParentIo::send(const nlohmann::json& msg) {
  if (out_broken_) return;
  // Log lines are the one thing a parent may lose: while it reads more slowly than children write,
  // they are dropped (and counted) rather than queued without bound. Everything else is queued.
  auto type = msg.is_object() ? msg.find("type") : msg.end();
  const bool is_log = type != msg.end() && *type == "log";
  if (is_log && queued_bytes_ > kMaxQueuedLogBytes) {
    ++logs_dropped_;
    return;
  }
  if (logs_dropped_ > 0) {
    const std::string note = nlohmann::json{{"type", "log"},
                                            {"child_id", ""},
                                            {"line", "(" + std::to_string(logs_dropped_) +
                                                         " log lines dropped: the parent read more slowly than "
                                                         "the children wrote)"}}
                                 .dump() +
                             "\n";
    logs_dropped_ = 0;
    queued_bytes_ += note.size();
    queue_.push_back(note);
  }
  queue_.push_back(msg.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  queued_bytes_ += queue_.back().size();
  if (!writing_) do_write();
}

void ParentIo::flush(std::function<void()> done) {
  if (!writing_ && queue_.empty()) {
    asio::post(io_, std::move(done));
    return;
  }
  flush_waiters_.push_back(std::move(done));
}

void ParentIo::do_write() {
  if (queue_.empty() || out_broken_) {
    writing_ = false;
    queue_.clear();
    queued_bytes_ = 0;
    for (auto& w : flush_waiters_) asio::post(io_, std::move(w));
    flush_waiters_.clear();
    return;
  }
  writing_ = true;
  // One write carries everything queued (up to kWriteBatch bytes). A write per line let a flooding
  // child's reads run between every two lines, so an answer queued behind thousands of log lines
  // waited seconds (tests/hostile_children_test.cpp, stdout flood).
  batch_.clear();
  while (!queue_.empty() && (batch_.empty() || batch_.size() + queue_.front().size() <= kWriteBatch)) {
    batch_ += queue_.front();
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
  }
  if (out_regular_) {
    std::size_t off = 0;
    while (off < batch_.size()) {
      ssize_t n = ::write(out_fd_, batch_.data() + off, batch_.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        out_broken_ = true;
        break;
      }
      off += static_cast<std::size_t>(n);
    }
    asio::post(io_, [self = shared_from_this()] { self->do_write(); });
    return;
  }
  asio::async_write(out_, asio::buffer(batch_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (ec) self->out_broken_ = true;  // the parent went away; children are still cancelled cleanly
    self->do_write();
  });
}

}  // namespace supervisor
