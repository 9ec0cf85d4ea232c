#include "plain_lines.hpp"

#include <array>
#include <cstdint>

#include "protocol/framing.hpp"

namespace protocol::detail {
namespace {

// One member of an object, as it was written.
struct Member {
  enum class Kind { string, number, boolean, null, object };
  std::string_view key;
  Kind kind = Kind::string;
  std::string_view text;  // a string's bytes (no quotes), a number's digits, an object's whole text
  bool flag = false;      // a boolean's value
};

// Reads one object of at most kMaxMembers members whose values are plain strings, unsigned integers,
// booleans, null or objects (a line's top level, or a tool request's arguments). Every step either
// advances or declines (returns false); it never guesses, so a declined line costs only the scan.
template <std::size_t kMaxMembers>
class PlainScanner {
 public:
  explicit PlainScanner(std::string_view line) : p_(line.data()), end_(line.data() + line.size()) {}

  bool scan() {
    skip_space();
    if (!take('{')) return false;
    skip_space();
    if (at('}')) return false;  // an empty object has no type: the tree codec says so
    for (;;) {
      if (count_ == kMaxMembers) return false;
      Member& m = members_[count_];
      skip_space();
      if (!plain_string(m.key)) return false;
      for (std::size_t i = 0; i < count_; ++i)
        if (members_[i].key == m.key) return false;  // a repeated key: the tree codec decides which wins
      skip_space();
      if (!take(':')) return false;
      skip_space();
      if (!value(m)) return false;
      ++count_;
      skip_space();
      if (take(',')) continue;
      if (take('}')) break;
      return false;
    }
    skip_space();
    return p_ == end_;
  }

  const Member& at(std::size_t i) const { return members_[i]; }
  const Member* find(std::string_view key) const {
    for (std::size_t i = 0; i < count_; ++i)
      if (members_[i].key == key) return &members_[i];
    return nullptr;
  }
  std::size_t count() const { return count_; }

 private:
  bool at(char c) const { return p_ != end_ && *p_ == c; }
  bool take(char c) {
    if (!at(c)) return false;
    ++p_;
    return true;
  }
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }

  // A string of printable ASCII without escapes; anything else (an escape, a control character,
  // a byte past 0x7f) declines, and the tree codec's own string rules apply.
  bool plain_string(std::string_view& out) {
    if (!take('"')) return false;
    const char* start = p_;
    for (; p_ != end_; ++p_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out = std::string_view(start, static_cast<std::size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
    }
    return false;
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }

  // Digits only, no leading zero, at most 19 of them (so the value fits in 64 bits); a sign, a
  // fraction or an exponent declines.
  bool digits(std::string_view& out) {
    const char* start = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    const auto n = static_cast<std::size_t>(p_ - start);
    if (n == 0 || n > 19 || (n > 1 && *start == '0')) return false;
    if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    out = std::string_view(start, n);
    return true;
  }

  // The extent of an object, from its '{' to the matching '}': brackets inside strings do not
  // count. Its contents are checked later, by the JSON parser.
  bool object_text(std::string_view& out) {
    const char* start = p_;
    std::size_t depth = 0;
    bool in_string = false, escaped = false;
    for (; p_ != end_; ++p_) {
      const char c = *p_;
      if (in_string) {
        if (escaped)
          escaped = false;
        else if (c == '\\')
          escaped = true;
        else if (c == '"')
          in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        ++p_;
        out = std::string_view(start, static_cast<std::size_t>(p_ - start));
        return c == '}';
      }
    }
    return false;
  }

  bool value(Member& m) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"':
        m.kind = Member::Kind::string;
        return plain_string(m.text);
      case '{':
        m.kind = Member::Kind::object;
        return object_text(m.text);
      case 't':
        m.kind = Member::Kind::boolean;
        m.flag = true;
        return literal("true");
      case 'f':
        m.kind = Member::Kind::boolean;
        m.flag = false;
        return literal("false");
      case 'n':
        m.kind = Member::Kind::null;
        return literal("null");
      default:
        m.kind = Member::Kind::number;
        return digits(m.text);
    }
  }

  const char* p_;
  const char* end_;
  std::array<Member, kMaxMembers> members_{};
  std::size_t count_ = 0;
};

using LineScanner = PlainScanner<6>;

std::uint64_t to_u64(std::string_view digits) {
  std::uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  return v;
}

