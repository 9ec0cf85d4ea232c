// Per-spawn limits. Inherit, never widen: a spawn may only tighten its preset's budgets.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "protocol/messages.hpp"
#include "models/model_config.hpp"
#include "policy/preset.hpp"

namespace supervisor {

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

// The parent's scope caps the cost budget like the others: a spawn asking more than the scope's
// max_cost_usd is refused (WideningError naming limits.max_cost_usd); otherwise the scope's lowers it.
void cap_cost_by_scope(Budgets& b, const BudgetOverrides& scope, const BudgetOverrides& limits);

// "$0.25" style text for errors and reasons.
std::string format_usd(double v);

// Reservation (protocol/README.md, "Budgets"): the input tokens of the next model call, estimated
// before it starts, so no call begins that its input could carry past the budget.
//
// The estimate is the previous call's reported input plus the bytes added since at `bytes_per_token`
// (3 to start with, lowered to what this child's calls really showed when that is denser), plus
// kTokensPerMessage for each new message. Before any call it is all the bytes at that ratio. When
// the request shrank (trimmed history, no tools in the wrap-up turn) it scales the previous input.
class InputEstimator {
 public:
  static constexpr double kDefaultBytesPerToken = 3.0;
  static constexpr std::uint64_t kTokensPerMessage = 8;

  std::uint64_t estimate(std::size_t request_bytes, std::size_t messages) const;
  // After a call: what the provider reported for a request of that size.
  void observe(std::size_t request_bytes, std::size_t messages, std::uint64_t input_tokens);
  double bytes_per_token() const noexcept { return bytes_per_token_; }

 private:
  bool have_ = false;
  std::size_t bytes_ = 0, messages_ = 0;
  std::uint64_t input_ = 0;
  double bytes_per_token_ = kDefaultBytesPerToken;
};

// Cost of one call's usage at `p` (US dollars): uncached input, cache reads, cache writes, output.
double cost_of(const protocol::Usage& u, const Price& p);
// The dearest price an input token can have (a cache write costs more than plain input).
double worst_input_price(const Price& p);

// "90s", "5m", "1h", "250ms", "1h30m" or a bare number of seconds. Throws std::invalid_argument.
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace supervisor
