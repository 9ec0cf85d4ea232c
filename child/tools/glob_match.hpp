// Shell-style glob patterns: *, ?, [...] (with ! or ^ to negate, ranges), \ escapes, and ** as a
// whole path segment matching any number of directories. Matching is linear-ish (greedy star
// backtracking, no exponential cases) and '?' matches one UTF-8 character.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace child::tools_detail {

class SegmentPattern {
 public:
  // Throws ToolError for a malformed pattern (unterminated '[').
  explicit SegmentPattern(std::string_view seg);
  bool match(std::string_view name) const;
  bool is_literal() const { return literal_; }
  const std::string& text() const { return text_; }

 private:
  struct Token {
    enum Kind { lit, any, star, cls } kind;
    char32_t c = 0;
    bool negate = false;
    std::vector<std::pair<char32_t, char32_t>> ranges;
  };
  bool token_matches(const Token& t, char32_t c) const;
  std::vector<Token> tokens_;
  std::string text_;  // unescaped text when literal
  bool literal_ = true;
};

class GlobPattern {
 public:
  struct Segment {
    bool globstar;
    SegmentPattern pat;
  };
  // Throws ToolError for an empty pattern, a ".." segment or a malformed segment.
  explicit GlobPattern(std::string_view pattern);
  // `path` is '/'-separated and relative.
  bool match(std::string_view path) const;
  const std::vector<Segment>& segments() const { return segs_; }

 private:
  std::vector<Segment> segs_;
};

std::vector<std::string_view> split_path(std::string_view path);

}  // namespace child::tools_detail
