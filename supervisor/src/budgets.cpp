#include "supervisor/budgets.hpp"

#include <cctype>

namespace supervisor {

namespace {
void apply(std::uint64_t& field, const std::optional<std::uint64_t>& want, const char* name, const char* flag,
           const std::string& who, std::uint64_t scale = 1, const char* unit = "") {
  if (!want) return;
  if (*want > field) {
    throw WideningError(std::string(flag) + " " + std::to_string(*want / scale) + unit + " exceeds " + who + "'s " +
                        name + " " + std::to_string(field / scale) + unit + " (limits may only tighten)");
  }
  field = *want;
}
}  // namespace

Budgets tighten(const Budgets& base, const BudgetOverrides& o, const std::string& who) {
  Budgets b = base;
  apply(b.max_steps, o.max_steps, "max_steps", "--max-steps", who);
  apply(b.max_tool_calls, o.max_tool_calls, "max_tool_calls", "--max-tool-calls", who);
  apply(b.max_tokens, o.max_tokens, "max_tokens", "--max-tokens", who);
  apply(b.max_thinking_tokens, o.max_thinking_tokens, "max_thinking_tokens", "--max-thinking-tokens", who);
  if (o.timeout_ms && *o.timeout_ms > b.timeout_ms) {
    throw WideningError("--timeout " + std::to_string(*o.timeout_ms) + "ms exceeds " + who + "'s timeout " +
                        std::to_string(b.timeout_ms) + "ms (limits may only tighten)");
  }
  if (o.timeout_ms) b.timeout_ms = *o.timeout_ms;
  apply(b.summary_bytes, o.summary_bytes, "summary_bytes", "--summary-bytes", who);
  apply(b.answer_bytes, o.answer_bytes, "answer_bytes", "--answer-bytes", who);
  apply(b.wrap_up_grace_ms, o.wrap_up_grace_ms, "wrap_up_grace", "--wrap-up-grace", who);
  return b;
}

std::chrono::milliseconds parse_duration(std::string_view text) {
  if (text.empty()) throw std::invalid_argument("empty duration");
  std::uint64_t total = 0;
  std::size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    std::uint64_t n = 0;
    std::size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (n > (UINT64_MAX / 10) - 10) throw std::invalid_argument("duration '" + std::string(text) + "' is too large");
      n = n * 10 + static_cast<std::uint64_t>(text[i++] - '0');
    }
    if (i == start) throw std::invalid_argument("duration '" + std::string(text) + "' must look like 90s, 5m, 1h or 250ms");
    std::string_view unit = text.substr(i);
    std::uint64_t scale;
    if (unit.empty() && !any) {
      scale = 1000;
    } else if (unit.rfind("ms", 0) == 0) {
      scale = 1, i += 2;
    } else if (unit[0] == 's') {
      scale = 1000, i += 1;
    } else if (unit[0] == 'm') {
      scale = 60'000, i += 1;
    } else if (unit[0] == 'h') {
      scale = 3'600'000, i += 1;
    } else {
      throw std::invalid_argument("duration '" + std::string(text) + "' has an unknown unit (use ms, s, m or h)");
    }
    if (n > UINT64_MAX / scale) throw std::invalid_argument("duration '" + std::string(text) + "' is too large");
    total += n * scale;
    any = true;
  }
  return std::chrono::milliseconds(total);
}

}  // namespace supervisor
