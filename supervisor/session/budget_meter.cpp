// BudgetMeter (budget_meter.hpp): a child's budget use and the checks against its budgets.
#include "session/budget_meter.hpp"

#include <algorithm>

namespace supervisor {

std::uint64_t BudgetMeter::tokens_left() const {
  return budgets_.max_tokens > usage_.total() ? budgets_.max_tokens - usage_.total() : 0;
}

std::uint64_t BudgetMeter::thinking_left() const {
  return budgets_.max_thinking_tokens > usage_.reasoning_tokens ? budgets_.max_thinking_tokens - usage_.reasoning_tokens
                                                                : 0;
}

std::uint64_t BudgetMeter::output_room(std::uint64_t est_input, Budget* bound) const {
  const std::uint64_t left = tokens_left();
  std::uint64_t room = left > est_input ? left - est_input : 0;
  if (bound) *bound = Budget::tokens;
  if (budgets_.max_cost_usd && price_) {
    const double money =
        *budgets_.max_cost_usd - cost_usd_ - static_cast<double>(est_input) * worst_input_price(*price_) / 1e6;
    const double out = money <= 0 ? 0 : price_->output > 0 ? money * 1e6 / price_->output : 1e18;
    const std::uint64_t buys = out >= 1e18 ? UINT64_MAX : static_cast<std::uint64_t>(out);
    if (buys < room) {
      room = buys;
      if (bound) *bound = Budget::cost;
    }
  }
  return room;
}

std::optional<Exhausted> BudgetMeter::reservation_refusal(std::uint64_t est_input, std::uint64_t min_output) const {
  if (output_room(est_input) >= min_output) return std::nullopt;
  const std::uint64_t left = tokens_left();
  if (left < est_input + min_output)
    return Exhausted{Budget::tokens, "token budget exhausted: the next call could need " + std::to_string(est_input) +
                                         " input + " + std::to_string(min_output) + " output tokens and " +
                                         std::to_string(left) + " of " + std::to_string(budgets_.max_tokens) +
                                         " remain (" + std::to_string(usage_.total()) + " used)"};
  return Exhausted{Budget::cost, "cost budget exhausted: the next call could cost up to " +
                                     format_usd(static_cast<double>(est_input) * worst_input_price(*price_) / 1e6 +
                                                static_cast<double>(min_output) * price_->output / 1e6) +
                                     " and " + format_usd(std::max(0.0, *budgets_.max_cost_usd - cost_usd_)) + " of " +
                                     format_usd(*budgets_.max_cost_usd) + " remain (" + format_usd(cost_usd_) +
                                     " spent)"};
}

std::optional<Exhausted> BudgetMeter::before_model_call(std::uint64_t est_input) const {
  if (steps_ >= budgets_.max_steps)
    return Exhausted{Budget::steps, "step budget exhausted (" + std::to_string(steps_) + " of " +
                                        std::to_string(budgets_.max_steps) + ")"};
  if (auto refusal = reservation_refusal(est_input, kMinOutputTokens)) return refusal;
  if (usage_.reasoning_tokens >= budgets_.max_thinking_tokens && budgets_.max_thinking_tokens > 0)
    return Exhausted{Budget::thinking_tokens, "thinking-token budget exhausted (" +
                                                  std::to_string(usage_.reasoning_tokens) + " of " +
                                                  std::to_string(budgets_.max_thinking_tokens) + ")"};
  return std::nullopt;
}

std::optional<Exhausted> BudgetMeter::before_tool_call() const {
  if (tool_calls_ >= budgets_.max_tool_calls)
    return Exhausted{Budget::tool_calls, "tool-call budget exhausted (" + std::to_string(tool_calls_) + " of " +
                                             std::to_string(budgets_.max_tool_calls) + ")"};
  return std::nullopt;
}

double BudgetMeter::charge(const protocol::Usage& usage) {
  usage_ += usage;
  if (!price_) return 0;
  const double cost = cost_of(usage, *price_);
  cost_usd_ += cost;
  return cost;
}

}  // namespace supervisor
