#include "orchestration/budgets.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace supervisor {

std::uint64_t InputEstimator::estimate(std::size_t bytes, std::size_t messages) const {
  auto tokens = [this](std::size_t b) {
    return static_cast<std::uint64_t>(std::ceil(static_cast<double>(b) / bytes_per_token_));
  };
  if (!have_) return tokens(bytes) + kTokensPerMessage * messages;
  const std::uint64_t added_messages = messages > messages_ ? messages - messages_ : 0;
  if (bytes >= bytes_) return input_ + tokens(bytes - bytes_) + kTokensPerMessage * added_messages;
  // Shrunk: the previous input in proportion, never under what the bytes alone suggest.
  const auto scaled = static_cast<std::uint64_t>(std::ceil(static_cast<double>(input_) * static_cast<double>(bytes) /
                                                           static_cast<double>(std::max<std::size_t>(1, bytes_))));
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
    bytes_per_token_ =
        std::min(bytes_per_token_, std::max(1.0, static_cast<double>(bytes) / static_cast<double>(input_tokens)));
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
    if (i == start)
      throw std::invalid_argument("duration '" + std::string(text) + "' must look like 90s, 5m, 1h or 250ms");
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
