#include "orchestration/budgets.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace supervisor {

namespace {
std::string label(const char* flag, const char* name, const std::string& prefix) {
  return prefix.empty() ? std::string(flag) : prefix + name;
}

void apply(std::uint64_t& field, const std::optional<std::uint64_t>& want, const char* name, const char* flag,
           const std::string& who, const std::string& prefix, bool zero_ok = false) {
  if (!want) return;
  if (*want == 0 && !zero_ok)
    throw WideningError(label(flag, name, prefix) + " 0: must be at least 1 (a budget of 0 would end the child "
                        "before it starts; leave it out to keep " + who + "'s " + std::to_string(field) + ")");
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
  apply(b.max_tool_calls, o.max_tool_calls, "max_tool_calls", "--max-tool-calls", who, prefix, true);
  apply(b.max_tokens, o.max_tokens, "max_tokens", "--max-tokens", who, prefix);
  apply(b.max_thinking_tokens, o.max_thinking_tokens, "max_thinking_tokens", "--max-thinking-tokens", who, prefix, true);
  if (o.timeout_ms && *o.timeout_ms == 0)
    throw WideningError(label("--timeout", "timeout", prefix) + " 0: must be at least 1ms (a timeout of 0 would end "
                        "the child before it starts; leave it out to keep " + who + "'s " +
                        std::to_string(b.timeout_ms) + "ms)");
  if (o.timeout_ms && *o.timeout_ms > b.timeout_ms) {
    throw WideningError(label("--timeout", "timeout", prefix) + " " + std::to_string(*o.timeout_ms) + "ms exceeds " +
                        who + "'s timeout " + std::to_string(b.timeout_ms) + "ms (limits may only tighten)");
  }
  if (o.timeout_ms) b.timeout_ms = *o.timeout_ms;
  apply(b.summary_bytes, o.summary_bytes, "summary_bytes", "--summary-bytes", who, prefix);
  apply(b.answer_bytes, o.answer_bytes, "answer_bytes", "--answer-bytes", who, prefix);
  apply(b.wrap_up_grace_ms, o.wrap_up_grace_ms, "wrap_up_grace_ms", "--wrap-up-grace", who, prefix, true);
  if (o.max_cost_usd) {
    if (!(*o.max_cost_usd > 0))
      throw std::invalid_argument(label("--max-cost-usd", "max_cost_usd", prefix) + " must be a positive number of US dollars");
    if (b.max_cost_usd && *o.max_cost_usd > *b.max_cost_usd)
      throw WideningError(label("--max-cost-usd", "max_cost_usd", prefix) + " " + format_usd(*o.max_cost_usd) +
                          " exceeds " + who + "'s max_cost_usd " + format_usd(*b.max_cost_usd) + " (limits may only tighten)");
    b.max_cost_usd = o.max_cost_usd;
  }
  return b;
}

void cap_cost_by_scope(Budgets& b, const BudgetOverrides& scope, const BudgetOverrides& limits) {
  if (!scope.max_cost_usd) return;
  if (limits.max_cost_usd && *limits.max_cost_usd > *scope.max_cost_usd)
    throw WideningError("limits.max_cost_usd " + format_usd(*limits.max_cost_usd) + " exceeds the parent's scope max_cost_usd " +
                        format_usd(*scope.max_cost_usd) + " (a child never gets more than its parent)");
  if (!b.max_cost_usd || *scope.max_cost_usd < *b.max_cost_usd) b.max_cost_usd = scope.max_cost_usd;
}

std::uint64_t InputEstimator::estimate(std::size_t bytes, std::size_t messages) const {
  auto tokens = [this](std::size_t b) { return static_cast<std::uint64_t>(std::ceil(static_cast<double>(b) / bytes_per_token_)); };
  if (!have_) return tokens(bytes) + kTokensPerMessage * messages;
  const std::uint64_t added_messages = messages > messages_ ? messages - messages_ : 0;
  if (bytes >= bytes_) return input_ + tokens(bytes - bytes_) + kTokensPerMessage * added_messages;
  // Shrunk: the previous input in proportion, never under what the bytes alone suggest.
  const auto scaled = static_cast<std::uint64_t>(
      std::ceil(static_cast<double>(input_) * static_cast<double>(bytes) / static_cast<double>(std::max<std::size_t>(1, bytes_))));
  return std::max(scaled, tokens(bytes)) + kTokensPerMessage * added_messages;
}

void InputEstimator::observe(std::size_t bytes, std::size_t messages, std::uint64_t input_tokens) {
  have_ = true;
  bytes_ = bytes;
  messages_ = messages;
  input_ = input_tokens;
  // A child whose text comes out denser than 3 bytes a token (much punctuation, non-Latin text) gets
  // its own ratio, so the next estimate does not fall short by the same factor again.
  if (input_tokens > 0 && bytes > 0)
    bytes_per_token_ = std::min(bytes_per_token_, std::max(1.0, static_cast<double>(bytes) / static_cast<double>(input_tokens)));
}

double cost_of(const protocol::Usage& u, const Price& p) {
  const std::uint64_t cached = std::min(u.cache_read_input_tokens, u.input_tokens);
  const std::uint64_t written = std::min(u.cache_write_input_tokens, u.input_tokens - cached);
  const std::uint64_t plain = u.input_tokens - cached - written;
  return (static_cast<double>(plain) * p.input + static_cast<double>(cached) * p.cached_input +
          static_cast<double>(written) * p.cache_write + static_cast<double>(u.output_tokens) * p.output) /
         1e6;
}

double worst_input_price(const Price& p) { return std::max({p.input, p.cached_input, p.cache_write}); }

std::string format_usd(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v < 0.01 ? "$%.6f" : "$%.4f", v);
  return buf;
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
