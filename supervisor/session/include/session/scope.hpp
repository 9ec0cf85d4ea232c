// Scope arithmetic, in one place: what one child may have is its preset ∩ the parent's scope ∩ the
// spawn's own limits. Inherit, never widen: a request or a flag may only narrow or tighten, and the
// error names the field that asked for more ("limits.max_steps 500 exceeds the parent's scope
// max_steps 100 ...", "tools: 'shell' is outside the parent's scope").
//
// The budgets themselves, and tighten() of a base by a request, are policy/budget_rules.hpp's; this
// file adds the parent's scope around them.
//
// Errors: exceptions. ScopeError for presets, tools and domains outside the scope or the preset;
// WideningError (policy/budget_rules.hpp) for a budget above its base or of 0 where 0 cannot run.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "policy/preset.hpp"

namespace supervisor {

// What the parent itself may do, as it declared (serve's hello). An absent list means "not
// declared": then only the presets' own limits apply.
struct Scope {
  std::optional<std::vector<std::string>> tools;
  std::optional<std::vector<std::string>> presets;
  std::optional<std::vector<std::string>> domains;
  BudgetOverrides budgets;  // caps on every child's budgets
};

// A spawn that asks for more than the parent's scope or the preset allows. what() names the field.
class ScopeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The preset may be spawned under `scope` (its name is in scope.presets, when that is declared).
void check_preset_in_scope(const std::string& preset, const Scope& scope);

// The preset narrowed to `tools` (each must be one the preset offers; throws ScopeError).
Preset narrow_tools(const Preset& p, const std::vector<std::string>& tools);

// The preset as this spawn may have it: narrowed to `tools` when given, then checked against the
// scope's tools (every tool the child would be offered must be in it) and `domains` against the
// preset's web tools and the scope's domains.
Preset scoped_preset(const Preset& p, const Scope& scope, const std::optional<std::vector<std::string>>& tools,
                     const std::optional<std::vector<std::string>>& domains);

// The parent's scope caps the cost budget like the others: a spawn asking more than the scope's
// max_cost_usd is refused (WideningError naming limits.max_cost_usd); otherwise the scope's lowers it.
void cap_cost_by_scope(Budgets& b, const BudgetOverrides& scope, const BudgetOverrides& limits);

// The budgets a child gets: the preset's, capped by the parent's scope, tightened by the spawn's
// limits. A limit above the scope or the preset throws WideningError naming it.
Budgets effective_budgets(const Preset& p, const Scope& scope, const BudgetOverrides& limits);

}  // namespace supervisor
