#include "session/budgets.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace supervisor {

InputEstimator::Request InputEstimator::shape(const nlohmann::json& messages, const nlohmann::json& tools) {
  auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  Request r;
  r.hashes.reserve(messages.size());
  r.bytes.reserve(messages.size());
  for (const auto& m : messages) {
    std::string text = dump(m);
    r.hashes.push_back(std::hash<std::string>{}(text));
    r.bytes.push_back(text.size());
  }
  if (!tools.empty()) {
    std::string text = dump(tools);
    r.tools_hash = std::hash<std::string>{}(text);
    r.tools_bytes = text.size();
    r.tools = tools.size();
  }
  return r;
}

std::uint64_t InputEstimator::reserve(const Request& r) const {
  const std::size_t n = r.bytes.size();
  std::uint64_t whole = r.tools_bytes + kTokensPerPart * (n + r.tools);
  for (std::size_t b : r.bytes) whole += b;
  if (!have_) return whole;
  // The provider may send the last turn's thinking back with it (Anthropic's signed blocks), which
  // the neutral messages do not hold: at most what that call reported as reasoning.
  whole += reasoning_;
  std::size_t from = 0;
  while (from < n && from < base_.hashes.size() && base_.hashes[from] == r.hashes[from] &&
         base_.bytes[from] == r.bytes[from])
    ++from;
  std::uint64_t added = kTokensPerPart * (n - from);
  for (std::size_t i = from; i < n; ++i) added += r.bytes[i];
  if (r.tools > 0 && (r.tools_hash != base_.tools_hash || r.tools_bytes != base_.tools_bytes))
    added += r.tools_bytes + kTokensPerPart * r.tools;
  return std::min(whole, input_ + added + reasoning_);
}

void InputEstimator::observe(Request r, std::uint64_t input_tokens, std::uint64_t reasoning_tokens) {
  have_ = true;
  base_ = std::move(r);
  input_ = input_tokens;
  reasoning_ = reasoning_tokens;
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
