#include "supervisor/policy_lint.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "sandbox/explain.hpp"
#include "supervisor/preset.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

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
    if (t->is_string()) ok = type_ok(v, *t);
    else for (const auto& x : *t) ok = ok || type_ok(v, x);
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
      if (!v.contains(req.get<std::string>())) out.push_back(where + ": missing required field \"" + req.get<std::string>() + "\"");
    const json props = schema.value("properties", json::object());
    for (const auto& [k, sub] : v.items()) {
      if (props.contains(k)) {
        validate(sub, props[k], root, ptr + "/" + k, out);
      } else if (auto ap = schema.find("additionalProperties"); ap != schema.end()) {
        if (ap->is_boolean() && !ap->get<bool>()) out.push_back(ptr + "/" + k + ": is not a known field");
        else if (ap->is_object()) validate(sub, *ap, root, ptr + "/" + k, out);
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
    error("read-only preset (no tool that writes) allows the syscall group \"filesystem_write\" (chmod, utimensat, "
          "setxattr ... on any file the child can name); remove it from sandbox.syscalls.groups");
  // /dev/null is no write root in this sense: opening it read-write creates, renames and changes nothing.
  const bool real_write_roots = std::any_of(p.sandbox.write_paths.begin(), p.sandbox.write_paths.end(),
                                            [](const std::string& w) { return w != "/dev/null"; });
  if (real_write_roots && !has("filesystem_write"))
    warning("sandbox.filesystem.write lists write roots but sandbox.syscalls.groups lacks \"filesystem_write\": "
            "the child can write open files but not create directories, rename, remove or chmod");
  if (has("watch"))
    warning("sandbox.syscalls.groups allows \"watch\": inotify and fanotify report the names of files created in "
            "directories outside every root (Landlock does not mediate watches)");
}

}  // namespace

std::vector<std::string> validate_schema(const json& doc, const json& schema) {
  std::vector<std::string> out;
  validate(doc, schema, schema, "", out);
  return out;
}

std::vector<Finding> lint_policy_file(const fs::path& file, const fs::path& schema_file) {
  std::vector<Finding> out;
  auto error = [&](std::string m) { out.push_back({"error", std::move(m)}); };
  auto warning = [&](std::string m) { out.push_back({"warning", std::move(m)}); };

  json doc;
  std::string raw;
  try {
    doc = read_jsonc_file(file, &raw);
  } catch (const PresetError& e) {
    error(e.what());
    return out;
  }
  try {
    json schema = read_jsonc_file(schema_file);
    for (auto& m : validate_schema(doc, schema)) error("schema: " + m);
  } catch (const PresetError& e) {
    error(std::string("cannot validate: the schema ") + e.what());
  }
  Preset p;
  try {
    p = parse_preset(doc, file, "");
  } catch (const PresetError& e) {
    error(e.what());
    return out;
  }

  const bool writes = grants(p, "write_file") || grants(p, "edit_file") || grants(p, "run_command");
  // /dev/null as a write root grants nothing (what is written there is discarded); git opens it
  // read-write even for its read-only views.
  std::vector<std::string> real_writes;
  for (const auto& w : p.sandbox.write_paths)
    if (w != "/dev/null") real_writes.push_back(w);
  if (!writes && !real_writes.empty())
    error("read-only preset (no tool that writes) has write roots: " + real_writes.front() +
          (real_writes.size() > 1 ? " ..." : "") + "; remove sandbox.filesystem.write");
  lint_syscall_groups(p, writes, error, warning);
  const bool writes_workspace = std::any_of(p.sandbox.write_paths.begin(), p.sandbox.write_paths.end(),
                                           [](const std::string& w) { return w.find("${workspace}") != std::string::npos; });
  if (p.workspace_mode == "read" && writes_workspace)
    error("workspace_mode is \"read\" but ${workspace} is a write root; use \"write_locked\" (one writer at a time) or \"worktree\"");
  if (p.workspace_mode != "read" && !writes_workspace)
    warning("workspace_mode is \"" + p.workspace_mode + "\" but ${workspace} is not a write root: the child cannot write its workspace");
  if (p.unattended) {
    for (const auto& t : p.ask) warning("tool '" + t + "' is \"ask\" in a preset that runs unattended: with no approver it is denied at once");
    for (const auto& r : p.rules)
      if (r.decision == Decision::ask)
        warning("a rule for '" + r.tool + "' says \"ask\" in a preset that runs unattended: with no approver it is denied at once");
  }
  for (const auto& root : p.sandbox.write_paths) {
    bool may_hold_git = root.find("${workspace}") != std::string::npos;
    std::error_code ec;
    if (!may_hold_git && fs::exists(fs::path(root) / ".git", ec)) may_hold_git = true;
    const auto& prot = p.sandbox.protected_paths;
    if (may_hold_git && std::find(prot.begin(), prot.end(), ".git") == prot.end())
      error("write root " + root + " may hold a .git directory that sandbox.filesystem.protected does not protect "
            "(a child could rewrite hooks or config that the parent's git later runs); add \".git\"");
  }
  for (const auto& t : p.blocked)
    if (grants(p, t)) error("parent-only capability '" + t + "' is granted");
  auto support = sandbox::kernel_support();
  for (const auto& req : p.sandbox.required) {
    auto it = std::find_if(support.begin(), support.end(), [&](const auto& l) { return l.name == req; });
    if (it != support.end() && !it->applied)
      warning("required layer '" + req + "' is not available on this kernel (" + it->detail + "): children of this preset will be refused here");
  }
  return out;
}

}  // namespace supervisor
