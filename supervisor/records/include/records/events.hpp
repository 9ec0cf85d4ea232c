// The vocabulary of session events: what a ChildSession and the Hub emit, one JSON object each with
// an "event" field (docs/transcripts.md lists their fields). Emitters name a kind with the enum;
// the text appears only in the JSON, written by to_string() and read back by parse_event_kind().
//
// Errors: none thrown; an unknown text parses to nullopt.
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace supervisor {

enum class EventKind {
  queued,            // the hub accepted a spawn (hub)
  spawn,             // the session starts: preset, digest, workspace, model
  runtime_state,     // the child's runtime queued it (a batch queue): state, runtime
  started,           // the child runs under its sandbox: runtime, its id (pid), layers applied and missing
  hello,             // the child's hello: agent, protocol version
  model_request,     // a model call the supervisor makes for the child
  model_response,    // its reply, with the usage the provider reported
  tool_results_cut,  // tool results in a request cut to tool_result_bytes
  tool_decision,     // allow, deny or ask, and the rule that decided
  approval,          // the approver's answer to an ask
  denial,            // a tool call refused (any reason), as the envelope lists it
  tool_result,       // a brokered tool's result
  tool_done,         // a local tool finished in the child
  budget,            // a budget or the clock is used up: the child is asked to wrap up
  final,             // the child's final answer
  failure,           // a protocol error or a launch failure
  after_kill,        // an error the supervisor's own kill caused (not the child's fault)
  kill,              // the child's process tree is killed
  cancel,            // the parent cancelled the child (hub)
  exit,              // the child exited: code or signal
  envelope,          // the result envelope
  delivered,         // the hub handed the envelope to the front end (hub)
  abandoned,         // its supervisor died without settling it; crash recovery did (recovery.hpp)
};

const char* to_string(EventKind k) noexcept;
std::optional<EventKind> parse_event_kind(std::string_view text) noexcept;
// The kind of a recorded event (its "event" field), or nullopt when it has none or an unknown one.
std::optional<EventKind> event_kind(const nlohmann::json& event) noexcept;

// An event of `kind` with `fields` (an object): {"event": to_string(kind), ...fields}.
nlohmann::json make_event(EventKind kind, nlohmann::json fields = nlohmann::json::object());

}  // namespace supervisor
