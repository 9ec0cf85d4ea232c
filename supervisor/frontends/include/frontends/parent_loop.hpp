// The loop every parent-facing front end runs: the parent's messages on stdin, replies on stdout,
// SIGINT and SIGTERM taken as "end", and the orderly end (every child cancelled and its envelope
// delivered, the output flushed) before the io_context stops.
//
// Errors: none thrown; every way of ending (input closed, SIGINT, SIGTERM) goes through on_end.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "frontends/operations.hpp"
#include "frontends/parent_io.hpp"

namespace supervisor {

// Keeps a parent's requests in order while one of them is answered off the loop (a spawn's checks
// run on a worker, operations.hpp): what arrives meanwhile, a bad line and the end of input
// included, waits, and runs in order once that one is answered, so a `list` sent after a `spawn`
// sees its child and the end of input drains or cancels it. While it holds, the parent's input is
// not read (`on_hold(true)` pauses it), so what waits is at most what one read brought.
class RequestGate {
 public:
  // Runs `f` now, or holds it behind the request being answered.
  void submit(std::function<void()> f);
  // From now on requests wait (a request answered off the loop was just taken).
  void hold();
  // Runs what waits, in order, until one of them holds again.
  void release();
  // Told true when the gate begins to hold, false when it lets requests through again.
  std::function<void(bool holding)> on_hold;

 private:
  bool holding_ = false;
  bool paused_ = false;  // on_hold(true) was told, on_hold(false) not yet
  bool releasing_ = false;
  std::deque<std::function<void()>> waiting_;
};

struct ParentLoop {
  std::function<void(const nlohmann::json&)> on_message;
  std::function<void(const std::string& error)> on_bad_line;  // not JSON, not UTF-8, too long
  std::function<void(const std::string& why)> on_end;         // end of input, SIGINT, SIGTERM
  std::string eof_reason = "the parent closed its input";
  std::function<void()> on_eof;  // when set, end of input calls this instead of on_end (serve --drain)
  // When set, every line and the end of input pass through it (signals do not), and it pauses the
  // parent's input while it holds.
  RequestGate* gate = nullptr;
};

// Serves one parent on stdin/stdout: creates `parent` (so handlers can send through it), then runs
// `io` until it is stopped, as end_front_end() does.
void run_parent_loop(boost::asio::io_context& io, std::shared_ptr<ParentIo>& parent, std::size_t max_line,
                     ParentLoop loop);

// Ends a front end: cancels every child and denies every pending approval (when there are
// operations yet; each envelope is still delivered), writes out what is queued for the parent, then
// stops `io`.
void end_front_end(boost::asio::io_context& io, Operations* ops, const std::shared_ptr<ParentIo>& parent,
                   const std::string& why);

}  // namespace supervisor
