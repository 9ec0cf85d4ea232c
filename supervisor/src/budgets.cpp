#include "supervisor/budgets.hpp"

#include <cctype>
#include <cstdint>

namespace supervisor {

namespace {
std::string label(const char* flag, const char* name, const std::string& prefix) {
  return prefix.empty() ? std::string(flag) : prefix + name;
}

void apply(std::uint64_t& field, const std::optional<std::uint64_t>& want, const char* name, const char* flag,
           const std::string& who, const std::string& prefix) {
  if (!want) return;
  if (*want > field) {
    throw WideningError(label(flag, name, prefix) + " " + std::to_string(*want) + " exceeds " + who + "'s " + name + " " +
                        std::to_string(field) + " (limits may only tighten)");
  }
  field = *want;
}
}  // namespace

Budgets tighten(const Budgets& base, const BudgetOverrides& o, const std::string& who, const std::string& prefix) {
  Budgets b = base;
  apply(b.max_steps, o.max_steps, "max_steps", "--max-steps", who, prefix);
  apply(b.max_tool_calls, o.max_tool_calls, "max_tool_calls", "--max-tool-calls", who, prefix);
  apply(b.max_tokens, o.max_tokens, "max_tokens", "--max-tokens", who, prefix);
  apply(b.max_thinking_tokens, o.max_thinking_tokens, "max_thinking_tokens", "--max-thinking-tokens", who, prefix);
  if (o.timeout_ms && *o.timeout_ms > b.timeout_ms) {
    throw WideningError(label("--timeout", "timeout", prefix) + " " + std::to_string(*o.timeout_ms) + "ms exceeds " +
                        who + "'s timeout " + std::to_string(b.timeout_ms) + "ms (limits may only tighten)");
  }
  if (o.timeout_ms) b.timeout_ms = *o.timeout_ms;
  apply(b.summary_bytes, o.summary_bytes, "summary_bytes", "--summary-bytes", who, prefix);
  apply(b.answer_bytes, o.answer_bytes, "answer_bytes", "--answer-bytes", who, prefix);
  apply(b.wrap_up_grace_ms, o.wrap_up_grace_ms, "wrap_up_grace_ms", "--wrap-up-grace", who, prefix);
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
    // The result is a signed std::chrono::milliseconds: "9223372036854775808ms" or the sum of two
    // large parts must be refused, not wrapped to a negative or tiny time.
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
    if (n > kMax / scale || n * scale > kMax - total)
      throw std::invalid_argument("duration '" + std::string(text) + "' is too large");
    total += n * scale;
    any = true;
  }
  return std::chrono::milliseconds(total);
}

}  // namespace supervisor
