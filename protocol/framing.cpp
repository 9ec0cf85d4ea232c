#include "protocol/framing.hpp"

#include <cstdint>
#include <cstring>

namespace protocol {

const char* to_string(FrameError e) noexcept {
  switch (e) {
    case FrameError::none:
      return "none";
    case FrameError::line_too_long:
      return "line_too_long";
    case FrameError::invalid_utf8:
      return "invalid_utf8";
    case FrameError::truncated:
      return "truncated";
  }
  return "unknown";
}

bool is_valid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    // Runs of ASCII, eight bytes at a time: a long line is mostly that.
    while (end - p >= 8) {
      std::uint64_t word;
      std::memcpy(&word, p, sizeof word);
      if (word & 0x8080808080808080ULL) break;
      p += 8;
    }
    if (p == end) break;
    unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n;
    char32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong lead (C0/C1) or F5..FF
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    p += n + 1;
  }
  return true;
}

std::size_t utf8_prefix_length(std::string_view s, std::size_t max_bytes) noexcept {
  if (s.size() <= max_bytes) return s.size();
  std::size_t cut = max_bytes;
  // Step back over continuation bytes so the cut lands before a lead byte.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

void LineReader::complete_line(std::vector<Frame>& out) {
  if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
  Frame f;
  f.size = partial_.size();
  if (!is_valid_utf8(partial_)) {
    f.error = FrameError::invalid_utf8;
  } else {
    f.line = std::move(partial_);
  }
  partial_.clear();
  out.push_back(std::move(f));
}

void LineReader::feed(std::string_view data, std::vector<Frame>& out) {
  while (!data.empty()) {
    const void* nl = std::memchr(data.data(), '\n', data.size());
    const std::size_t take = nl ? static_cast<const char*>(nl) - data.data() : data.size();
    if (discarding_) {
      discarded_ += take;
      if (nl) {
        out.push_back(Frame{{}, FrameError::line_too_long, discarded_});
        discarding_ = false;
        discarded_ = 0;
      }
    } else if (partial_.size() + take > max_line_) {
      discarded_ = partial_.size() + take;
      partial_.clear();
      partial_.shrink_to_fit();
      if (nl) {
        out.push_back(Frame{{}, FrameError::line_too_long, discarded_});
        discarded_ = 0;
      } else {
        discarding_ = true;
      }
    } else {
      partial_.append(data.data(), take);
      if (nl) complete_line(out);
    }
    data.remove_prefix(nl ? take + 1 : take);
  }
}

void LineReader::finish(std::vector<Frame>& out) {
  if (discarding_) {
    out.push_back(Frame{{}, FrameError::line_too_long, discarded_});
  } else if (!partial_.empty()) {
    out.push_back(Frame{{}, FrameError::truncated, partial_.size()});
  }
  partial_.clear();
  discarding_ = false;
  discarded_ = 0;
}

}  // namespace protocol
