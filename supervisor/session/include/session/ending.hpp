// How a child ended: its status, the budget that ended it and the reason, decided in one place.
//
// Every way a session can end reaches Ending::on() as an event: the child's final answer, a budget
// or the clock used up (wrap-up asked), a cancel (the parent's, or the supervisor shutting down), a
// failure (a protocol error, a start that failed, the runtime losing the child), the wrap-up grace
// running out, the child exiting without a final. on() applies the rules below and says what the
// event did; once the envelope is written the session seals the ending, and no event changes it.
//
//   undecided      + final       -> completed (failed when the last model call had failed)
//   budget|timeout + final       -> unchanged, "; the child wrapped up with a final answer"
//   undecided      + budget      -> budget_exhausted or timeout, with the budget
//   undecided|budget|timeout + cancel -> cancelled ("cancelled: <why>")
//   anything but cancelled + failure  -> the failure's status and reason; except a protocol error
//                                   after the supervisor killed the child for a decided reason
//                                   (its own kill cut the line): after_kill, unchanged
//   budget|timeout + grace expired -> unchanged, "; the child did not wrap up within N ms and was killed"
//   undecided      + exited      -> failed, naming the exit code or signal
//   every other pair             -> ignored
//
// Not thread-safe; the session's loop thread owns it.
#pragma once

#include <optional>
#include <string>

#include "session/budget_meter.hpp"
#include "protocol/envelope.hpp"

namespace supervisor {

enum class EndingEvent { final_answer, budget, cancel, failure, grace_expired, exited };
const char* to_string(EndingEvent e) noexcept;

// What one event carries; each event reads only its own fields.
struct EndingInput {
  EndingEvent event = EndingEvent::failure;
  protocol::Status status = protocol::Status::failed;  // budget: budget_exhausted or timeout; failure
  std::optional<Budget> budget;                        // budget
  std::string reason;                                  // budget, cancel, failure: the event's words
  bool supervisor_killed = false;                      // failure: the supervisor had killed the child
  std::string model_failed;                            // final_answer: the last model call's error
  std::uint64_t grace_ms = 0;                          // grace_expired
  std::optional<int> code, signal;                     // exited
};

class Ending {
 public:
  enum class Effect {
    decided,     // the status (and reason) is now this event's
    amended,     // the status stands; the reason says more
    ignored,     // nothing changed
    after_kill,  // a failure the supervisor's own kill caused: nothing changed
  };

  Effect on(const EndingInput& in);
  // After the envelope: every later event is ignored.
  void seal() noexcept { sealed_ = true; }

  bool decided() const noexcept { return status_.has_value(); }
  std::optional<protocol::Status> status() const noexcept { return status_; }
  std::optional<Budget> budget() const noexcept { return budget_; }
  const std::string& reason() const noexcept { return reason_; }
  bool is(protocol::Status s) const noexcept { return status_ == s; }
  bool sealed() const noexcept { return sealed_; }

 private:
  bool wrapping() const noexcept {
    return status_ == protocol::Status::budget_exhausted || status_ == protocol::Status::timeout;
  }
  Effect decide(protocol::Status s, std::optional<Budget> b, std::string reason);

  std::optional<protocol::Status> status_;
  std::optional<Budget> budget_;
  std::string reason_;
  bool sealed_ = false;
};

}  // namespace supervisor
