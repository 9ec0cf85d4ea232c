// One child's budget use and every check against its budgets, in one place: what it has used (steps,
// tool calls, the usage providers reported, their cost), what is left, and the reservation that keeps
// a model call from starting when its worst-case input plus a minimum output would pass a budget.
//
// Bound (protocol/README.md, "Budgets"): counts are what providers report; a call is only started
// when its worst-case input (InputEstimator::reserve) and `min_output` fit, and its output is capped
// at what is left after that input, so tokens and cost never pass their budgets.
//
// Errors: none thrown; a refusal is a value (Exhausted) naming the budget and why, in words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "models/model_config.hpp"
#include "session/budgets.hpp"
#include "policy/preset.hpp"
#include "protocol/messages.hpp"

namespace supervisor {

// Output tokens allowed for the wrap-up turn (never more than the budgets leave).
inline constexpr std::uint64_t kWrapUpTurnTokens = 4096;
// A call starts only if its estimated input plus this much output fits in what the budgets leave.
inline constexpr std::uint64_t kMinOutputTokens = 256;

struct Exhausted {
  Budget budget;
  std::string why;  // "step budget exhausted (10 of 10)"
};

class BudgetMeter {
 public:
  BudgetMeter() = default;
  BudgetMeter(const Budgets& budgets, std::optional<Price> price) : budgets_(budgets), price_(std::move(price)) {}

  // Before a model call while the child runs: the budget the call would pass, if any (steps, then
  // tokens or cost by reservation, then thinking tokens).
  std::optional<Exhausted> before_model_call(std::uint64_t est_input) const;
  // Why a call of `est_input` input and `min_output` output may not start (tokens or cost), if so.
  std::optional<Exhausted> reservation_refusal(std::uint64_t est_input, std::uint64_t min_output) const;
  // Before a tool call while the child runs: the tool-call budget, if it is used up.
  std::optional<Exhausted> before_tool_call() const;

  // What the budgets leave for a call's output once its worst-case input is paid for (tokens and
  // cost); `bound`, if given, is set to the budget that sets it.
  std::uint64_t output_room(std::uint64_t est_input, Budget* bound = nullptr) const;
  std::uint64_t tokens_left() const;
  std::uint64_t thinking_left() const;

  void count_step() { ++steps_; }
  void count_tool_call() { ++tool_calls_; }
  // Adds one call's reported usage (and its cost, when the model has a price); returns that cost.
  double charge(const protocol::Usage& usage);

  std::uint64_t steps() const noexcept { return steps_; }
  std::uint64_t tool_calls() const noexcept { return tool_calls_; }
  const protocol::Usage& usage() const noexcept { return usage_; }
  const std::optional<Price>& price() const noexcept { return price_; }
  double cost_usd() const noexcept { return cost_usd_; }

 private:
  Budgets budgets_;
  std::optional<Price> price_;
  std::uint64_t steps_ = 0;
  std::uint64_t tool_calls_ = 0;
  protocol::Usage usage_;
  double cost_usd_ = 0;
};

}  // namespace supervisor
