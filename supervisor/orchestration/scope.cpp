#include "policy/decide.hpp"
// Scope arithmetic (scope.hpp): every check that keeps a child within its preset, its parent's scope
#include "policy/decide.hpp"
// and its spawn's limits.
#include "policy/decide.hpp"
#include "orchestration/scope.hpp"
#include "policy/decide.hpp"

#include "policy/decide.hpp"
#include <algorithm>
#include "policy/decide.hpp"
#include <cstdio>
#include "policy/decide.hpp"

#include "policy/decide.hpp"
namespace supervisor {
#include "policy/decide.hpp"

#include "policy/decide.hpp"
namespace {
#include "policy/decide.hpp"

#include "policy/decide.hpp"
bool contains(const std::vector<std::string>& v, const std::string& s) {
#include "policy/decide.hpp"
  return std::find(v.begin(), v.end(), s) != v.end();
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
std::string joined(const std::vector<std::string>& v) {
#include "policy/decide.hpp"
  std::string s;
#include "policy/decide.hpp"
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
#include "policy/decide.hpp"
  return s;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
// ---- the spawn's limits against a base (the preset's budgets, or the CLI's flags against them) ----
#include "policy/decide.hpp"

#include "policy/decide.hpp"
std::string label(const char* flag, const char* name, const std::string& prefix) {
#include "policy/decide.hpp"
  return prefix.empty() ? std::string(flag) : prefix + name;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
void apply(std::uint64_t& field, const std::optional<std::uint64_t>& want, const char* name, const char* flag,
#include "policy/decide.hpp"
           const std::string& who, const std::string& prefix, bool zero_ok = false) {
#include "policy/decide.hpp"
  if (!want) return;
#include "policy/decide.hpp"
  if (*want == 0 && !zero_ok)
#include "policy/decide.hpp"
    throw WideningError(label(flag, name, prefix) +
#include "policy/decide.hpp"
                        " 0: must be at least 1 (a budget of 0 would end the child "
#include "policy/decide.hpp"
                        "before it starts; leave it out to keep " +
#include "policy/decide.hpp"
                        who + "'s " + std::to_string(field) + ")");
#include "policy/decide.hpp"
  if (*want > field) {
#include "policy/decide.hpp"
    throw WideningError(label(flag, name, prefix) + " " + std::to_string(*want) + " exceeds " + who + "'s " + name +
#include "policy/decide.hpp"
                        " " + std::to_string(field) + " (limits may only tighten)");
#include "policy/decide.hpp"
  }
#include "policy/decide.hpp"
  field = *want;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
// ---- the parent's scope as a cap -----------------------------------------------------------------
#include "policy/decide.hpp"

#include "policy/decide.hpp"
void check_cap(const std::optional<std::uint64_t>& want, const std::optional<std::uint64_t>& cap, const char* field) {
#include "policy/decide.hpp"
  if (want && cap && *want > *cap)
#include "policy/decide.hpp"
    throw WideningError(std::string("limits.") + field + " " + std::to_string(*want) + " exceeds the parent's scope " +
#include "policy/decide.hpp"
                        field + " " + std::to_string(*cap) + " (a child never gets more than its parent)");
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
void cap(std::uint64_t& field, const std::optional<std::uint64_t>& c) {
#include "policy/decide.hpp"
  if (c && *c < field) field = *c;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
}  // namespace
#include "policy/decide.hpp"

#include "policy/decide.hpp"
void check_preset_in_scope(const std::string& preset, const Scope& scope) {
#include "policy/decide.hpp"
  if (scope.presets && !contains(*scope.presets, preset))
#include "policy/decide.hpp"
    throw ScopeError("preset: '" + preset + "' is outside the parent's scope (allowed: " + joined(*scope.presets) +
#include "policy/decide.hpp"
                     ")");
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
Preset narrow_tools(const Preset& p, const std::vector<std::string>& tools) {
#include "policy/decide.hpp"
  const auto offered = offered_tools(p);
#include "policy/decide.hpp"
  for (const auto& t : tools)
#include "policy/decide.hpp"
    if (!contains(offered, t)) throw ScopeError("tools: the preset " + p.name + " does not grant '" + t + "'");
#include "policy/decide.hpp"
  Preset n = p;
#include "policy/decide.hpp"
  auto keep = [&](std::vector<std::string>& v) {
#include "policy/decide.hpp"
    std::vector<std::string> dropped;
#include "policy/decide.hpp"
    for (const auto& t : v)
#include "policy/decide.hpp"
      if (!contains(tools, t)) dropped.push_back(t);
#include "policy/decide.hpp"
    v.erase(std::remove_if(v.begin(), v.end(), [&](const std::string& t) { return !contains(tools, t); }), v.end());
#include "policy/decide.hpp"
    n.deny.insert(n.deny.end(), dropped.begin(), dropped.end());
#include "policy/decide.hpp"
  };
#include "policy/decide.hpp"
  keep(n.allow);
#include "policy/decide.hpp"
  keep(n.ask);
#include "policy/decide.hpp"
  n.rules.erase(
#include "policy/decide.hpp"
      std::remove_if(n.rules.begin(), n.rules.end(),
#include "policy/decide.hpp"
                     [&](const ToolRule& r) { return !contains(tools, r.tool) && r.decision != Decision::deny; }),
#include "policy/decide.hpp"
      n.rules.end());
#include "policy/decide.hpp"
  return n;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
Preset scoped_preset(const Preset& p, const Scope& scope, const std::optional<std::vector<std::string>>& tools,
#include "policy/decide.hpp"
                     const std::optional<std::vector<std::string>>& domains) {
#include "policy/decide.hpp"
  Preset n = tools ? narrow_tools(p, *tools) : p;
#include "policy/decide.hpp"
  const auto offered = offered_tools(n);
#include "policy/decide.hpp"
  if (scope.tools) {
#include "policy/decide.hpp"
    for (const auto& t : offered)
#include "policy/decide.hpp"
      if (!contains(*scope.tools, t))
#include "policy/decide.hpp"
        throw ScopeError(
#include "policy/decide.hpp"
            "tools: '" + t + "' is outside the parent's scope" +
#include "policy/decide.hpp"
            (tools ? std::string() : " (the preset " + n.name + " grants it; ask for a narrower \"tools\" list)"));
#include "policy/decide.hpp"
  }
#include "policy/decide.hpp"
  if (domains) {
#include "policy/decide.hpp"
    if (!contains(offered, "web_fetch") && !contains(offered, "web_search"))
#include "policy/decide.hpp"
      throw ScopeError("domains: the preset " + n.name + " has no web tools");
#include "policy/decide.hpp"
    if (scope.domains)
#include "policy/decide.hpp"
      for (const auto& d : *domains)
#include "policy/decide.hpp"
        if (!contains(*scope.domains, d)) throw ScopeError("domains: '" + d + "' is outside the parent's scope");
#include "policy/decide.hpp"
  }
#include "policy/decide.hpp"
  return n;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
Budgets tighten(const Budgets& base, const BudgetOverrides& o, const std::string& who, const std::string& prefix) {
#include "policy/decide.hpp"
  Budgets b = base;
#include "policy/decide.hpp"
  apply(b.max_steps, o.max_steps, "max_steps", "--max-steps", who, prefix);
#include "policy/decide.hpp"
  apply(b.max_tool_calls, o.max_tool_calls, "max_tool_calls", "--max-tool-calls", who, prefix, true);
#include "policy/decide.hpp"
  apply(b.max_tokens, o.max_tokens, "max_tokens", "--max-tokens", who, prefix);
#include "policy/decide.hpp"
  apply(b.max_thinking_tokens, o.max_thinking_tokens, "max_thinking_tokens", "--max-thinking-tokens", who, prefix,
#include "policy/decide.hpp"
        true);
#include "policy/decide.hpp"
  if (o.timeout_ms && *o.timeout_ms == 0)
#include "policy/decide.hpp"
    throw WideningError(label("--timeout", "timeout", prefix) +
#include "policy/decide.hpp"
                        " 0: must be at least 1ms (a timeout of 0 would end "
#include "policy/decide.hpp"
                        "the child before it starts; leave it out to keep " +
#include "policy/decide.hpp"
                        who + "'s " + std::to_string(b.timeout_ms) + "ms)");
#include "policy/decide.hpp"
  if (o.timeout_ms && *o.timeout_ms > b.timeout_ms) {
#include "policy/decide.hpp"
    throw WideningError(label("--timeout", "timeout", prefix) + " " + std::to_string(*o.timeout_ms) + "ms exceeds " +
#include "policy/decide.hpp"
                        who + "'s timeout " + std::to_string(b.timeout_ms) + "ms (limits may only tighten)");
#include "policy/decide.hpp"
  }
#include "policy/decide.hpp"
  if (o.timeout_ms) b.timeout_ms = *o.timeout_ms;
#include "policy/decide.hpp"
  apply(b.summary_bytes, o.summary_bytes, "summary_bytes", "--summary-bytes", who, prefix);
#include "policy/decide.hpp"
  apply(b.answer_bytes, o.answer_bytes, "answer_bytes", "--answer-bytes", who, prefix);
#include "policy/decide.hpp"
  apply(b.wrap_up_grace_ms, o.wrap_up_grace_ms, "wrap_up_grace_ms", "--wrap-up-grace", who, prefix, true);
#include "policy/decide.hpp"
  if (o.max_cost_usd) {
#include "policy/decide.hpp"
    if (!(*o.max_cost_usd > 0))
#include "policy/decide.hpp"
      throw std::invalid_argument(label("--max-cost-usd", "max_cost_usd", prefix) +
#include "policy/decide.hpp"
                                  " must be a positive number of US dollars");
#include "policy/decide.hpp"
    if (b.max_cost_usd && *o.max_cost_usd > *b.max_cost_usd)
#include "policy/decide.hpp"
      throw WideningError(label("--max-cost-usd", "max_cost_usd", prefix) + " " + format_usd(*o.max_cost_usd) +
#include "policy/decide.hpp"
                          " exceeds " + who + "'s max_cost_usd " + format_usd(*b.max_cost_usd) +
#include "policy/decide.hpp"
                          " (limits may only tighten)");
#include "policy/decide.hpp"
    b.max_cost_usd = o.max_cost_usd;
#include "policy/decide.hpp"
  }
#include "policy/decide.hpp"
  return b;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
void cap_cost_by_scope(Budgets& b, const BudgetOverrides& scope, const BudgetOverrides& limits) {
#include "policy/decide.hpp"
  if (!scope.max_cost_usd) return;
#include "policy/decide.hpp"
  if (limits.max_cost_usd && *limits.max_cost_usd > *scope.max_cost_usd)
#include "policy/decide.hpp"
    throw WideningError("limits.max_cost_usd " + format_usd(*limits.max_cost_usd) +
#include "policy/decide.hpp"
                        " exceeds the parent's scope max_cost_usd " + format_usd(*scope.max_cost_usd) +
#include "policy/decide.hpp"
                        " (a child never gets more than its parent)");
#include "policy/decide.hpp"
  if (!b.max_cost_usd || *scope.max_cost_usd < *b.max_cost_usd) b.max_cost_usd = scope.max_cost_usd;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
Budgets effective_budgets(const Preset& p, const Scope& scope, const BudgetOverrides& limits) {
#include "policy/decide.hpp"
  const BudgetOverrides& s = scope.budgets;
#include "policy/decide.hpp"
  check_cap(limits.max_steps, s.max_steps, "max_steps");
#include "policy/decide.hpp"
  check_cap(limits.max_tool_calls, s.max_tool_calls, "max_tool_calls");
#include "policy/decide.hpp"
  check_cap(limits.max_tokens, s.max_tokens, "max_tokens");
#include "policy/decide.hpp"
  check_cap(limits.max_thinking_tokens, s.max_thinking_tokens, "max_thinking_tokens");
#include "policy/decide.hpp"
  check_cap(limits.timeout_ms, s.timeout_ms, "timeout_ms");
#include "policy/decide.hpp"
  Budgets b = p.budgets;  // inherit: the preset's budgets, never above the parent's
#include "policy/decide.hpp"
  cap(b.max_steps, s.max_steps);
#include "policy/decide.hpp"
  cap(b.max_tool_calls, s.max_tool_calls);
#include "policy/decide.hpp"
  cap(b.max_tokens, s.max_tokens);
#include "policy/decide.hpp"
  cap(b.max_thinking_tokens, s.max_thinking_tokens);
#include "policy/decide.hpp"
  cap(b.timeout_ms, s.timeout_ms);
#include "policy/decide.hpp"
  cap(b.summary_bytes, s.summary_bytes);
#include "policy/decide.hpp"
  cap(b.answer_bytes, s.answer_bytes);
#include "policy/decide.hpp"
  cap_cost_by_scope(b, s, limits);
#include "policy/decide.hpp"
  return tighten(b, limits, "the preset " + p.name, "limits.");
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
std::string format_usd(double v) {
#include "policy/decide.hpp"
  char buf[64];
#include "policy/decide.hpp"
  std::snprintf(buf, sizeof buf, v < 0.01 ? "$%.6f" : "$%.4f", v);
#include "policy/decide.hpp"
  return buf;
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
}  // namespace supervisor
