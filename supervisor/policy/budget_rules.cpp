// The budget rules (budget_rules.hpp).
#include "policy/budget_rules.hpp"

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
    throw WideningError(label(flag, name, prefix) +
                        " 0: must be at least 1 (a budget of 0 would end the child "
                        "before it starts; leave it out to keep " +
                        who + "'s " + std::to_string(field) + ")");
  if (*want > field) {
    throw WideningError(label(flag, name, prefix) + " " + std::to_string(*want) + " exceeds " + who + "'s " + name +
                        " " + std::to_string(field) + " (limits may only tighten)");
  }
  field = *want;
}

}  // namespace

const char* to_string(Budget b) noexcept {
  switch (b) {
    case Budget::steps:
      return "steps";
    case Budget::tool_calls:
      return "tool_calls";
    case Budget::tokens:
      return "tokens";
    case Budget::thinking_tokens:
      return "thinking_tokens";
    case Budget::cost:
      return "cost";
    case Budget::time:
      return "time";
    case Budget::disk:
      return "disk";
  }
  return "tokens";
}

Budgets tighten(const Budgets& base, const BudgetOverrides& o, const std::string& who, const std::string& prefix) {
  Budgets b = base;
  apply(b.max_steps, o.max_steps, "max_steps", "--max-steps", who, prefix);
  apply(b.max_tool_calls, o.max_tool_calls, "max_tool_calls", "--max-tool-calls", who, prefix, true);
  apply(b.max_tokens, o.max_tokens, "max_tokens", "--max-tokens", who, prefix);
  apply(b.max_thinking_tokens, o.max_thinking_tokens, "max_thinking_tokens", "--max-thinking-tokens", who, prefix,
        true);
  if (o.timeout_ms && *o.timeout_ms == 0)
    throw WideningError(label("--timeout", "timeout", prefix) +
                        " 0: must be at least 1ms (a timeout of 0 would end "
                        "the child before it starts; leave it out to keep " +
                        who + "'s " + std::to_string(b.timeout_ms) + "ms)");
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
      throw std::invalid_argument(label("--max-cost-usd", "max_cost_usd", prefix) +
                                  " must be a positive number of US dollars");
    if (b.max_cost_usd && *o.max_cost_usd > *b.max_cost_usd)
      throw WideningError(label("--max-cost-usd", "max_cost_usd", prefix) + " " + format_usd(*o.max_cost_usd) +
                          " exceeds " + who + "'s max_cost_usd " + format_usd(*b.max_cost_usd) +
                          " (limits may only tighten)");
    b.max_cost_usd = o.max_cost_usd;
  }
  return b;
}

protocol::Limits child_limits(const Budgets& b) {
  protocol::Limits l;
  l.max_steps = b.max_steps;
  l.max_tool_calls = b.max_tool_calls;
  l.max_tokens = b.max_tokens;
  l.timeout_ms = b.timeout_ms;
  l.summary_bytes = b.summary_bytes;
  l.answer_bytes = b.answer_bytes;
  l.tool_result_bytes = b.tool_result_bytes;
  l.max_thinking_tokens = b.max_thinking_tokens;
  l.wrap_up_grace_ms = b.wrap_up_grace_ms;
  return l;
}

std::string format_usd(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v < 0.01 ? "$%.6f" : "$%.4f", v);
  return buf;
}

}  // namespace supervisor
