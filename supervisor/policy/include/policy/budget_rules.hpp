// A child's budgets in one place: what they are (Budgets, with the shipped defaults), what a request
// may ask (BudgetOverrides) and how it tightens them (tighten: inherit, never widen), which one ran
// out (Budget), and what the child is told of them (child_limits). Around it: a preset's `budgets`
// section is parsed in preset.cpp; a parent's scope caps them in session/scope.hpp
// (effective_budgets: preset ∩ scope ∩ limits); a running child's use is counted against them in
// session/budget_meter.hpp, with the input estimate of session/budgets.hpp.
//
// Errors: tighten() throws WideningError naming the field and both values.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "protocol/messages.hpp"

namespace supervisor {

// What one child may use (a preset's `budgets` section; these defaults where it is silent).
struct Budgets {
  std::uint64_t max_steps = 100;
  std::uint64_t max_tool_calls = 200;
  std::uint64_t max_tokens = 1'000'000;
  std::uint64_t max_thinking_tokens = 200'000;
  std::uint64_t timeout_ms = 30 * 60 * 1000;
  std::uint64_t summary_bytes = 2000;
  std::uint64_t answer_bytes = 48000;
  std::uint64_t tool_result_bytes = 16000;
  std::uint64_t wrap_up_grace_ms = 10'000;
  // Estimated spend in US dollars at the model config's prices (none: no cost budget). Needs a price
  // for the child's model; enforced with the same reservation as tokens (protocol/README.md).
  std::optional<double> max_cost_usd;
};

// Per-spawn (or per-scope) budget values; an absent one keeps its base.
struct BudgetOverrides {
  std::optional<std::uint64_t> max_steps;
  std::optional<std::uint64_t> max_tool_calls;
  std::optional<std::uint64_t> max_tokens;
  std::optional<std::uint64_t> max_thinking_tokens;
  std::optional<std::uint64_t> timeout_ms;
  std::optional<std::uint64_t> summary_bytes;
  std::optional<std::uint64_t> answer_bytes;
  std::optional<std::uint64_t> wrap_up_grace_ms;
  std::optional<double> max_cost_usd;
};

// Which budget ended a child's work (the envelope's "budget", the wrap_up message's).
enum class Budget { steps, tool_calls, tokens, thinking_tokens, cost, time, disk };
// "steps", "tool_calls", "tokens", "thinking_tokens", "cost", "time", "disk" (a writer's
// writes.max_disk_bytes: watched by the session, not metered here)
const char* to_string(Budget b) noexcept;

// Thrown when an override asks for more than the base allows; what() names the field and both values:
// "--max-steps 500 exceeds the preset explore's max_steps 100 (limits may only tighten)". Also for
// an override of 0 where 0 would end the child before it starts (steps, tokens, timeout, summary and
// answer bytes): "--max-steps 0: must be at least 1 ...". 0 stays valid for tool calls (a child that
// answers from its brief), thinking tokens (no thinking) and the wrap-up grace (none).
class WideningError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// `who` names the base in errors ("the preset explore", "the parent's scope"); `field_prefix`
// names the request's fields: empty for command-line flags ("--max-steps"), or e.g. "limits." for a
// JSON request ("limits.max_steps").
Budgets tighten(const Budgets& base, const BudgetOverrides& o, const std::string& who,
                const std::string& field_prefix = "");

// The limits a child is told in its welcome (protocol/README.md), from the budgets it runs under.
protocol::Limits child_limits(const Budgets& b);

// "$0.25" style text for errors and reasons.
std::string format_usd(double v);

}  // namespace supervisor
