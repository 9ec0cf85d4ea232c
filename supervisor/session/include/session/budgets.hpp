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
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"
#include "models/model_config.hpp"
#include "session/scope.hpp"
#include "policy/preset.hpp"

namespace supervisor {

// Reservation (protocol/README.md, "Budgets"): the most input tokens the next model call can be
// counted, known before it starts, so no call begins that could carry the child past a budget.
//
// Without a tokenizer the bound is the worst case: a provider counts at most one token per byte of
// the request (its messages and tool specs as JSON) plus kTokensPerPart for each message and each
// tool spec. The reservation is the smaller of two bounds that both follow from it: the whole request
// at that rate, and the previous call's reported input plus, at that rate, what is new since (the
// messages from the first one that differs, and the tool specs if they changed). A request that
// dropped messages or tools is never credited for them: their share of the previous input is unknown.
// After a call both bounds add its reasoning tokens, which a provider may send back as input (the
// thinking blocks of a continued tool-use turn) though the neutral messages do not hold them.
class InputEstimator {
 public:
  static constexpr std::uint64_t kTokensPerPart = 32;

  // What the estimate needs of one request: each message's hash and size, the tool specs'.
  struct Request {
    std::vector<std::size_t> hashes, bytes;
    std::size_t tools_hash = 0, tools_bytes = 0, tools = 0;
  };
  static Request shape(const nlohmann::json& messages, const nlohmann::json& tools);

  // The most input tokens `r` can be counted (see above).
  std::uint64_t reserve(const Request& r) const;
  // After a call: what the provider reported for request `r` (its input and reasoning tokens).
  void observe(Request r, std::uint64_t input_tokens, std::uint64_t reasoning_tokens);

 private:
  bool have_ = false;
  Request base_;
  std::uint64_t input_ = 0, reasoning_ = 0;
};

// Cost of one call's usage at `p` (US dollars): uncached input, cache reads, cache writes, output.
double cost_of(const protocol::Usage& u, const Price& p);
// The dearest price an input token can have (a cache write costs more than plain input).
double worst_input_price(const Price& p);

// "90s", "5m", "1h", "250ms", "1h30m" or a bare number of seconds. Throws std::invalid_argument.
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace supervisor
