// The parent control protocol (`serve`): JSON-lines requests from a parent agent, specified in
// protocol/README.md ("Control protocol"). Parsing helpers shared by `serve` and `mcp`.
//
// Errors: the parsers throw BadRequest naming the field; the server answers it as an "error" message.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "scheduling/hub.hpp"

namespace supervisor {

// A request the parent got wrong; what() names the field.
class BadRequest : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// {"max_steps": 10, "max_tool_calls": .., "max_tokens": .., "max_thinking_tokens": .., "timeout": "5m" | 300,
//  "summary_bytes": .., "answer_bytes": ..}; `where` prefixes field names in errors.
BudgetOverrides parse_limits(const nlohmann::json& j, const std::string& where);
Scope parse_scope(const nlohmann::json& j);
// Everything of a spawn request but the workspace default and model default.
SpawnRequest parse_spawn(const nlohmann::json& j);

nlohmann::json to_json(const ChildInfo& c);
nlohmann::json to_json(const Progress& p);

}  // namespace supervisor
