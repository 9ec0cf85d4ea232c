#include "policy/policy_lint.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/explain.hpp"
#include "sandbox/workspace_guard.hpp"
#include "policy/decide.hpp"
#include "policy/preset.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(Severity s) noexcept {
  switch (s) {
    case Severity::error:
      return "error";
    case Severity::warning:
      return "warning";
    case Severity::note:
      return "note";
    case Severity::skipped:
      return "skipped";
  }
  return "error";
}

namespace {

std::string type_of(const json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  return "null";
}

bool type_ok(const json& v, const std::string& t) {
  std::string actual = type_of(v);
  return actual == t || (t == "number" && actual == "integer");
}

void validate(const json& v, const json& schema, const json& root, const std::string& ptr,
              std::vector<std::string>& out) {
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    std::string r = ref->get<std::string>();
    const std::string prefix = "#/$defs/";
    if (r.rfind(prefix, 0) != 0 || !root.contains("$defs") || !root["$defs"].contains(r.substr(prefix.size()))) {
      out.push_back("schema: unresolvable $ref " + r);
      return;
    }
    validate(v, root["$defs"][r.substr(prefix.size())], root, ptr, out);
    return;
  }
  const std::string where = ptr.empty() ? "/" : ptr;
  if (auto t = schema.find("type"); t != schema.end()) {
    bool ok = false;
    if (t->is_string())
      ok = type_ok(v, *t);
    else
      for (const auto& x : *t) ok = ok || type_ok(v, x);
    if (!ok) {
      out.push_back(where + ": must be of type " + t->dump() + ", not " + type_of(v));
      return;
    }
  }
  if (auto e = schema.find("enum"); e != schema.end() && std::find(e->begin(), e->end(), v) == e->end())
    out.push_back(where + ": " + v.dump() + " is not one of " + e->dump());
  if (auto m = schema.find("minimum"); m != schema.end() && v.is_number() && v.get<double>() < m->get<double>())
    out.push_back(where + ": must be at least " + m->dump());
  if (v.is_object()) {
    for (const auto& req : schema.value("required", json::array()))
      if (!v.contains(req.get<std::string>()))
        out.push_back(where + ": missing required field \"" + req.get<std::string>() + "\"");
    const json props = schema.value("properties", json::object());
    for (const auto& [k, sub] : v.items()) {
      if (props.contains(k)) {
        validate(sub, props[k], root, ptr + "/" + k, out);
      } else if (auto ap = schema.find("additionalProperties"); ap != schema.end()) {
        if (ap->is_boolean() && !ap->get<bool>()) {
          std::string names;
          for (const auto& [name, unused] : props.items()) names += (names.empty() ? "" : ", ") + name;
          out.push_back(ptr + "/" + k + ": is not a known field (expected one of: " + names + ")");
        } else if (ap->is_object())
          validate(sub, *ap, root, ptr + "/" + k, out);
      }
    }
  }
  if (v.is_array()) {
    if (auto items = schema.find("items"); items != schema.end())
      for (std::size_t i = 0; i < v.size(); ++i) validate(v[i], *items, root, ptr + "/" + std::to_string(i), out);
  }
}

bool grants(const Preset& p, const std::string& tool) {
  auto in = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), tool) != v.end(); };
  if (in(p.allow) || in(p.ask)) return true;
  return std::any_of(p.rules.begin(), p.rules.end(),
                     [&](const ToolRule& r) { return r.tool == tool && r.decision != Decision::deny; });
}

