// The tool catalogue: every tool a child can be offered, with its description and JSON Schema and
// where it runs. The data is protocol/tools.json (compiled in, so both sides agree byte for byte;
// a third-party child may read the same file). The supervisor offers a child exactly the catalogue
// entries its policy names; a policy naming a tool outside the catalogue is refused at load.
//
// Thread-safety: the catalogue is parsed once, on first use, and is immutable afterwards.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace protocol {

// Where a tool runs: `child` tools run inside the child's sandbox after a tool_decision "allow";
// `supervisor` tools are brokered: the supervisor runs them and answers with tool_result.
enum class RunsIn { child, supervisor };

const char* to_string(RunsIn r) noexcept;

struct ToolInfo {
  std::string name;
  RunsIn runs_in = RunsIn::child;
  std::string description;
  nlohmann::json input_schema;  // a JSON Schema object

  // {name, description, input_schema}: the spec shape of model_request.tools / welcome.task.tools.
  nlohmann::json spec() const;
};

// Every tool, in catalogue order.
const std::vector<ToolInfo>& tool_catalogue();

// The entry for `name`, or nullptr when the catalogue has no such tool.
const ToolInfo* find_tool(std::string_view name);

// Every name, in catalogue order ("read_file, list_dir, ..." for error messages: see tool_names_text).
std::vector<std::string> tool_names();
std::string tool_names_text();

// Specs for the named tools, in the order given. Throws std::invalid_argument naming the first
// name the catalogue does not have (policies are checked at load, so this is a programming error).
nlohmann::json tool_specs(const std::vector<std::string>& names);

// The raw catalogue file (protocol/tools.json), as compiled in.
std::string_view tool_catalogue_json();

}  // namespace protocol
