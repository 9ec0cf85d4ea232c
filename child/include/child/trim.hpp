// Context trimming for the reference child (docs/models.md, "Context trimming"): once the history the
// child resends passes a threshold, the results of tool turns older than the newest few become a short
// stub naming the tool, its arguments and the size of the result. The model can call the tool again.
//
// Trimming and prompt caching work together: the trim boundary moves only by whole blocks of tool
// turns (then up to the newest keep_turns), and a stub never changes again, so the resent prefix
// changes at most once per block (one cache write from the boundary on: the stubs and the kept
// turns) and stays identical, byte for byte, between those moves.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace child {

struct TrimOptions {
  bool enabled = true;
  // Defaults chosen on bench/README.md's 40-step session: every trim rewrites the cached prefix from
  // the boundary on, so keeping more turns whole costs cache writes and reads on every block.
  std::size_t threshold_bytes = 16'000;  // history size (JSON bytes) that starts a trim
  std::size_t keep_turns = 1;            // the newest tool turns whose results stay whole
  std::size_t block = 4;                 // the boundary moves only by at least this many tool turns
  std::size_t min_result_bytes = 300;    // results this small are kept (a stub would save nothing)
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
};

// The stub that replaces one tool result.
std::string trim_stub(const std::string& tool, const nlohmann::json& arguments, std::size_t result_bytes);

// Parses the child's trimming flags (--no-trim, --trim-threshold-bytes N, --trim-keep-turns N,
// --trim-block N). Throws std::invalid_argument naming the flag.
TrimOptions parse_trim_flags(const std::vector<std::string>& args);

}  // namespace child
