#include "protocol/envelope.hpp"

#include <csignal>
#include <cstring>

#include "protocol/framing.hpp"

namespace protocol {

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::completed: return "completed";
    case Status::budget_exhausted: return "budget_exhausted";
    case Status::timeout: return "timeout";
    case Status::cancelled: return "cancelled";
    case Status::failed: return "failed";
    case Status::protocol_error: return "protocol_error";
  }
  return "failed";
}

std::optional<Status> status_from_string(std::string_view s) noexcept {
  for (Status st : {Status::completed, Status::budget_exhausted, Status::timeout, Status::cancelled,
                    Status::failed, Status::protocol_error})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

int exit_code_for(Status s) noexcept {
  switch (s) {
    case Status::completed: return 0;
    case Status::budget_exhausted: return 2;
    case Status::timeout: return 3;
    case Status::cancelled: return 4;
    case Status::failed: return 5;
    case Status::protocol_error: return 6;
  }
  return 5;
}

CappedText cap_utf8(std::string_view s, std::size_t max_bytes) {
  CappedText out;
  out.original_bytes = s.size();
  const std::size_t keep = utf8_prefix_length(s, max_bytes);
  out.text.assign(s.data(), keep);
  out.truncated = keep < s.size();
  return out;
}

namespace {
nlohmann::json signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (!abbrev) return sig;
  return std::string("SIG") + abbrev;
}
}  // namespace

nlohmann::json to_json(const Envelope& e) {
  nlohmann::json j;
  j["id"] = e.id;
  j["preset"] = e.preset;
  j["description"] = e.description;
  j["status"] = to_string(e.status);
  j["budget"] = e.budget.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.budget);
  j["reason"] = e.reason;
  j["summary"] = e.summary.text;
  j["summary_truncated"] = e.summary.truncated;
  j["summary_bytes"] = e.summary.original_bytes;
  j["answer"] = e.answer.text;
  j["answer_truncated"] = e.answer.truncated;
  j["answer_bytes"] = e.answer.original_bytes;
  j["answer_partial"] = e.answer_partial;
  j["tools_used"] = e.tools_used;
  j["tools_denied"] = e.tools_denied;
  j["usage"] = to_json(e.usage);
  j["cost_usd"] = e.cost_usd ? nlohmann::json(*e.cost_usd) : nlohmann::json(nullptr);
  j["steps"] = e.steps;
  j["tool_calls"] = e.tool_calls;
  j["duration_ms"] = e.duration_ms;
  j["exit"] = {{"code", e.exit.code ? nlohmann::json(*e.exit.code) : nlohmann::json(nullptr)},
               {"signal", e.exit.signal ? signal_name(*e.exit.signal) : nlohmann::json(nullptr)}};
  j["transcript"] = e.transcript ? nlohmann::json(*e.transcript) : nlohmann::json(nullptr);
  j["sandbox"] = {{"applied", e.sandbox_applied}, {"missing", e.sandbox_missing}};
  if (!e.artifacts.empty()) j["artifacts"] = e.artifacts;
  return j;
}

}  // namespace protocol
