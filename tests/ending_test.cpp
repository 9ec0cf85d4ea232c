// The one place a child's ending is decided (session/ending.hpp): every state x event pair,
// and no event after the seal changing anything. The sessions that use it: session_logic_test.cpp
// (in-process children) and session_test.cpp (real sandboxed children).
#include "session/ending.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <vector>

using namespace supervisor;
using protocol::Status;
using Effect = Ending::Effect;

namespace {

EndingInput final_answer(std::string model_failed = {}) {
  EndingInput in;
  in.event = EndingEvent::final_answer;
  in.model_failed = std::move(model_failed);
  return in;
}
EndingInput budget(Status s, Budget b) {
  EndingInput in;
  in.event = EndingEvent::budget;
  in.status = s;
  in.budget = b;
  in.reason = s == Status::timeout ? "wall-clock budget of 10 ms reached" : "step budget exhausted (3 of 3)";
  return in;
}
EndingInput cancel() {
  EndingInput in;
  in.event = EndingEvent::cancel;
  in.reason = "the parent said so";
  return in;
}
EndingInput failure(Status s, bool killed) {
  EndingInput in;
  in.event = EndingEvent::failure;
  in.status = s;
  in.reason = s == Status::protocol_error ? "protocol error: not JSON" : "could not start the child: no room";
  in.supervisor_killed = killed;
  return in;
}
EndingInput grace() {
  EndingInput in;
  in.event = EndingEvent::grace_expired;
  in.grace_ms = 500;
  return in;
}
EndingInput exited(std::optional<int> code, std::optional<int> sig) {
  EndingInput in;
  in.event = EndingEvent::exited;
  in.code = code;
  in.signal = sig;
  return in;
}

struct Prior {
  const char* name;
  std::vector<EndingInput> events;
};

// What is expected of one event from one prior state: the status after it ('-' undecided) and the effect.
struct Expect {
  char status;
  Effect effect;
};

std::optional<Status> status_of(char c) {
  switch (c) {
    case 'C':
      return Status::completed;
    case 'F':
      return Status::failed;
    case 'B':
      return Status::budget_exhausted;
    case 'T':
      return Status::timeout;
    case 'X':
      return Status::cancelled;
    case 'P':
      return Status::protocol_error;
    default:
      return std::nullopt;
  }
}

}  // namespace

