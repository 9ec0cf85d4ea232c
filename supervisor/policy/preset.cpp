#include "policy/preset.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "preset_names.hpp"
#include "protocol/tools.hpp"

namespace supervisor {
namespace fs = std::filesystem;

const std::vector<std::string>& default_later_execution() {
  static const std::vector<std::string> v = {
      // git: repositories anywhere (their config runs fsmonitor, hooks, filters), submodule URLs,
      // hook managers, pre-commit's hook list.
      "**/.git", ".gitmodules", "**/.husky", ".githooks", ".pre-commit-config.yaml",
      // CI: runs with the repository's secrets on the next push.
      ".github/workflows", ".github/actions", ".gitlab-ci.yml",
      // Run on `cd` (direnv) or by the next agent or editor opened in that directory.
      "**/.envrc", "**/.mcp.json", "**/.claude", "**/.cursor", "**/.codex", "**/.gemini", "**/.vscode", "**/.idea",
      "**/.devcontainer",
      // Package managers: node-options / yarnPath run code on the next install or script.
      "**/.npmrc", "**/.yarnrc.yml"};
  return v;
}
using nlohmann::json;

const char* to_string(Decision d) noexcept {
  switch (d) {
    case Decision::allow:
      return "allow";
    case Decision::ask:
      return "ask";
    case Decision::deny:
      return "deny";
  }
  return "deny";
}

const char* to_string(WorkspaceMode m) noexcept {
  switch (m) {
    case WorkspaceMode::read:
      return "read";
    case WorkspaceMode::write_locked:
      return "write_locked";
    case WorkspaceMode::worktree:
      return "worktree";
  }
  return "read";
}

std::optional<WorkspaceMode> parse_workspace_mode(std::string_view text) noexcept {
  for (WorkspaceMode m : {WorkspaceMode::read, WorkspaceMode::write_locked, WorkspaceMode::worktree})
    if (text == to_string(m)) return m;
  return std::nullopt;
}

namespace {

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw PresetError("policy " + file_ + ": " + field + " " + what, field_pointer(field));
  }
  void only_keys(const json& obj, const std::string& where, std::initializer_list<const char*> keys) const {
    for (const auto& [k, v] : obj.items()) {
      if (std::none_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; })) {
        std::string list;
        for (const char* x : keys) list += std::string(list.empty() ? "" : ", ") + x;
        fail(where.empty() ? k : where + "." + k, "is not a known field (expected one of: " + list + ")");
      }
    }
  }
  const json& object(const json& obj, const char* key, const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_object()) fail(where + key, "must be an object");
    return *it;
  }
  std::vector<std::string> strings(const json& obj, const char* key, const std::string& where,
                                   bool required = true) const {
    std::vector<std::string> out;
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) fail(where + key, "is missing");
      return out;
    }
    if (!it->is_array()) fail(where + key, "must be an array of strings");
    for (const auto& v : *it) {
      if (!v.is_string()) fail(where + key, "must be an array of strings");
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  std::uint64_t number(const json& obj, const char* key, const std::string& where, std::uint64_t fallback,
                       bool required) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) fail(where + key, "is missing");
      return fallback;
    }
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0))
      fail(where + key, "must be a non-negative integer");
    return it->get<std::uint64_t>();
  }
  // A "..._seconds" field, in milliseconds; refused (not wrapped) when that overflows a signed clock.
  std::uint64_t seconds_ms(const json& obj, const char* key, const std::string& where, std::uint64_t fallback_ms,
                           bool required) const {
    std::uint64_t s = number(obj, key, where, fallback_ms / 1000, required);
    if (s > static_cast<std::uint64_t>(INT64_MAX) / 1000) fail(where + key, "is too large");
    return s * 1000;
  }
  std::string string(const json& obj, const char* key, const std::string& where) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) fail(where + key, "must be a string");
    return it->get<std::string>();
  }

 private:
  std::string file_;
};

Decision decision_from(const Reader& r, const json& v, const std::string& where) {
  if (v == "allow") return Decision::allow;
  if (v == "ask") return Decision::ask;
  if (v == "deny") return Decision::deny;
  r.fail(where, "must be \"allow\", \"ask\" or \"deny\"");
}

bool starts_with_word(const std::string& command, const std::string& prefix) {
  if (command.compare(0, prefix.size(), prefix) != 0) return false;
  return command.size() == prefix.size() || command[prefix.size()] == ' ';
}

// Lexically normalised, workspace-relative path ("a/b/../c" -> "a/c"); empty when it escapes.
std::string normal_relative(const std::string& p) {
  fs::path n = fs::path(p).lexically_normal();
  if (n.is_absolute()) return n.string();
  std::string s = n.string();
  if (s == ".." || s.rfind("../", 0) == 0) return {};
  return s;
}

