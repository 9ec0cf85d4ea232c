// The parent's side of the supervisor: JSON lines in on one fd, JSON lines out on another, on the
// io_context thread. Used by `serve` and `mcp`. A parent that sends garbage gets an error line and
// the supervisor keeps going; end of input is reported once.
//
// Errors: none thrown; a bad line goes to on_bad_line, the end of input to on_end.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/framing.hpp"

namespace supervisor {

class ParentIo : public std::enable_shared_from_this<ParentIo> {
 public:
  // Beyond this much unwritten output, `log` events are dropped (and counted in a later log line);
  // requests' answers and envelopes are always queued.
  static constexpr std::size_t kMaxQueuedLogBytes = 1 << 20;
  struct Handlers {
    std::function<void(const nlohmann::json& msg)> on_message;  // a JSON value (any type) per line
    std::function<void(const std::string& error)> on_bad_line;  // not JSON, not UTF-8, too long
    std::function<void()> on_eof;
  };
  static std::shared_ptr<ParentIo> create(boost::asio::io_context& io, int in_fd, int out_fd, std::size_t max_line,
                                          Handlers h);
  void start();
  void send(const nlohmann::json& msg);
  // Runs `done` once everything queued so far has been written.
  void flush(std::function<void()> done);
  // While paused no more input is read (the lines one read already brought are still handed over);
  // resume_reading() reads on. A front end pauses while a request is answered off the loop.
  void pause_reading() noexcept { paused_ = true; }
  void resume_reading();

 private:
  ParentIo(boost::asio::io_context& io, int in_fd, int out_fd, std::size_t max_line, Handlers h);
  void do_read();
  void on_data(std::string_view data, bool eof);
  void do_write();

  boost::asio::io_context& io_;
  int in_fd_, out_fd_;
  bool in_regular_ = false, out_regular_ = false;
  boost::asio::posix::stream_descriptor in_, out_;
  protocol::LineReader reader_;
  Handlers h_;
  std::array<char, 65536> buf_{};
  static constexpr std::size_t kWriteBatch = 256 * 1024;  // bytes per write to the parent, at most
  std::deque<std::string> queue_;
  std::string batch_;             // what the write in flight carries
  std::size_t queued_bytes_ = 0;  // in queue_
  std::size_t logs_dropped_ = 0;  // log lines not queued since the last note about it
  bool writing_ = false;
  bool out_broken_ = false;
  bool paused_ = false;    // pause_reading()
  bool read_due_ = false;  // a read was skipped while paused
  std::vector<std::function<void()>> flush_waiters_;
};

}  // namespace supervisor
