// What a preset decides for a tool: the tools it offers, the widest decision a tool can get, and the
// decision for one call with its arguments. Never throws.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/preset.hpp"

namespace supervisor {

// Every tool the preset lists (allow + ask), i.e. every tool the child is told about.
std::vector<std::string> offered_tools(const Preset& p);

// The most `tool` can get from the preset over all arguments (deny < ask < allow): its list, or a
// rule that allows or asks for some arguments. Parent-only and denied tools: deny.
Decision widest_decision(const Preset& p, const std::string& tool);

// The decision for one call. `why` receives the rule or list that decided, for error messages;
// `rule`, when given, receives its short name for the envelope's denials: "blocked", "tools.deny",
// "tools.rules[2] {\"path_under\":[\".git\"]}", "tools.allow", "tools.ask" or "not offered".
Decision decide(const Preset& p, const std::string& tool, const nlohmann::json& args, std::string& why,
                std::string* rule = nullptr);

}  // namespace supervisor