bool rule_matches(const ToolRule& rule, const json& args) {
  for (const auto& [kind, values] : rule.when.items()) {
    if (kind == "command_prefix") {
      auto it = args.find("command");
      if (it == args.end() || !it->is_string()) return false;
      std::string cmd = it->get<std::string>();
      cmd.erase(0, cmd.find_first_not_of(" \t"));
      // A command that chains or substitutes more commands never matches a prefix rule.
      if (cmd.find_first_of(";&|`$<>\n(){}") != std::string::npos) return false;
      bool any = false;
      for (const auto& v : values) any = any || starts_with_word(cmd, v.get<std::string>());
      if (!any) return false;
    } else if (kind == "path_under") {
      auto it = args.find("path");
      if (it == args.end() || !it->is_string()) return false;
      std::string path = normal_relative(it->get<std::string>());
      if (path.empty()) return rule.decision == Decision::deny;  // escapes the workspace: only a deny matches
      bool any = false;
      for (const auto& v : values) {
        std::string root = fs::path(v.get<std::string>()).lexically_normal().string();
        any = any || path == root || path.rfind(root + "/", 0) == 0;
      }
      if (!any) return false;
    }
  }
  return true;
}

}  // namespace

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

Preset parse_preset(const json& doc, const fs::path& source, const std::string& digest) {
  const std::string file = source.filename().string();
  Reader r(file);
  if (!doc.is_object()) r.fail("(top level)", "must be a JSON object");
  r.only_keys(doc, "",
              {"schema", "preset", "description", "unattended", "workspace_mode", "tools", "blocked", "web", "writes",
               "budgets", "sandbox"});
  if (r.number(doc, "schema", "", 1, true) != 1) r.fail("schema", "must be 1 (the only version this build reads)");

  Preset p;
  p.source = source;
  p.digest = digest;
  p.raw = doc;
  p.name = r.string(doc, "preset", "");
  p.description = r.string(doc, "description", "");
  if (doc.contains("unattended")) {
    if (!doc["unattended"].is_boolean()) r.fail("unattended", "must be true or false");
    p.unattended = doc["unattended"].get<bool>();
  }

  if (doc.contains("workspace_mode")) {
    const auto mode = parse_workspace_mode(r.string(doc, "workspace_mode", ""));
    if (!mode)
      r.fail("workspace_mode", "must be \"read\", \"write_locked\" or \"worktree\"");
    else
      p.workspace_mode = *mode;
  }

  const json& tools = r.object(doc, "tools", "");
  r.only_keys(tools, "tools", {"allow", "ask", "deny", "rules"});
  p.allow = r.strings(tools, "allow", "tools.");
  p.ask = r.strings(tools, "ask", "tools.", false);
  p.deny = r.strings(tools, "deny", "tools.", false);
  p.blocked = r.strings(doc, "blocked", "");
  std::set<std::string> seen;
  for (const auto* list : {&p.allow, &p.ask, &p.deny}) {
    const char* field = list == &p.allow ? "tools.allow" : list == &p.ask ? "tools.ask" : "tools.deny";
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string& t = (*list)[i];
      // One catalogue (protocol/tools.json) says which tools exist: a name outside it would be
      // offered to no model, or silently dropped. Parent-only capabilities may still be denied.
      const bool parent_only = std::find(p.blocked.begin(), p.blocked.end(), t) != p.blocked.end();
      if (!seen.insert(t).second) r.fail("tools", "lists '" + t + "' more than once");
      if (parent_only && list != &p.deny)
        r.fail("tools", "grants '" + t + "', which is a parent-only capability listed in \"blocked\"");
      if (!protocol::find_tool(t) && !parent_only)
        r.fail(std::string(field) + "[" + std::to_string(i) + "]",
               "names '" + t + "', which is not a tool in the catalogue (protocol/tools.json); the tools are: " +
                   protocol::tool_names_text());
    }
  }
  if (auto it = tools.find("rules"); it != tools.end()) {
    if (!it->is_array()) r.fail("tools.rules", "must be an array");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& rule = (*it)[i];
      const std::string where = "tools.rules[" + std::to_string(i) + "]";
      if (!rule.is_object()) r.fail(where, "must be an object");
      r.only_keys(rule, where, {"tool", "when", "decision", "comment"});
      ToolRule tr;
      tr.tool = r.string(rule, "tool", where + ".");
      tr.when = r.object(rule, "when", where + ".");
      for (const auto& [k, v] : tr.when.items()) {
        if (k != "command_prefix" && k != "path_under")
          r.fail(where + ".when." + k, "is not a known matcher (command_prefix, path_under)");
        if (!v.is_array() || std::any_of(v.begin(), v.end(), [](const json& x) { return !x.is_string(); }))
          r.fail(where + ".when." + k, "must be an array of strings");
      }
      if (!rule.contains("decision")) r.fail(where + ".decision", "is missing");
      tr.decision = decision_from(r, rule["decision"], where + ".decision");
      if (!seen.count(tr.tool))
        r.fail(where + ".tool", "names '" + tr.tool + "', which tools.allow/ask/deny does not list");
      if (std::find(p.deny.begin(), p.deny.end(), tr.tool) != p.deny.end() && tr.decision != Decision::deny)
        r.fail(where, "would widen '" + tr.tool + "', which tools.deny denies");
      p.rules.push_back(std::move(tr));
    }
  }

  if (doc.contains("web")) {
    const json& w = r.object(doc, "web", "");
    r.only_keys(w, "web", {"allow_domains", "deny_domains", "max_fetch_bytes", "fetch_timeout_seconds"});
    p.web.allow_domains = r.strings(w, "allow_domains", "web.", false);
    p.web.deny_domains = r.strings(w, "deny_domains", "web.", false);
    p.web.max_fetch_bytes = r.number(w, "max_fetch_bytes", "web.", p.web.max_fetch_bytes, false);
    p.web.fetch_timeout_ms = r.seconds_ms(w, "fetch_timeout_seconds", "web.", p.web.fetch_timeout_ms, false);
  }

  p.writes.later_execution = default_later_execution();
  if (doc.contains("writes")) {
    const json& w = r.object(doc, "writes", "");
    r.only_keys(w, "writes", {"later_execution", "max_patch_bytes", "max_patch_files", "max_disk_bytes"});
    if (w.contains("later_execution")) {
      p.writes.later_execution = r.strings(w, "later_execution", "writes.", false);
      for (const auto& e : p.writes.later_execution) {
        const std::string rest = e.rfind("**/", 0) == 0 ? e.substr(3) : e;
        const fs::path rp(rest);
        bool bad = rest.empty() || rp.is_absolute() || (e.rfind("**/", 0) == 0 && rest.find('/') != std::string::npos);
        for (const auto& part : rp)
          if (part == ".." || part == ".") bad = true;
        if (bad)
          r.fail("writes.later_execution",
                 "entry '" + e +
                     "' must be a relative path without '.' or '..', or \"**/NAME\" for one name at any depth");
      }
    }
    p.writes.max_patch_bytes = r.number(w, "max_patch_bytes", "writes.", p.writes.max_patch_bytes, false);
    p.writes.max_patch_files = r.number(w, "max_patch_files", "writes.", p.writes.max_patch_files, false);
    if (p.writes.max_patch_bytes == 0) r.fail("writes.max_patch_bytes", "must be positive");
    if (p.writes.max_patch_files == 0) r.fail("writes.max_patch_files", "must be positive");
    p.writes.max_disk_bytes = r.number(w, "max_disk_bytes", "writes.", p.writes.max_disk_bytes, false);
    if (p.writes.max_disk_bytes == 0) r.fail("writes.max_disk_bytes", "must be positive");
  }

  const json& b = r.object(doc, "budgets", "");
  r.only_keys(b, "budgets",
              {"max_steps", "max_tool_calls", "max_tokens", "max_thinking_tokens", "timeout_seconds", "summary_bytes",
               "answer_bytes", "tool_result_bytes", "wrap_up_grace_seconds"});
  Budgets d;
  p.budgets.max_steps = r.number(b, "max_steps", "budgets.", d.max_steps, true);
  p.budgets.max_tool_calls = r.number(b, "max_tool_calls", "budgets.", d.max_tool_calls, true);
  p.budgets.max_tokens = r.number(b, "max_tokens", "budgets.", d.max_tokens, true);
  p.budgets.max_thinking_tokens = r.number(b, "max_thinking_tokens", "budgets.", d.max_thinking_tokens, false);
  p.budgets.timeout_ms = r.seconds_ms(b, "timeout_seconds", "budgets.", d.timeout_ms, true);
  p.budgets.summary_bytes = r.number(b, "summary_bytes", "budgets.", d.summary_bytes, false);
  p.budgets.answer_bytes = r.number(b, "answer_bytes", "budgets.", d.answer_bytes, false);
  p.budgets.tool_result_bytes = r.number(b, "tool_result_bytes", "budgets.", d.tool_result_bytes, false);
  p.budgets.wrap_up_grace_ms = r.seconds_ms(b, "wrap_up_grace_seconds", "budgets.", d.wrap_up_grace_ms, false);

  try {
    p.sandbox = sandbox::parse_policy(r.object(doc, "sandbox", ""), file);
  } catch (const sandbox::PolicyError& e) {
    throw PresetError(e.what(), field_pointer(e.field()));
  }
  return p;
}

