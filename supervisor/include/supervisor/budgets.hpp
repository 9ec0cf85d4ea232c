// Per-spawn limits. Inherit, never widen: a spawn may only tighten its preset's budgets.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "supervisor/preset.hpp"

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
};

// Thrown when an override asks for more than the base allows; what() names the field and both values:
// "--max-steps 500 exceeds the preset explore's max_steps 100 (limits may only tighten)".
class WideningError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// `who` names the base in errors ("the preset explore", "the parent's scope"); `field_prefix`
// names the request's fields: empty for command-line flags ("--max-steps"), or e.g. "limits." for a
// JSON request ("limits.max_steps").
Budgets tighten(const Budgets& base, const BudgetOverrides& o, const std::string& who,
                const std::string& field_prefix = "");

// "90s", "5m", "1h", "250ms", "1h30m" or a bare number of seconds. Throws std::invalid_argument.
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace supervisor