// The seccomp groups against the rest of the preset: a group that widens what the filesystem rules
// promise, or write roots the filter makes useless.
template <typename Error, typename Warning>
void lint_syscall_groups(const Preset& p, bool writes, Error& error, Warning& warning) {
  const auto& groups = p.sandbox.syscall_groups;
  auto has = [&](const char* g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  if (!writes && has("filesystem_write"))
    error(
        "read-only preset (no tool that writes) allows the syscall group \"filesystem_write\" (chmod, utimensat, "
        "setxattr ... on any file the child can name); remove it from sandbox.syscalls.groups");
  // /dev/null is no write root in this sense: opening it read-write creates, renames and changes nothing.
  const bool real_write_roots = std::any_of(p.sandbox.write_paths.begin(), p.sandbox.write_paths.end(),
                                            [](const std::string& w) { return w != "/dev/null"; });
  if (real_write_roots && !has("filesystem_write"))
    warning(
        "sandbox.filesystem.write lists write roots but sandbox.syscalls.groups lacks \"filesystem_write\": "
        "the child can write open files but not create directories, rename, remove or chmod");
  if (has("watch"))
    warning(
        "sandbox.syscalls.groups allows \"watch\": inotify and fanotify report the names of files created in "
        "directories outside every root (Landlock does not mediate watches)");
}

Decision widest(const Preset& p, const std::string& tool) { return widest_decision(p, tool); }

int strength(Decision d) { return d == Decision::allow ? 2 : d == Decision::ask ? 1 : 0; }

// `path` is `root` or lies beneath it (both as written: templates compare as text).
bool covered_by(const std::string& path, const std::vector<std::string>& roots) {
  const fs::path p = fs::path(path).lexically_normal();
  return std::any_of(roots.begin(), roots.end(), [&](const std::string& r) {
    const fs::path root = fs::path(r).lexically_normal();
    if (p == root) return true;
    auto rel = p.lexically_relative(root);
    return !rel.empty() && *rel.begin() != ".." && *rel.begin() != ".";
  });
}

// `host` is `domain` or one of its subdomains.
bool under_domain(const std::string& host, const std::vector<std::string>& domains) {
  return std::any_of(domains.begin(), domains.end(), [&](const std::string& d) {
    return host == d || (host.size() > d.size() && host.ends_with("." + d));
  });
}

std::string index_pointer(const std::string& base, std::size_t i) { return base + "/" + std::to_string(i); }

}  // namespace

std::vector<std::string> validate_schema(const json& doc, const json& schema) {
  std::vector<std::string> out;
  validate(doc, schema, schema, "", out);
  return out;
}