std::vector<std::string> list_presets(const fs::path& policy_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(policy_dir, ec)) {
    if (e.path().extension() == ".json" && e.path().stem() != "schema") out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool names_a_file(const std::string& name_or_path) {
  return name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
}

void check_preset_name(const std::string& name) {
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
    throw PresetError("preset '" + name + "' is not a valid preset name");
}

[[noreturn]] void throw_unknown_preset(const std::string& name, const fs::path& policy_dir,
                                       const std::vector<std::string>& known) {
  std::string list;
  for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
  throw PresetError("unknown preset '" + name + "' (known in " + policy_dir.string() + ": " + list + ")");
}

Preset load_preset_undigested(const std::string& name_or_path, const fs::path& policy_dir, std::string* raw) {
  fs::path file;
  if (names_a_file(name_or_path)) {
    file = name_or_path;
  } else {
    check_preset_name(name_or_path);
    file = policy_dir / (name_or_path + ".json");
    std::error_code ec;
    if (!fs::exists(file, ec)) throw_unknown_preset(name_or_path, policy_dir, list_presets(policy_dir));
  }
  json doc = read_jsonc_file(file, raw);
  Preset p = parse_preset(doc, file, std::string());
  if (file.stem() != p.name && name_or_path.find('/') == std::string::npos)
    throw PresetError("policy " + file.filename().string() + ": preset is '" + p.name + "', but the file name says '" +
                          file.stem().string() + "'",
                      "/preset");
  return p;
}

protocol::Limits child_limits(const Budgets& b) {
  protocol::Limits l;
  l.max_steps = b.max_steps;
  l.max_tool_calls = b.max_tool_calls;
  l.max_tokens = b.max_tokens;
  l.timeout_ms = b.timeout_ms;
  l.summary_bytes = b.summary_bytes;
  l.answer_bytes = b.answer_bytes;
  l.tool_result_bytes = b.tool_result_bytes;
  l.max_thinking_tokens = b.max_thinking_tokens;
  l.wrap_up_grace_ms = b.wrap_up_grace_ms;
  return l;
}

std::vector<std::string> offered_tools(const Preset& p) {
  std::vector<std::string> out = p.allow;
  out.insert(out.end(), p.ask.begin(), p.ask.end());
  for (const auto& r : p.rules) {
    if (r.decision != Decision::deny && std::find(out.begin(), out.end(), r.tool) == out.end()) out.push_back(r.tool);
  }
  return out;
}

Decision widest_decision(const Preset& p, const std::string& tool) {
  auto in = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), tool) != v.end(); };
  if (in(p.blocked) || in(p.deny)) return Decision::deny;
  Decision best = in(p.allow) ? Decision::allow : in(p.ask) ? Decision::ask : Decision::deny;
  for (const auto& r : p.rules)
    if (r.tool == tool && (r.decision == Decision::allow || (r.decision == Decision::ask && best == Decision::deny)))
      best = r.decision;
  return best;
}

