// The reference child's local tools. They run inside the child's sandbox, after the supervisor
// allowed the call. Each takes JSON arguments (as the model produced them) and returns text for the
// model, capped at ToolContext::result_cap bytes on a UTF-8 boundary.
//
// Contract: tools never throw; bad arguments, missing files, paths outside the workspace and
// oversize output come back as ToolOutput{ok=false or truncated text} with a message that names
// the argument or path. Paths in arguments are relative to the workspace (absolute paths inside the
// workspace are accepted). Regular expressions are RE2 (linear time).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace child {

struct ToolContext {
  std::filesystem::path workspace;  // canonical absolute path
  std::size_t result_cap = 16000;   // bytes of text returned to the model
};

struct ToolOutput {
  bool ok = true;
  std::string content;             // what the model sees (already capped)
  std::size_t original_bytes = 0;  // size before the cap
  bool truncated = false;          // content was cut at the cap (a note says so in content)
  // Facts the agent loop records for its final report:
  std::vector<std::string> files_changed;  // workspace-relative
  std::string command;                     // for run_command
  int exit_code = 0;                       // run_command: exit status, 128+signal if killed, 124 on timeout
};

// Tool specs for the model: [{name, description, input_schema}] from the protocol's tool catalogue
// (protocol/tools.json), for the named tools this child implements (other names are skipped).
nlohmann::json tool_specs(const std::vector<std::string>& names);

// Names of every tool this child implements locally.
std::vector<std::string> local_tool_names();

ToolOutput run_tool(const std::string& name, const nlohmann::json& args, const ToolContext& ctx);

}  // namespace child
