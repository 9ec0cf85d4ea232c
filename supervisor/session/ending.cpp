// The one place a child's ending is decided (ending.hpp).
#include "session/ending.hpp"

#include <cstring>

namespace supervisor {

namespace proto = protocol;

const char* to_string(EndingEvent e) noexcept {
  switch (e) {
    case EndingEvent::final_answer:
      return "final_answer";
    case EndingEvent::budget:
      return "budget";
    case EndingEvent::cancel:
      return "cancel";
    case EndingEvent::failure:
      return "failure";
    case EndingEvent::grace_expired:
      return "grace_expired";
    case EndingEvent::exited:
      return "exited";
  }
  return "failure";
}

Ending::Effect Ending::decide(proto::Status s, std::optional<Budget> b, std::string reason) {
  status_ = s;
  budget_ = b;
  reason_ = std::move(reason);
  return Effect::decided;
}

Ending::Effect Ending::on(const EndingInput& in) {
  if (sealed_) return Effect::ignored;
  switch (in.event) {
    case EndingEvent::final_answer:
      if (!decided()) {
        // The model server failed (down, resetting, stalled) and the child gave up: its report is
        // what it had, not a completed task.
        if (!in.model_failed.empty())
          return decide(proto::Status::failed, std::nullopt,
                        "the model call failed (" + in.model_failed + "); the child reported what it had");
        return decide(proto::Status::completed, std::nullopt, "the child sent its final answer");
      }
      if (!wrapping()) return Effect::ignored;
      reason_ += "; the child wrapped up with a final answer";
      return Effect::amended;
    case EndingEvent::budget:
      if (decided()) return Effect::ignored;
      return decide(in.status, in.budget, in.reason);
    case EndingEvent::cancel:
      if (decided() && !wrapping()) return Effect::ignored;
      return decide(proto::Status::cancelled, std::nullopt, "cancelled: " + in.reason);
    case EndingEvent::failure:
      if (in.status == proto::Status::protocol_error && in.supervisor_killed && decided() &&
          !is(proto::Status::protocol_error))
        return Effect::after_kill;
      if (is(proto::Status::cancelled)) return Effect::ignored;
      return decide(in.status, std::nullopt, in.reason);
    case EndingEvent::grace_expired:
      if (!wrapping()) return Effect::ignored;
      reason_ += "; the child did not wrap up within " + std::to_string(in.grace_ms) + " ms and was killed";
      return Effect::amended;
    case EndingEvent::exited:
      if (decided()) return Effect::ignored;
      if (in.signal)
        return decide(proto::Status::failed, std::nullopt,
                      std::string("the child was killed by signal SIG") +
                          (sigabbrev_np(*in.signal) ? sigabbrev_np(*in.signal) : "?") +
                          " before sending a final answer");
      return decide(
          proto::Status::failed, std::nullopt,
          "the child exited with code " + std::to_string(in.code.value_or(-1)) + " before sending a final answer");
  }
  return Effect::ignored;
}

}  // namespace supervisor