Decision decide(const Preset& p, const std::string& tool, const json& args, std::string& why, std::string* rule) {
  auto named = [&](std::string r) {
    if (rule) *rule = std::move(r);
  };
  auto in = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), tool) != v.end(); };
  if (in(p.blocked)) {
    why = "'" + tool + "' is a parent-only capability (policy " + p.name + ": blocked)";
    named("blocked");
    return Decision::deny;
  }
  if (in(p.deny)) {
    why = "policy " + p.name + ": tools.deny lists '" + tool + "'";
    named("tools.deny");
    return Decision::deny;
  }
  // Rules run in file order; a deny rule always wins over an allow/ask rule that also matches.
  std::optional<Decision> ruled;
  for (std::size_t i = 0; i < p.rules.size(); ++i) {
    const ToolRule& r = p.rules[i];
    if (r.tool != tool || !rule_matches(r, args)) continue;
    if (!ruled || r.decision == Decision::deny || (r.decision == Decision::ask && *ruled == Decision::allow)) {
      ruled = r.decision;
      why = "policy " + p.name + ": tools.rules[" + std::to_string(i) + "] (" + r.when.dump() + ") says " +
            to_string(r.decision);
      named("tools.rules[" + std::to_string(i) + "] " + r.when.dump());
    }
  }
  if (ruled) return *ruled;
  if (in(p.allow)) {
    why = "policy " + p.name + ": tools.allow lists '" + tool + "'";
    named("tools.allow");
    return Decision::allow;
  }
  if (in(p.ask)) {
    why = "policy " + p.name + ": tools.ask lists '" + tool + "'";
    named("tools.ask");
    return Decision::ask;
  }
  why = "policy " + p.name + " does not list tool '" + tool + "'";
  named("not offered");
  return Decision::deny;
}

}  // namespace supervisor
