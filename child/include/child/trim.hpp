// Context trimming for the reference child (docs/models.md, "Context trimming"): once the history the
// child resends passes a threshold, the results of tool turns older than the newest few become a short
// stub naming the tool and the size of the result, and saying to repeat the call (whose arguments stay
// in the history, in the assistant turn just before the stub) to see it again.
//
// Trimming and prompt caching work together: the trim boundary moves only forward, by whole blocks of
// tool turns (then up to the newest keep_turns), and a stub never changes again, so everything before
// the boundary is identical, byte for byte, on every later request. With the defaults (keep 1, block
// 1) a result is sent whole once, in the request that follows its call, and is a stub from the next
// request on: each request changes the history only after the previous request's last assistant turn,
// where that request's new result starts, so the cached prefix always reaches that far.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace child {

struct TrimOptions {
  bool enabled = true;
  // Defaults chosen on bench/README.md's 40-step session (issue 33): a whole result left in the history
  // is read again, from the cache, on every later request, which costs more than the rare re-fetch;
  // and with keep_turns 1 a block of 1 rewrites nothing the next request would have read from cache.
  std::size_t threshold_bytes = 8'000;  // history size (JSON bytes) that starts trimming, for good
  std::size_t keep_turns = 1;           // the newest tool turns whose results stay whole (at least 1)
  std::size_t block = 1;                // the boundary moves only by at least this many tool turns
  std::size_t min_result_bytes = 300;   // results this small are kept (a stub would save nothing)
};

class Trimmer {
 public:
  explicit Trimmer(TrimOptions o = {}) : o_(o) {}
  // Stubs what the options say in `messages` (neutral chat messages); returns how many results it
  // replaced this time.
  std::size_t trim(nlohmann::json& messages);
  std::size_t boundary() const noexcept { return boundary_; }  // tool turns before it are trimmed
  const TrimOptions& options() const noexcept { return o_; }

 private:
  TrimOptions o_;
  std::size_t boundary_ = 0;
  bool started_ = false;  // the history has passed the threshold once: trim on every turn since
};

// The stub that replaces one tool result: the tool, the result's size, and to repeat the call. It
// leaves out the call's arguments: the assistant turn just before it holds them (the API pairs a
// result with its call), and every request resends each stub.
std::string trim_stub(const std::string& tool, std::size_t result_bytes);

// Parses the child's trimming flags (--no-trim, --trim-threshold-bytes N, --trim-keep-turns N,
// --trim-block N). Throws std::invalid_argument naming the flag.
TrimOptions parse_trim_flags(const std::vector<std::string>& args);

}  // namespace child
