// Where a program's output goes while it runs: kept as head and tail (a command's output, whose end
// usually says what went wrong), or captured up to a cap (a git step's stdout and stderr).
//
// Errors: none (plain value types).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace process {

// Bytes a program wrote, kept as the first half and a rolling last half of the cap.
class HeadTailKeeper {
 public:
  explicit HeadTailKeeper(std::size_t cap);  // a cap below 2 counts as 2

  void add(std::string_view chunk);
  std::size_t total() const { return total_; }  // everything added

  // The head, then "[... N bytes of output omitted ...]" and the tail when over the cap (cut on UTF-8
  // boundaries); everything when under it. `*cut` says which.
  std::string finish(bool* cut);

 private:
  std::size_t head_cap_, tail_cap_;
  std::string head_, tail_;
  std::size_t total_ = 0;
};

// The first `cap` bytes of a program's output.
class CappedBuffer {
 public:
  explicit CappedBuffer(std::size_t cap) : cap_(cap) {}

  // Keeps what fits; false when the chunk did not fit whole (this time or before).
  bool add(std::string_view chunk);
  bool truncated() const { return truncated_; }
  const std::string& str() const { return text_; }
  std::string take() { return std::move(text_); }

 private:
  std::size_t cap_;
  std::string text_;
  bool truncated_ = false;
};

}  // namespace process
