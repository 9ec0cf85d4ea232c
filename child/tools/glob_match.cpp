#include "glob_match.hpp"

#include "common.hpp"

namespace child::tools_detail {

namespace {

// Decodes UTF-8; bytes that are not part of a valid sequence map to U+DC00+byte so they still
// compare equal to themselves.
std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += c;
      ++i;
      continue;
    }
    std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len && i + len <= s.size() && utf8_valid(s.substr(i, len))) {
      char32_t v = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (std::size_t k = 1; k < len; ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      out += v;
      i += len;
    } else {
      out += static_cast<char32_t>(0xDC00 + c);
      ++i;
    }
  }
  return out;
}

}  // namespace

SegmentPattern::SegmentPattern(std::string_view seg) {
  std::u32string p = decode(seg);
  for (std::size_t i = 0; i < p.size(); ++i) {
    char32_t c = p[i];
    if (c == U'\\' && i + 1 < p.size()) {
      tokens_.push_back({Token::lit, p[++i], false, {}});
    } else if (c == U'*') {
      if (tokens_.empty() || tokens_.back().kind != Token::star) tokens_.push_back({Token::star, 0, false, {}});
      literal_ = false;
    } else if (c == U'?') {
      tokens_.push_back({Token::any, 0, false, {}});
      literal_ = false;
    } else if (c == U'[') {
      Token t{Token::cls, 0, false, {}};
      std::size_t j = i + 1;
      if (j < p.size() && (p[j] == U'!' || p[j] == U'^')) {
        t.negate = true;
        ++j;
      }
      bool first = true;
      for (; j < p.size() && (first || p[j] != U']'); ++j) {
        first = false;
        char32_t lo = p[j];
        if (lo == U'\\' && j + 1 < p.size()) lo = p[++j];
        char32_t hi = lo;
        if (j + 2 < p.size() && p[j + 1] == U'-' && p[j + 2] != U']') {
          hi = p[j + 2];
          if (hi == U'\\' && j + 3 < p.size()) {
            hi = p[j + 3];
            ++j;
          }
          j += 2;
        }
        t.ranges.emplace_back(lo, hi);
      }
      if (j >= p.size()) {
        throw ToolError("glob pattern '" + std::string(seg) + "' has an unterminated '['");
      }
      i = j;
      tokens_.push_back(std::move(t));
      literal_ = false;
    } else {
      tokens_.push_back({Token::lit, c, false, {}});
    }
  }
  if (literal_) {
    for (std::size_t i = 0; i < seg.size(); ++i) {
      if (seg[i] == '\\' && i + 1 < seg.size()) ++i;
      text_ += seg[i];
    }
  }
}

bool SegmentPattern::token_matches(const Token& t, char32_t c) const {
  switch (t.kind) {
    case Token::lit:
      return t.c == c;
    case Token::any:
      return true;
    case Token::cls: {
      bool in = false;
      for (auto [lo, hi] : t.ranges) {
        if (c >= lo && c <= hi) {
          in = true;
          break;
        }
      }
      return in != t.negate;
    }
    case Token::star:
      break;
  }
  return false;
}

bool SegmentPattern::match(std::string_view name) const {
  if (literal_) return name == text_;
  std::u32string s = decode(name);
  std::size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < s.size()) {
    if (p < tokens_.size() && tokens_[p].kind == Token::star) {
      star = p++;
      mark = t;
    } else if (p < tokens_.size() && token_matches(tokens_[p], s[t])) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < tokens_.size() && tokens_[p].kind == Token::star) ++p;
  return p == tokens_.size();
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

GlobPattern::GlobPattern(std::string_view pattern) {
  if (pattern.empty()) throw ToolError("glob pattern is empty");
  for (std::string_view seg : split_path(pattern)) {
    if (seg == ".") continue;
    if (seg == "..") {
      throw ToolError("glob pattern '" + std::string(pattern) +
                      "' contains '..'; patterns are relative to the search directory");
    }
    if (seg == "**") {
      if (!segs_.empty() && segs_.back().globstar) continue;
      segs_.push_back({true, SegmentPattern("*")});
    } else {
      segs_.push_back({false, SegmentPattern(seg)});
    }
  }
  if (segs_.empty()) throw ToolError("glob pattern '" + std::string(pattern) + "' matches nothing");
}

bool GlobPattern::match(std::string_view path) const {
  std::vector<std::string_view> s = split_path(path);
  std::size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < s.size()) {
    if (p < segs_.size() && segs_[p].globstar) {
      star = p++;
      mark = t;
    } else if (p < segs_.size() && segs_[p].pat.match(s[t])) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < segs_.size() && segs_[p].globstar) ++p;
  return p == segs_.size();
}

}  // namespace child::tools_detail
