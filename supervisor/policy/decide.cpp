// A preset's decision for one tool call (policy/decide.hpp): blocked and denied lists, rules in
// file order (deny wins), then the allow and ask lists.
#include "policy/decide.hpp"

#include <algorithm>
#include <optional>

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

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
