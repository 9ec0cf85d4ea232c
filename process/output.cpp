#include "process/output.hpp"

#include <algorithm>

namespace process {

namespace {

// The largest cut <= n that does not split a UTF-8 sequence.
std::size_t utf8_floor(std::string_view s, std::size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

HeadTailKeeper::HeadTailKeeper(std::size_t cap) {
  cap = std::max<std::size_t>(cap, 2);
  head_cap_ = cap - cap / 2;
  tail_cap_ = cap / 2;
}

void HeadTailKeeper::add(std::string_view chunk) {
  const char* p = chunk.data();
  std::size_t n = chunk.size();
  total_ += n;
  if (head_.size() < head_cap_) {
    std::size_t k = std::min(n, head_cap_ - head_.size());
    head_.append(p, k);
    p += k;
    n -= k;
  }
  if (n == 0 || tail_cap_ == 0) return;
  tail_.append(p, n);
  if (tail_.size() > 2 * tail_cap_ + 65536) tail_.erase(0, tail_.size() - tail_cap_);
}

std::string HeadTailKeeper::finish(bool* cut) {
  *cut = total_ > head_.size() + tail_.size() || (tail_.size() > tail_cap_);
  if (tail_.size() > tail_cap_) tail_.erase(0, tail_.size() - tail_cap_);
  if (!*cut) return head_ + tail_;
  std::size_t h = utf8_floor(head_, head_.size());
  std::size_t t = 0;
  while (t < tail_.size() && (static_cast<unsigned char>(tail_[t]) & 0xC0) == 0x80) ++t;
  std::size_t omitted = total_ - h - (tail_.size() - t);
  std::string out = head_.substr(0, h);
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "[... " + std::to_string(omitted) + " bytes of output omitted ...]\n";
  out.append(tail_, t, std::string::npos);
  return out;
}

bool CappedBuffer::add(std::string_view chunk) {
  if (text_.size() + chunk.size() > cap_) {
    text_.append(chunk.substr(0, cap_ - text_.size()));
    truncated_ = true;
  } else {
    text_.append(chunk);
  }
  return !truncated_;
}

}  // namespace process