std::vector<Finding> widening_against(const Preset& p, const Preset& shipped) {
  std::vector<Finding> out;
  const std::string theirs = " (shipped " + shipped.name + ": ";
  auto wider = [&](std::string pointer, std::string what) {
    out.push_back({Severity::warning, "wider than the shipped preset: " + what, std::move(pointer), {}});
  };

  // From narrowest to widest: a worktree's patch is reviewed before it reaches the workspace.
  auto width = [](WorkspaceMode m) { return m == WorkspaceMode::read ? 0 : m == WorkspaceMode::worktree ? 1 : 2; };
  if (width(p.workspace_mode) > width(shipped.workspace_mode))
    wider("/workspace_mode", std::string("workspace_mode is \"") + to_string(p.workspace_mode) + "\"" + theirs + "\"" +
                                 to_string(shipped.workspace_mode) + "\")");
  for (const auto& t : shipped.blocked)
    if (std::find(p.blocked.begin(), p.blocked.end(), t) == p.blocked.end())
      wider("/blocked", "blocked no longer lists the parent-only capability '" + t + "'");

  // Tools: the widest decision each can get, then the rules that narrow or widen it by argument.
  std::set<std::string> tools(p.allow.begin(), p.allow.end());
  tools.insert(p.ask.begin(), p.ask.end());
  for (const auto& r : p.rules) tools.insert(r.tool);
  for (const auto& t : tools) {
    const Decision mine = widest(p, t), ship = widest(shipped, t);
    if (strength(mine) > strength(ship))
      wider("/tools", "tool '" + t + "' can be \"" + to_string(mine) + "\"" + theirs + to_string(ship) + ")");
  }
  for (std::size_t i = 0; i < p.rules.size(); ++i) {
    const ToolRule& r = p.rules[i];
    // A rule that grants more than the shipped lists do for its tool must be one the shipped preset has.
    const Decision listed =
        std::find(shipped.allow.begin(), shipped.allow.end(), r.tool) != shipped.allow.end() ? Decision::allow
        : std::find(shipped.ask.begin(), shipped.ask.end(), r.tool) != shipped.ask.end()     ? Decision::ask
                                                                                             : Decision::deny;
    if (strength(r.decision) <= strength(listed) || strength(r.decision) > strength(widest(shipped, r.tool))) continue;
    for (const auto& [kind, values] : r.when.items()) {
      std::vector<std::string> theirs_values;
      for (const auto& sr : shipped.rules)
        if (sr.tool == r.tool && strength(sr.decision) >= strength(r.decision) && sr.when.contains(kind))
          for (const auto& v : sr.when[kind]) theirs_values.push_back(v.get<std::string>());
      for (std::size_t j = 0; j < values.size(); ++j) {
        const std::string s = values[j].get<std::string>();
        const bool known = kind == "path_under"
                               ? covered_by(s, theirs_values)
                               : std::find(theirs_values.begin(), theirs_values.end(), s) != theirs_values.end();
        if (!known)
          wider(index_pointer("/tools/rules/" + std::to_string(i) + "/when/" + kind, j),
                "tools.rules[" + std::to_string(i) + "] makes '" + r.tool + "' \"" + to_string(r.decision) + "\" for " +
                    kind + " '" + s + "', which the shipped preset's rules do not");
      }
    }
  }
  for (const auto& sr : shipped.rules) {
    if (sr.decision == Decision::allow) continue;
    const bool kept = std::any_of(p.rules.begin(), p.rules.end(), [&](const ToolRule& r) {
      return r.tool == sr.tool && r.when == sr.when && strength(r.decision) <= strength(sr.decision);
    });
    // Moot when the tool is denied outright here.
    if (!kept && strength(widest(p, sr.tool)) > strength(sr.decision))
      wider("/tools/rules", "the shipped rule making '" + sr.tool + "' \"" + to_string(sr.decision) + "\" when " +
                                sr.when.dump() + " is missing");
  }

  const auto& s = p.sandbox;
  const auto& t = shipped.sandbox;
  auto roots = [&](const std::vector<std::string>& mine, const std::vector<std::string>& ship, const char* key) {
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (!covered_by(mine[i], ship))
        wider(
            index_pointer(std::string("/sandbox/filesystem/") + key, i),
            "sandbox.filesystem." + std::string(key) + " grants '" + mine[i] + "', which the shipped preset does not");
  };
  roots(s.read_paths, t.read_paths, "read");
  roots(s.write_paths, t.write_paths, "write");
  roots(s.exec_paths, t.exec_paths, "execute");
  for (const auto& pr : t.protected_paths)
    if (std::find(s.protected_paths.begin(), s.protected_paths.end(), pr) == s.protected_paths.end())
      wider("/sandbox/filesystem/protected", "sandbox.filesystem.protected no longer keeps '" + pr + "' read-only");
  // The enum is ordered from narrowest to widest.
  if (s.network > t.network)
    wider("/sandbox/network", "sandbox.network is \"" + std::string(to_string(s.network)) + "\"" + theirs + "\"" +
                                  std::string(to_string(t.network)) + "\")");
  auto added = [&](const std::vector<std::string>& mine, const std::vector<std::string>& ship,
                   const std::string& pointer, const std::string& what) {
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (std::find(ship.begin(), ship.end(), mine[i]) == ship.end())
        wider(index_pointer(pointer, i), what + " '" + mine[i] + "'");
  };
  auto removed = [&](const std::vector<std::string>& mine, const std::vector<std::string>& ship,
                     const std::string& pointer, const std::string& what) {
    for (const auto& x : ship)
      if (std::find(mine.begin(), mine.end(), x) == mine.end()) wider(pointer, what + " '" + x + "'");
  };
  added(s.syscall_groups, t.syscall_groups, "/sandbox/syscalls/groups", "sandbox.syscalls.groups adds");
  added(s.extra_allowed_syscalls, t.extra_allowed_syscalls, "/sandbox/syscalls/allow", "sandbox.syscalls.allow adds");
  removed(s.extra_denied_syscalls, t.extra_denied_syscalls, "/sandbox/syscalls/deny",
          "sandbox.syscalls.deny no longer refuses");
  removed(s.namespaces, t.namespaces, "/sandbox/namespaces", "sandbox.namespaces drops");
  removed(sandbox::layer_names(s.required), sandbox::layer_names(t.required), "/sandbox/required",
          "sandbox.required no longer requires");
  added(s.env_allow, t.env_allow, "/sandbox/environment/allow", "sandbox.environment.allow copies");
  for (const auto& [k, v] : s.env_set) {
    auto it = t.env_set.find(k);
    if (it == t.env_set.end() || it->second != v)
      wider("/sandbox/environment/set/" + k,
            "sandbox.environment.set sets " + k + "=" + v +
                (it == t.env_set.end() ? " (shipped: not set)" : theirs + it->second + ")"));
  }

  // Limits: 0 is "not limited" except for file size and core size, where 0 is the tightest.
  auto limit = [&](const std::string& field, std::uint64_t mine, std::uint64_t ship, bool zero_unlimited) {
    const bool looser = zero_unlimited ? (ship != 0 && (mine == 0 || mine > ship)) : mine > ship;
    if (!looser) return;
    std::string pointer = "/" + field;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    wider(pointer, field + " is " + (zero_unlimited && mine == 0 ? std::string("unlimited") : std::to_string(mine)) +
                       theirs + std::to_string(ship) + ")");
  };
  limit("sandbox.rlimits.address_space_mb", s.rlimits.address_space_mb, t.rlimits.address_space_mb, true);
  limit("sandbox.rlimits.cpu_seconds", s.rlimits.cpu_seconds, t.rlimits.cpu_seconds, true);
  limit("sandbox.rlimits.open_files", s.rlimits.open_files, t.rlimits.open_files, true);
  limit("sandbox.rlimits.processes", s.rlimits.processes, t.rlimits.processes, true);
  limit("sandbox.rlimits.file_size_mb", s.rlimits.file_size_mb, t.rlimits.file_size_mb, false);
  limit("sandbox.rlimits.core_mb", s.rlimits.core_mb, t.rlimits.core_mb, false);
  limit("sandbox.tree_limits.memory_mb", s.tree_limits.memory_mb, t.tree_limits.memory_mb, true);
  limit("sandbox.tree_limits.cpu_percent", s.tree_limits.cpu_percent, t.tree_limits.cpu_percent, true);
  const auto& b = p.budgets;
  const auto& c = shipped.budgets;
  limit("budgets.max_steps", b.max_steps, c.max_steps, false);
  limit("budgets.max_tool_calls", b.max_tool_calls, c.max_tool_calls, false);
  limit("budgets.max_tokens", b.max_tokens, c.max_tokens, false);
  limit("budgets.max_thinking_tokens", b.max_thinking_tokens, c.max_thinking_tokens, false);
  limit("budgets.timeout_seconds", b.timeout_ms / 1000, c.timeout_ms / 1000, false);
  limit("budgets.summary_bytes", b.summary_bytes, c.summary_bytes, false);
  limit("budgets.answer_bytes", b.answer_bytes, c.answer_bytes, false);
  limit("budgets.tool_result_bytes", b.tool_result_bytes, c.tool_result_bytes, false);

  // Web: only where the preset can fetch at all.
  if (strength(widest(p, "web_fetch")) > 0 || strength(widest(p, "web_search")) > 0) {
    if (p.web.allow_domains.empty() && !shipped.web.allow_domains.empty())
      wider("/web/allow_domains", "web.allow_domains is empty: every public host not denied may be fetched");
    for (std::size_t i = 0; i < p.web.allow_domains.size(); ++i)
      if (!shipped.web.allow_domains.empty() && !under_domain(p.web.allow_domains[i], shipped.web.allow_domains))
        wider(index_pointer("/web/allow_domains", i), "web.allow_domains adds '" + p.web.allow_domains[i] + "'");
    removed(p.web.deny_domains, shipped.web.deny_domains, "/web/deny_domains", "web.deny_domains no longer refuses");
    limit("web.max_fetch_bytes", p.web.max_fetch_bytes, shipped.web.max_fetch_bytes, false);
    limit("web.fetch_timeout_seconds", p.web.fetch_timeout_ms / 1000, shipped.web.fetch_timeout_ms / 1000, false);
  }
  if (p.workspace_mode != WorkspaceMode::read) {
    removed(p.writes.later_execution, shipped.writes.later_execution, "/writes/later_execution",
            "writes.later_execution no longer guards");
    limit("writes.max_patch_bytes", p.writes.max_patch_bytes, shipped.writes.max_patch_bytes, false);
    limit("writes.max_patch_files", p.writes.max_patch_files, shipped.writes.max_patch_files, false);
    limit("writes.max_disk_bytes", p.writes.max_disk_bytes, shipped.writes.max_disk_bytes, false);
  }
  return out;
}