TEST_CASE("every prior state x every event: the status, budget and reason the one ending decides") {
  const std::vector<Prior> priors = {
      {"undecided", {}},
      {"completed", {final_answer()}},
      {"failed (model)", {final_answer("HTTP 503")}},
      {"budget_exhausted", {budget(Status::budget_exhausted, Budget::steps)}},
      {"timeout", {budget(Status::timeout, Budget::time)}},
      {"cancelled", {cancel()}},
      {"failed", {failure(Status::failed, false)}},
      {"protocol_error", {failure(Status::protocol_error, false)}},
  };
  struct Event {
    const char* name;
    EndingInput in;
  };
  const std::vector<Event> events = {
      {"final", final_answer()},
      {"final after a model failure", final_answer("timeout")},
      {"budget (steps)", budget(Status::budget_exhausted, Budget::steps)},
      {"budget (time)", budget(Status::timeout, Budget::time)},
      {"cancel", cancel()},
      {"failure", failure(Status::failed, false)},
      {"protocol error", failure(Status::protocol_error, false)},
      {"protocol error after the supervisor's kill", failure(Status::protocol_error, true)},
      {"wrap-up grace expired", grace()},
      {"exited with code 3", exited(3, std::nullopt)},
      {"killed by SIGSEGV", exited(std::nullopt, SIGSEGV)},
  };
  constexpr Effect D = Effect::decided, A = Effect::amended, I = Effect::ignored, K = Effect::after_kill;
  // Rows: priors, in order; columns: events, in order.
  const Expect table[8][11] = {
      // final      final(mf)  steps      time       cancel     failure    proto      proto/kill grace      exit 3
      // SIGSEGV
      {{'C', D}, {'F', D}, {'B', D}, {'T', D}, {'X', D}, {'F', D}, {'P', D}, {'P', D}, {'-', I}, {'F', D}, {'F', D}},
      {{'C', I}, {'C', I}, {'C', I}, {'C', I}, {'C', I}, {'F', D}, {'P', D}, {'C', K}, {'C', I}, {'C', I}, {'C', I}},
      {{'F', I}, {'F', I}, {'F', I}, {'F', I}, {'F', I}, {'F', D}, {'P', D}, {'F', K}, {'F', I}, {'F', I}, {'F', I}},
      {{'B', A}, {'B', A}, {'B', I}, {'B', I}, {'X', D}, {'F', D}, {'P', D}, {'B', K}, {'B', A}, {'B', I}, {'B', I}},
      {{'T', A}, {'T', A}, {'T', I}, {'T', I}, {'X', D}, {'F', D}, {'P', D}, {'T', K}, {'T', A}, {'T', I}, {'T', I}},
      {{'X', I}, {'X', I}, {'X', I}, {'X', I}, {'X', I}, {'X', I}, {'X', I}, {'X', K}, {'X', I}, {'X', I}, {'X', I}},
      {{'F', I}, {'F', I}, {'F', I}, {'F', I}, {'F', I}, {'F', D}, {'P', D}, {'F', K}, {'F', I}, {'F', I}, {'F', I}},
      {{'P', I}, {'P', I}, {'P', I}, {'P', I}, {'P', I}, {'F', D}, {'P', D}, {'P', D}, {'P', I}, {'P', I}, {'P', I}},
  };
  for (std::size_t p = 0; p < priors.size(); ++p) {
    for (std::size_t e = 0; e < events.size(); ++e) {
      CAPTURE(priors[p].name);
      CAPTURE(events[e].name);
      Ending ending;
      for (const auto& in : priors[p].events) ending.on(in);
      const std::string reason_before = ending.reason();
      const auto budget_before = ending.budget();
      const Effect effect = ending.on(events[e].in);
      const Expect& want = table[p][e];
      CHECK(effect == want.effect);
      CHECK(ending.status() == status_of(want.status));
      if (effect == Effect::ignored || effect == Effect::after_kill) {
        CHECK(ending.reason() == reason_before);
        CHECK(ending.budget() == budget_before);
      }
      if (effect == Effect::amended) {
        CHECK(ending.reason().rfind(reason_before, 0) == 0);  // the reason says more, never less
        CHECK(ending.reason().size() > reason_before.size());
      }
      // A budget is named only when a budget decided the ending.
      if (ending.status() != Status::budget_exhausted && ending.status() != Status::timeout)
        CHECK_FALSE(ending.budget());
    }
  }
}

TEST_CASE("the reasons name what happened") {
  Ending a;
  a.on(budget(Status::budget_exhausted, Budget::steps));
  a.on(final_answer());
  CHECK(a.reason() == "step budget exhausted (3 of 3); the child wrapped up with a final answer");
  CHECK(a.budget() == Budget::steps);

  Ending b;
  b.on(budget(Status::timeout, Budget::time));
  b.on(grace());
  CHECK(b.reason() == "wall-clock budget of 10 ms reached; the child did not wrap up within 500 ms and was killed");

  Ending c;
  c.on(exited(std::nullopt, SIGSEGV));
  CHECK(c.reason() == "the child was killed by signal SIGSEGV before sending a final answer");

  Ending d;
  d.on(final_answer("HTTP 503"));
  CHECK(d.reason() == "the model call failed (HTTP 503); the child reported what it had");

  Ending e;
  e.on(cancel());
  CHECK(e.reason() == "cancelled: the parent said so");
}

TEST_CASE("once sealed, no event changes the ending") {
  const std::vector<EndingInput> all = {final_answer(),
                                        final_answer("x"),
                                        budget(Status::budget_exhausted, Budget::tokens),
                                        budget(Status::timeout, Budget::time),
                                        cancel(),
                                        failure(Status::failed, false),
                                        failure(Status::protocol_error, false),
                                        failure(Status::protocol_error, true),
                                        grace(),
                                        exited(1, std::nullopt),
                                        exited(std::nullopt, SIGKILL)};
  for (const auto& first : all) {
    Ending ending;
    ending.on(first);
    ending.on(exited(0, std::nullopt));  // what finish() does before it seals
    ending.seal();
    const auto status = ending.status();
    const auto budget_was = ending.budget();
    const std::string reason = ending.reason();
    REQUIRE(status);
    for (const auto& later : all) {
      CAPTURE(to_string(first.event));
      CAPTURE(to_string(later.event));
      CHECK(ending.on(later) == Effect::ignored);
      CHECK(ending.status() == status);
      CHECK(ending.budget() == budget_was);
      CHECK(ending.reason() == reason);
    }
  }
}
