// The reference child's agent loop. It speaks protocol v1 on (in_fd, out_fd): says hello, receives
// its task, asks the supervisor for every model turn and for permission before every tool call, runs
// allowed local tools itself, and ends with one `final` message in the fixed report shape.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "child/trim.hpp"

namespace child {

// Returns the process exit code: 0 after a final message, 3 on a protocol error, 4 on cancel.
int run_agent(int in_fd, int out_fd, TrimOptions trim = {});

// The fixed shape of a final answer, parsed from the model's last message and completed with the
// facts the child recorded itself (files it changed, commands it ran).
struct Report {
  std::string summary;
  std::string found;
  std::vector<std::string> evidence;       // "path:line — note"
  std::vector<std::string> files_changed;  // workspace-relative
  std::vector<std::string> commands;       // "command → exit N"
  std::string risks;
};

Report parse_report(const std::string& model_text);
std::string render_report(const Report& r);
nlohmann::json to_json(const Report& r);

// The system prompt the child gives its model; `trims`: the child trims old tool results (it says so).
std::string system_prompt(const std::string& preset, const std::string& workspace,
                          const std::vector<std::string>& tools, bool trims = false);

}  // namespace child
