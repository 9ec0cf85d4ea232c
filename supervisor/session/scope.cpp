// Scope arithmetic (scope.hpp): every check that keeps a child within its preset, its parent's scope
// and its spawn's limits.
#include "session/scope.hpp"

#include <algorithm>
#include <cstdio>

#include "policy/decide.hpp"

namespace supervisor {

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// ---- the parent's scope as a cap -----------------------------------------------------------------

void check_cap(const std::optional<std::uint64_t>& want, const std::optional<std::uint64_t>& cap, const char* field) {
  if (want && cap && *want > *cap)
    throw WideningError(std::string("limits.") + field + " " + std::to_string(*want) + " exceeds the parent's scope " +
                        field + " " + std::to_string(*cap) + " (a child never gets more than its parent)");
}

void cap(std::uint64_t& field, const std::optional<std::uint64_t>& c) {
  if (c && *c < field) field = *c;
}

}  // namespace

void check_preset_in_scope(const std::string& preset, const Scope& scope) {
  if (scope.presets && !contains(*scope.presets, preset))
    throw ScopeError("preset: '" + preset + "' is outside the parent's scope (allowed: " + joined(*scope.presets) +
                     ")");
}

Preset narrow_tools(const Preset& p, const std::vector<std::string>& tools) {
  const auto offered = offered_tools(p);
  for (const auto& t : tools)
    if (!contains(offered, t)) throw ScopeError("tools: the preset " + p.name + " does not grant '" + t + "'");
  Preset n = p;
  auto keep = [&](std::vector<std::string>& v) {
    std::vector<std::string> dropped;
    for (const auto& t : v)
      if (!contains(tools, t)) dropped.push_back(t);
    v.erase(std::remove_if(v.begin(), v.end(), [&](const std::string& t) { return !contains(tools, t); }), v.end());
    n.deny.insert(n.deny.end(), dropped.begin(), dropped.end());
  };
  keep(n.allow);
  keep(n.ask);
  n.rules.erase(
      std::remove_if(n.rules.begin(), n.rules.end(),
                     [&](const ToolRule& r) { return !contains(tools, r.tool) && r.decision != Decision::deny; }),
      n.rules.end());
  return n;
}

Preset scoped_preset(const Preset& p, const Scope& scope, const std::optional<std::vector<std::string>>& tools,
                     const std::optional<std::vector<std::string>>& domains) {
  Preset n = tools ? narrow_tools(p, *tools) : p;
  const auto offered = offered_tools(n);
  if (scope.tools) {
    for (const auto& t : offered)
      if (!contains(*scope.tools, t))
        throw ScopeError(
            "tools: '" + t + "' is outside the parent's scope" +
            (tools ? std::string() : " (the preset " + n.name + " grants it; ask for a narrower \"tools\" list)"));
  }
  if (domains) {
    if (!contains(offered, "web_fetch") && !contains(offered, "web_search"))
      throw ScopeError("domains: the preset " + n.name + " has no web tools");
    if (scope.domains)
      for (const auto& d : *domains)
        if (!contains(*scope.domains, d)) throw ScopeError("domains: '" + d + "' is outside the parent's scope");
  }
  return n;
}

void cap_cost_by_scope(Budgets& b, const BudgetOverrides& scope, const BudgetOverrides& limits) {
  if (!scope.max_cost_usd) return;
  if (limits.max_cost_usd && *limits.max_cost_usd > *scope.max_cost_usd)
    throw WideningError("limits.max_cost_usd " + format_usd(*limits.max_cost_usd) +
                        " exceeds the parent's scope max_cost_usd " + format_usd(*scope.max_cost_usd) +
                        " (a child never gets more than its parent)");
  if (!b.max_cost_usd || *scope.max_cost_usd < *b.max_cost_usd) b.max_cost_usd = scope.max_cost_usd;
}

Budgets effective_budgets(const Preset& p, const Scope& scope, const BudgetOverrides& limits) {
  const BudgetOverrides& s = scope.budgets;
  check_cap(limits.max_steps, s.max_steps, "max_steps");
  check_cap(limits.max_tool_calls, s.max_tool_calls, "max_tool_calls");
  check_cap(limits.max_tokens, s.max_tokens, "max_tokens");
  check_cap(limits.max_thinking_tokens, s.max_thinking_tokens, "max_thinking_tokens");
  check_cap(limits.timeout_ms, s.timeout_ms, "timeout_ms");
  Budgets b = p.budgets;  // inherit: the preset's budgets, never above the parent's
  cap(b.max_steps, s.max_steps);
  cap(b.max_tool_calls, s.max_tool_calls);
  cap(b.max_tokens, s.max_tokens);
  cap(b.max_thinking_tokens, s.max_thinking_tokens);
  cap(b.timeout_ms, s.timeout_ms);
  cap(b.summary_bytes, s.summary_bytes);
  cap(b.answer_bytes, s.answer_bytes);
  cap_cost_by_scope(b, s, limits);
  return tighten(b, limits, "the preset " + p.name, "limits.");
}

}  // namespace supervisor
