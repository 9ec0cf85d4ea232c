// Bounded newline-delimited framing shared by the supervisor and the child.
//
// Contract: a LineReader never buffers more than max_line bytes of one line. A line that grows past
// the bound, a stream that ends inside a line, or a line that is not valid UTF-8 is reported as a
// FrameError; the caller decides what that means (the supervisor treats any of them as a protocol
// error of that one child). Not thread-safe; one reader per stream.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace protocol {

inline constexpr std::size_t kDefaultMaxLine = 1u << 20;  // 1 MiB per line

enum class FrameError {
  none,
  line_too_long,  // a line exceeded max_line bytes (the rest of it up to '\n' is discarded)
  invalid_utf8,   // a complete line that is not well-formed UTF-8
  truncated,      // the stream ended inside a line
};

const char* to_string(FrameError e) noexcept;

struct Frame {
  std::string line;  // without the trailing '\n' (and without a '\r' before it)
  FrameError error = FrameError::none;
  std::size_t size = 0;  // bytes of the offending line (for errors), or line.size()
};

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool is_valid_utf8(std::string_view s) noexcept;

// Longest prefix of `s` of at most `max_bytes` bytes that ends on a UTF-8 character boundary.
std::size_t utf8_prefix_length(std::string_view s, std::size_t max_bytes) noexcept;

class LineReader {
 public:
  explicit LineReader(std::size_t max_line = kDefaultMaxLine) : max_line_(max_line) {}

  // Consumes `data`; appends every completed line (or error) to `out`, in stream order.
  void feed(std::string_view data, std::vector<Frame>& out);

  // Call at end of stream: reports a partial line as `truncated`.
  void finish(std::vector<Frame>& out);

  std::size_t max_line() const noexcept { return max_line_; }
  std::size_t buffered() const noexcept { return partial_.size(); }

 private:
  void complete_line(std::vector<Frame>& out);

  std::size_t max_line_;
  std::string partial_;
  bool discarding_ = false;  // inside an oversize line, skipping to the next '\n'
  std::size_t discarded_ = 0;
};

}  // namespace protocol
