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

}  // namespace

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

}  // namespace supervisor