std::vector<Finding> lint_policy_file(const fs::path& file, const fs::path& schema_file, const fs::path& shipped_dir) {
  std::vector<Finding> out;
  auto error = [&](std::string m, std::string pointer = "") {
    out.push_back({Severity::error, std::move(m), std::move(pointer), {}});
  };
  auto warning = [&](std::string m, std::string pointer = "") {
    out.push_back({Severity::warning, std::move(m), std::move(pointer), {}});
  };
  auto note = [&](std::string m, std::string pointer = "") {
    out.push_back({Severity::note, std::move(m), std::move(pointer), {}});
  };
  // Messages from the parsers start "policy FILE: "; check prints the file itself.
  auto bare = [](std::string m) {
    if (m.rfind("policy ", 0) == 0)
      if (auto colon = m.find(": "); colon != std::string::npos) m.erase(0, colon + 2);
    return m;
  };

  std::string raw;
  {
    std::ifstream in(file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    raw = ss.str();
  }
  const JsonSourceMap map = map_json_source(raw);
  auto located = [&]() {
    for (auto& f : out)
      if (f.at.line == 0 && !f.pointer.empty()) f.at = map.find(f.pointer);
    return out;
  };
  json doc;
  try {
    doc = read_jsonc_file(file);
  } catch (const PresetError& e) {
    if (map.duplicates.empty()) {
      out.push_back({Severity::error, bare(e.what()), e.pointer(), e.at()});
      return out;
    }
    for (const auto& d : map.duplicates)  // every one, where read_jsonc_file names the first
      out.push_back({Severity::error,
                     d.pointer + " is given twice (first at line " + d.first.text() +
                         "); only the last one would count, so remove one",
                     d.pointer, d.again});
    return out;
  }
  if (doc.is_object() && doc.contains("$schema")) {
    out.push_back({Severity::skipped,
                   "a JSON Schema (it has \"$schema\"), not a preset; presets are validated against it",
                   "",
                   {}});
    return out;
  }

  Preset p;
  std::string parse_error_at = "-";  // no parse error
  try {
    p = parse_preset(doc, file, "");
  } catch (const PresetError& e) {
    error(bare(e.what()), e.pointer());
    parse_error_at = e.pointer();
  }
  try {
    json schema = read_jsonc_file(schema_file);
    for (auto& m : validate_schema(doc, schema)) {
      std::string pointer = m.substr(0, m.find(": "));
      if (pointer == "/") pointer.clear();
      // The parser has said it already, with the valid names.
      if (pointer != parse_error_at) error("schema: " + m, pointer);
    }
  } catch (const PresetError& e) {
    error(std::string("cannot validate: the schema ") + e.what());
  }
  if (parse_error_at != "-") return located();

  if (file.stem() != p.name)
    error("preset is '" + p.name + "', but the file name says '" + file.stem().string() + "': `run --preset " +
              file.stem().string() + "` refuses it; rename one of them",
          "/preset");

  const bool writes = grants(p, "write_file") || grants(p, "edit_file") || grants(p, "run_command");
  // /dev/null as a write root grants nothing (what is written there is discarded); git opens it
  // read-write even for its read-only views.
  std::vector<std::string> real_writes;
  for (const auto& w : p.sandbox.write_paths)
    if (w != "/dev/null") real_writes.push_back(w);
  if (!writes && !real_writes.empty())
    error("read-only preset (no tool that writes) has write roots: " + real_writes.front() +
              (real_writes.size() > 1 ? " ..." : "") + "; remove sandbox.filesystem.write",
          "/sandbox/filesystem/write");
  lint_syscall_groups(p, writes, error, warning);
  const bool writes_workspace =
      std::any_of(p.sandbox.write_paths.begin(), p.sandbox.write_paths.end(),
                  [](const std::string& w) { return w.find("${workspace}") != std::string::npos; });
  if (p.workspace_mode == WorkspaceMode::read && writes_workspace)
    error(
        "workspace_mode is \"read\" but ${workspace} is a write root; use \"write_locked\" (one writer at a time) or "
        "\"worktree\"",
        "/workspace_mode");
  if (p.workspace_mode != WorkspaceMode::read && !writes_workspace)
    warning(std::string("workspace_mode is \"") + to_string(p.workspace_mode) +
                "\" but ${workspace} is not a write root: the child cannot write its workspace",
            "/workspace_mode");
  if (p.unattended) {
    for (const auto& t : p.ask)
      warning("tool '" + t + "' is \"ask\" in a preset that runs unattended: with no approver it is denied at once",
              "/tools/ask");
    for (const auto& r : p.rules)
      if (r.decision == Decision::ask)
        warning("a rule for '" + r.tool +
                    "' says \"ask\" in a preset that runs unattended: with no approver it is denied at once",
                "/tools/rules");
  }
  if (grants(p, "run_command") && real_writes.empty())
    warning(
        "run_command is granted but there is no write root: a command line may run any program under the execute "
        "roots and read every read root, yet no build or test can write its output; deny run_command for a "
        "read-only preset or add a write root",
        "/tools");

  // The roots, through the check launch applies to write roots (sandbox/workspace_guard.cpp).
  // Templates are the workspace's: `run` checks the workspace itself before it starts a child.
  struct Kind {
    const std::vector<std::string>* paths;
    sandbox::RootKind kind;
    const char* key;
  };
  for (const Kind& k : {Kind{&p.sandbox.read_paths, sandbox::RootKind::read, "read"},
                        Kind{&p.sandbox.write_paths, sandbox::RootKind::write, "write"},
                        Kind{&p.sandbox.exec_paths, sandbox::RootKind::execute, "execute"}}) {
    for (std::size_t i = 0; i < k.paths->size(); ++i) {
      const std::string& root = (*k.paths)[i];
      if (root.front() != '/') continue;
      std::error_code ec;
      fs::path resolved = fs::canonical(root, ec);
      if (ec) resolved = fs::path(root).lexically_normal();
      const std::string why = sandbox::unsafe_root_reason(resolved, k.kind);
      if (why.empty()) continue;
      const std::string field =
          "sandbox.filesystem." + std::string(k.key) + "[" + std::to_string(i) + "] '" + root + "'";
      if (k.kind == sandbox::RootKind::write)
        error(
            field + " is refused at launch: " + why + " (only " + sandbox::kAllowUnsafeWorkspaceFlag + " lets it pass)",
            index_pointer(std::string("/sandbox/filesystem/") + k.key, i));
      else if (!sandbox::credential_reason(resolved).empty())
        warning(
            field + " is refused at launch: " + why + " (only " + sandbox::kAllowUnsafeWorkspaceFlag + " lets it pass)",
            index_pointer(std::string("/sandbox/filesystem/") + k.key, i));
      else
        warning(field + ": " + why, index_pointer(std::string("/sandbox/filesystem/") + k.key, i));
    }
  }
  // Inside ${workspace} a writer's .git is kept read-only whatever this list says (write_locked: every
  // existing **/.git is a later-execution path, bound read-only; worktree: the git metadata lives
  // outside the worktree, read-only). A root elsewhere has no such cover.
  for (std::size_t i = 0; i < p.sandbox.write_paths.size(); ++i) {
    const std::string& root = p.sandbox.write_paths[i];
    std::error_code ec;
    const auto& prot = p.sandbox.protected_paths;
    if (root.front() == '/' && fs::exists(fs::path(root) / ".git", ec) &&
        std::find(prot.begin(), prot.end(), ".git") == prot.end())
      warning("write root " + root +
                  " holds a .git directory that sandbox.filesystem.protected does not protect "
                  "(a child could rewrite hooks or config that the user's git later runs); add \".git\"",
              index_pointer("/sandbox/filesystem/write", i));
  }
  if (p.sandbox.network == sandbox::Network::host)
    warning(
        "sandbox.network is \"host\": the child shares the host's network stack, unfiltered (it can reach every "
        "address the host can, the supervisor's model and web brokers bypassed)",
        "/sandbox/network");
  if (p.sandbox.required.empty())
    warning(
        "sandbox.required is empty: on a kernel that lacks a layer (Landlock, seccomp, namespaces) the child "
        "starts without it, reported but not refused",
        "/sandbox/required");
  {
    std::vector<std::string> missing;
    for (const char* ns : {"user", "pid", "net", "ipc", "uts", "mount"}) {
      if (std::string(ns) == "net" && p.sandbox.network == sandbox::Network::host)
        continue;  // "host" is that choice, warned above
      if (std::find(p.sandbox.namespaces.begin(), p.sandbox.namespaces.end(), ns) == p.sandbox.namespaces.end())
        missing.push_back(ns);
    }
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    if (!missing.empty())
      warning("sandbox.namespaces lacks " + list + ": the child shares " + (missing.size() > 1 ? "those" : "that") +
                  " with the host (every shipped preset has user, pid, net, ipc, uts, mount)",
              "/sandbox/namespaces");
  }
  for (const auto& t : p.blocked)
    if (grants(p, t)) error("parent-only capability '" + t + "' is granted", "/blocked");

  if (!shipped_dir.empty()) {
    const fs::path twin = shipped_dir / (p.name + ".json");
    std::error_code ec;
    if (!fs::exists(twin, ec)) {
      note("no shipped preset named '" + p.name + "' in " + shipped_dir.string() + " to compare with", "/preset");
    } else if (!fs::equivalent(twin, file, ec)) {
      try {
        for (auto& f : widening_against(p, load_preset(p.name, shipped_dir))) out.push_back(std::move(f));
      } catch (const PresetError& e) {
        note(std::string("cannot compare with the shipped preset: ") + e.what(), "/preset");
      }
    }
  }

  auto support = sandbox::kernel_support();
  for (std::size_t i = 0; i < p.sandbox.required.size(); ++i) {
    const sandbox::Layer req = p.sandbox.required[i];
    auto it = std::find_if(support.begin(), support.end(), [&](const auto& l) { return l.layer == req; });
    if (it != support.end() && !it->applied)
      note("required layer '" + std::string(to_string(req)) + "' is not available on this kernel (" + it->detail +
               "): children of this preset will be refused here",
           index_pointer("/sandbox/required", i));
  }
  return located();
}

}  // namespace supervisor
