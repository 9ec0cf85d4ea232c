// The result envelope: the one thing a parent gets back from a child. Documented in
// protocol/README.md ("Result envelope"). Text fields are capped on a UTF-8 boundary.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"

namespace protocol {

enum class Status { completed, budget_exhausted, timeout, cancelled, failed, protocol_error };

const char* to_string(Status s) noexcept;
std::optional<Status> status_from_string(std::string_view s) noexcept;

// Process exit status for `subagent-supervisor run`, one per envelope status.
int exit_code_for(Status s) noexcept;

struct CappedText {
  std::string text;
  bool truncated = false;
  std::size_t original_bytes = 0;
};

// Keeps at most `max_bytes` bytes of `s`, cut before any partial UTF-8 character.
CappedText cap_utf8(std::string_view s, std::size_t max_bytes);

struct ChildExit {
  std::optional<int> code;    // exit code, when the child exited
  std::optional<int> signal;  // terminating signal, when it was killed
};

// One tool call the supervisor refused: which tool, the rule that decided ("tools.deny",
// "tools.rules[2] {...}", "not offered", "ask: no approver", ...) and a short reason.
struct Denial {
  std::string tool;
  std::string rule;
  std::string reason;
};

// The envelope lists the first kMaxDenials denials, each field cut to its cap below, and never more
// than kMaxDenialsBytes of compact JSON for the whole list; later ones are only counted
// (denials_omitted). A child that loops on a refused tool must not fill its parent's context, and
// the parent needs the first few to see which rule bit; the transcript keeps every one.
inline constexpr std::size_t kMaxDenials = 16;
inline constexpr std::size_t kMaxDenialsBytes = 4096;
inline constexpr std::size_t kDenialToolBytes = 64;
inline constexpr std::size_t kDenialRuleBytes = 160;
inline constexpr std::size_t kDenialReasonBytes = 240;

struct DenialList {
  std::vector<Denial> listed;  // the first denials, in order, capped
  std::uint64_t omitted = 0;   // the rest, only counted

  // Lists `d`, its fields cut to their caps, when the list still has room (kMaxDenials entries,
  // kMaxDenialsBytes of JSON, and nothing omitted before it); otherwise counts it in `omitted`.
  void add(Denial d);
  // Lists the entries again under the caps after their text changed (scrubbing): the prefix that
  // still fits stays, the rest move to `omitted`.
  void refit();
  std::uint64_t total() const noexcept { return listed.size() + omitted; }
};

struct Envelope {
  std::string id;
  std::string preset;
  std::string description;
  Status status = Status::failed;
  std::string budget;  // which budget, when status == budget_exhausted
  std::string reason;  // one sentence on why the child ended this way
  CappedText summary;
  CappedText answer;
  // The answer was built from a model turn cut by the token cap (finish_reason length or budget),
  // with no complete turn after it: a fragment, not a finished answer.
  bool answer_partial = false;
  std::map<std::string, std::uint64_t> tools_used;  // tool name -> calls allowed and run
  std::uint64_t tools_denied = 0;                   // == denials.total()
  DenialList denials;                               // "denials" and "denials_omitted" in JSON
  Usage usage;
  std::optional<double> cost_usd;  // estimated from the model config's price table; none without prices
  std::uint64_t steps = 0;
  std::uint64_t tool_calls = 0;
  std::uint64_t duration_ms = 0;
  ChildExit exit;
  std::optional<std::string> transcript;
  std::vector<std::string> sandbox_applied;  // layers that were in force
  std::vector<std::string> sandbox_missing;  // layers the kernel lacked (reported, never silent)
  json artifacts = json::object();           // e.g. a patch from an implementation child
};

nlohmann::json to_json(const Envelope& e);
nlohmann::json to_json(const Denial& d);

// `d` with its fields cut (on UTF-8 boundaries) to their caps.
Denial capped_denial(Denial d);

}  // namespace protocol
