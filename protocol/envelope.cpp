#include "protocol/envelope.hpp"

#include <csignal>
#include <cstring>

#include "protocol/framing.hpp"

namespace protocol {

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::completed:
      return "completed";
    case Status::budget_exhausted:
      return "budget_exhausted";
    case Status::timeout:
      return "timeout";
    case Status::cancelled:
      return "cancelled";
    case Status::failed:
      return "failed";
    case Status::protocol_error:
      return "protocol_error";
  }
  return "failed";
}

std::optional<Status> status_from_string(std::string_view s) noexcept {
  for (Status st : {Status::completed, Status::budget_exhausted, Status::timeout, Status::cancelled, Status::failed,
                    Status::protocol_error})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

int exit_code_for(Status s) noexcept {
  switch (s) {
    case Status::completed:
      return 0;
    case Status::budget_exhausted:
      return 2;
    case Status::timeout:
      return 3;
    case Status::cancelled:
      return 4;
    case Status::failed:
      return 5;
    case Status::protocol_error:
      return 6;
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

nlohmann::json to_json(const Denial& d) { return {{"tool", d.tool}, {"rule", d.rule}, {"reason", d.reason}}; }

Denial capped_denial(Denial d) {
  auto cut = [](std::string& s, std::size_t cap) {
    if (s.size() > cap) s.resize(utf8_prefix_length(s, cap));
  };
  cut(d.tool, kDenialToolBytes);
  cut(d.rule, kDenialRuleBytes);
  cut(d.reason, kDenialReasonBytes);
  return d;
}

namespace {
// The list's size as compact JSON, as the envelope will hold it (invalid UTF-8 replaced, as dumped).
std::size_t denials_bytes(const std::vector<Denial>& list) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : list) a.push_back(to_json(d));
  return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
}

// Lists `d` if it fits after what is listed; false when it does not.
bool try_list(std::vector<Denial>& listed, Denial d) {
  if (listed.size() >= kMaxDenials) return false;
  listed.push_back(capped_denial(std::move(d)));
  if (denials_bytes(listed) <= kMaxDenialsBytes) return true;
  listed.pop_back();
  return false;
}
}  // namespace

void DenialList::add(Denial d) {
  // Once one is omitted, every later one is too: the list stays the first denials, in order.
  if (omitted > 0 || !try_list(listed, std::move(d))) ++omitted;
}

void DenialList::refit() {
  std::vector<Denial> before = std::move(listed);
  listed.clear();
  std::uint64_t dropped = 0;
  for (auto& d : before)
    if (dropped > 0 || !try_list(listed, std::move(d))) ++dropped;
  omitted += dropped;
}

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
  j["denials"] = nlohmann::json::array();
  for (const auto& d : e.denials.listed) j["denials"].push_back(to_json(d));
  j["denials_omitted"] = e.denials.omitted;
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
