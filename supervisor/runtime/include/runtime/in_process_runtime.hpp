// The in-process runtime, for tests: a child is a script that runs on the session's own io_context
// and speaks protocol v1 over real pipes, so a session, its budgets and its ending are tested without
// fork, in milliseconds, and under ThreadSanitizer. It applies no sandbox layer (every one is reported
// missing) and cannot be chosen from the command line: nothing a user runs ever runs here.
//
//   InProcessRuntime rt([](std::shared_ptr<ScriptedChild> c) {
//     c->send(protocol::Hello{{1}, "script/1"});
//     c->on_message([c](const protocol::SupervisorMessage& m) {
//       if (std::holds_alternative<protocol::Welcome>(m)) c->send(protocol::Final{"s", "a", {}});
//       // ...
//     });
//   });
//
// A script ends its child with exit(code) (after what it sent has been read), or the session's
// kill_tree() ends it with signal 9. The runtime can also make a start queue, fail or lose the child
// (Options), for the states a remote runtime has.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "protocol/messages.hpp"
#include "runtime/child_runtime.hpp"

namespace supervisor {

// What a script sees of its child: its side of the three pipes. Every call on the io thread.
class ScriptedChild {
 public:
  virtual ~ScriptedChild() = default;
  // To the supervisor: one message as a protocol line, or raw bytes as they are (a broken line).
  virtual void send(const protocol::ChildMessage& m) = 0;
  virtual void send_raw(std::string bytes) = 0;
  virtual void log(std::string line) = 0;  // one stderr line
  // Each message the supervisor sends, decoded (a line that does not decode ends the child, code 12).
  virtual void on_message(std::function<void(const protocol::SupervisorMessage&)> h) = 0;
  virtual void close_stdout() = 0;
  // Ends the child with `code` once what it sent has been written.
  virtual void exit(int code) = 0;
  virtual bool ended() const = 0;
  virtual const std::string& id() const = 0;  // the spec's child id
  virtual const LaunchSpec& spec() const = 0;
};

using ChildScript = std::function<void(std::shared_ptr<ScriptedChild>)>;

class InProcessRuntime final : public ChildRuntime {
 public:
  struct Options {
    std::chrono::milliseconds queued_for{0};  // > 0: on_state(queued), then this long before it starts
    std::string fail_start;                   // non-empty: the start fails with this error
    // > 0: the child is lost this long after it started (ChildEnd lost, "the node went away").
    std::chrono::milliseconds lose_after{0};
  };

  explicit InProcessRuntime(ChildScript script) : InProcessRuntime(std::move(script), Options{}) {}
  InProcessRuntime(ChildScript script, Options options);

  std::string_view name() const noexcept override { return "in_process"; }
  RuntimeAbilities abilities() const override;
  std::unique_ptr<PendingStart> start(boost::asio::io_context& io, LaunchSpec spec, StartHandlers handlers) override;

  // How many children this runtime started, and how many of them are still not ended.
  std::size_t started() const noexcept { return *started_; }
  std::size_t alive() const noexcept { return *alive_; }

 private:
  ChildScript script_;
  Options options_;
  std::shared_ptr<std::size_t> started_ = std::make_shared<std::size_t>(0);
  std::shared_ptr<std::size_t> alive_ = std::make_shared<std::size_t>(0);
};

}  // namespace supervisor