// A tool request's arguments: built directly when they are a flat object of plain values (what a
// model's call to grep or read_file gives), else parsed by the JSON parser. Both give the same tree:
// strings as they are, digits as an unsigned number, true, false and null.
json plain_args(std::string_view text) {
  PlainScanner<16> s(text);
  bool flat = s.scan();
  for (std::size_t i = 0; flat && i < s.count(); ++i) flat = s.at(i).kind != Member::Kind::object;
  if (!flat) return json::parse(text, nullptr, /*allow_exceptions=*/false);
  json out(json::value_t::object);
  auto& members = out.get_ref<json::object_t&>();
  for (std::size_t i = 0; i < s.count(); ++i) {
    const Member& m = s.at(i);
    json value;
    switch (m.kind) {
      case Member::Kind::string:
        value = std::string(m.text);
        break;
      case Member::Kind::number:
        value = to_u64(m.text);
        break;
      case Member::Kind::boolean:
        value = m.flag;
        break;
      case Member::Kind::null:
      case Member::Kind::object:
        break;
    }
    members.emplace(std::string(m.key), std::move(value));
  }
  return out;
}

// The members a message of this type may hold; any other member declines the line (the tree codec
// ignores unknown fields, so those lines still decode, just not here).
bool only_members(const LineScanner& s, std::initializer_list<std::string_view> allowed) {
  std::size_t known = 0;
  for (std::string_view k : allowed)
    if (s.find(k)) ++known;
  return known == s.count();
}

const Member* of_kind(const LineScanner& s, std::string_view key, Member::Kind kind) {
  const Member* m = s.find(key);
  return m && m->kind == kind ? m : nullptr;
}

std::optional<ChildMessage> tool_request(const LineScanner& s) {
  if (!only_members(s, {"type", "id", "tool", "args"})) return std::nullopt;
  const Member* id = of_kind(s, "id", Member::Kind::string);
  const Member* tool = of_kind(s, "tool", Member::Kind::string);
  if (!id || !tool) return std::nullopt;
  ToolRequest r;
  if (const Member* args = s.find("args")) {
    if (args->kind != Member::Kind::object) return std::nullopt;
    r.args = plain_args(args->text);
    if (r.args.is_discarded() || !r.args.is_object()) return std::nullopt;
  }
  r.id = std::string(id->text);
  r.tool = std::string(tool->text);
  return ChildMessage{std::move(r)};
}

std::optional<ChildMessage> tool_done(const LineScanner& s) {
  if (!only_members(s, {"type", "id", "ok", "bytes", "error"})) return std::nullopt;
  const Member* id = of_kind(s, "id", Member::Kind::string);
  const Member* ok = of_kind(s, "ok", Member::Kind::boolean);
  if (!id || !ok) return std::nullopt;
  ToolDone d;
  if (const Member* bytes = s.find("bytes")) {
    if (bytes->kind != Member::Kind::number) return std::nullopt;
    d.bytes = to_u64(bytes->text);
  }
  if (const Member* error = s.find("error")) {
    if (error->kind != Member::Kind::string) return std::nullopt;
    d.error = std::string(error->text);
  }
  d.id = std::string(id->text);
  d.ok = ok->flag;
  return ChildMessage{std::move(d)};
}

// A string as nlohmann::json's dump writes it (ensure_ascii off): '"' and '\\' escaped, the control
// characters with their short escapes or as \u00xx in lower-case hex, every other byte as it is.
void append_quoted(std::string_view s, std::string& out) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t plain = 0;  // the start of the bytes not copied yet, none of which needs an escape
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) continue;
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += "\\u00";
        out.push_back(hex[(c >> 4) & 0xf]);
        out.push_back(hex[c & 0xf]);
    }
  }
  out.append(s.data() + plain, s.size() - plain);
  out.push_back('"');
}

}  // namespace

std::optional<ChildMessage> decode_plain_child_line(std::string_view line) {
  LineScanner s(line);
  if (!s.scan()) return std::nullopt;
  const Member* type = of_kind(s, "type", Member::Kind::string);
  if (!type) return std::nullopt;
  if (type->text == "tool_request") return tool_request(s);
  if (type->text == "tool_done") return tool_done(s);
  return std::nullopt;
}

bool encode_plain_decision(const ToolDecision& m, std::string& out) {
  if (!is_valid_utf8(m.id) || !is_valid_utf8(m.reason)) return false;
  // The keys in the order the tree codec's std::map gives them.
  out += "{\"decision\":";
  out += m.allow ? "\"allow\"" : "\"deny\"";
  out += ",\"id\":";
  append_quoted(m.id, out);
  out += ",\"reason\":";
  append_quoted(m.reason, out);
  out += ",\"type\":\"tool_decision\"}\n";
  return true;
}

}  // namespace protocol::detail
