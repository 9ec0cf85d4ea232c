// JSON with comments: reading a policy file, and where each value and each repeated key is in its
// text (policy/jsonc.hpp).
#include "policy/jsonc.hpp"

#include <fstream>
#include <sstream>

#include "policy/preset.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A recursive reader of JSON text that records positions; it trusts nlohmann to have refused
// malformed text and simply stops where it does not understand the input.
class SourceMapper {
 public:
  explicit SourceMapper(const std::string& text) : t_(text) {}

  JsonSourceMap run() {
    skip();
    value("");
    return std::move(map_);
  }

 private:
  JsonPosition here() const { return {line_, i_ - line_start_ + 1}; }
  bool more() const { return i_ < t_.size(); }
  void advance() {
    if (t_[i_] == '\n') {
      ++line_;
      line_start_ = i_ + 1;
    }
    ++i_;
  }
  void skip() {  // whitespace and comments
    while (more()) {
      char c = t_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '/' && i_ + 1 < t_.size() && t_[i_ + 1] == '/') {
        while (more() && t_[i_] != '\n') advance();
      } else if (c == '/' && i_ + 1 < t_.size() && t_[i_ + 1] == '*') {
        advance(), advance();
        while (more() && !(t_[i_] == '*' && i_ + 1 < t_.size() && t_[i_ + 1] == '/')) advance();
        if (more()) advance(), advance();
      } else {
        return;
      }
    }
  }
  // A string's contents; escapes other than \uXXXX decoded (keys in policies are plain ASCII).
  std::string string() {
    std::string out;
    advance();  // "
    while (more() && t_[i_] != '"') {
      if (t_[i_] == '\\' && i_ + 1 < t_.size()) {
        advance();
        char e = t_[i_];
        out.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'u' ? '?' : e);
        if (e == 'u')
          for (int k = 0; k < 4 && i_ + 1 < t_.size(); ++k) advance();
      } else {
        out.push_back(t_[i_]);
      }
      advance();
    }
    if (more()) advance();  // "
    return out;
  }
  static std::string escape(const std::string& key) {  // RFC 6901
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }
  void value(const std::string& pointer) {
    // Positions are a convenience for messages: past this depth (no policy nests so deep) the map
    // stops instead of recursing on as far as a hostile file's brackets go.
    if (!more()) return;
    if (depth_ >= kMaxDepth) {
      i_ = t_.size();  // the rest of the text has no positions; every enclosing loop ends
      return;
    }
    ++depth_;
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    map_.at.emplace(pointer, here());
    const char c = t_[i_];
    if (c == '{') {
      advance();
      std::map<std::string, JsonPosition> seen;
      for (skip(); more() && t_[i_] != '}'; skip()) {
        if (t_[i_] != '"') return;  // not JSON: nlohmann has said so already
        const JsonPosition at = here();
        const std::string member = pointer + "/" + escape(string());
        if (auto [it, fresh] = seen.emplace(member, at); !fresh) map_.duplicates.push_back({member, it->second, at});
        skip();
        if (!more() || t_[i_] != ':') return;
        advance();
        skip();
        value(member);
        map_.at[member] = seen[member];  // the member's position is its (first) key's
        skip();
        if (more() && t_[i_] == ',') advance();
      }
      if (more()) advance();
    } else if (c == '[') {
      advance();
      std::size_t n = 0;
      for (skip(); more() && t_[i_] != ']'; skip()) {
        value(pointer + "/" + std::to_string(n++));
        skip();
        if (more() && t_[i_] == ',') advance();
      }
      if (more()) advance();
    } else if (c == '"') {
      string();
    } else {
      while (more() && std::string_view(",]} \t\r\n/").find(t_[i_]) == std::string_view::npos) advance();
    }
  }

  static constexpr int kMaxDepth = 256;
  const std::string& t_;
  std::size_t i_ = 0, line_ = 1, line_start_ = 0;
  int depth_ = 0;
  JsonSourceMap map_;
};

}  // namespace

JsonSourceMap map_json_source(const std::string& text) { return SourceMapper(text).run(); }

JsonPosition JsonSourceMap::find(std::string pointer) const {
  for (;;) {
    if (auto it = at.find(pointer); it != at.end()) return it->second;
    if (pointer.empty()) return {};
    pointer.erase(pointer.rfind('/'));
  }
}

std::string field_pointer(const std::string& field) {
  if (field.empty() || field.front() == '(') return "";  // "(top level)"
  std::string out = "/";
  for (char c : field) {
    if (c == '.' || c == '[')
      out.push_back('/');
    else if (c != ']')
      out.push_back(c);
  }
  return out;
}

json read_jsonc_file(const fs::path& file, std::string* raw_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw PresetError("policy " + file.string() + ": cannot be read (does the file exist?)");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  json doc;
  try {
    doc = json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and points at the character that stopped the parser.
    JsonPosition at{1, 1};
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n')
        at = {at.line + 1, 1};
      else
        ++at.column;
    }
    throw PresetError("policy " + file.string() + ": not valid JSON: " + e.what(), "", at);
  }
  const JsonSourceMap map = map_json_source(text);
  if (!map.duplicates.empty()) {
    const auto& d = map.duplicates.front();
    throw PresetError("policy " + file.string() + ":" + d.again.text() + ": " + d.pointer +
                          " is given twice (first at line " + d.first.text() +
                          "); only the last one would count, so remove one",
                      d.pointer, d.again);
  }
  if (raw_bytes) *raw_bytes = std::move(text);
  return doc;
}

}  // namespace supervisor
