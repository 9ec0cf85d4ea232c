// Budget arithmetic during a child's life: the input estimate that reserves tokens before a model
// call, the cost of a call, durations. What a child's budgets are (preset ∩ scope ∩ limits) is
// scope.hpp's. Errors: parse_duration throws std::invalid_argument; the rest cannot fail.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "protocol/messages.hpp"
#include "models/model_config.hpp"
#include "orchestration/scope.hpp"
#include "policy/preset.hpp"

namespace supervisor {

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
