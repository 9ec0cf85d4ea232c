// run_command: `/bin/sh -c COMMAND` in the workspace, inside the child's own sandbox.
#include <signal.h>
#include <string.h>

#include <cstdio>

#include "common.hpp"
#include "process.hpp"

namespace child::tools_detail {

ToolOutput run_command(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  std::string command = a.str("command");
  if (command.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw ToolError("argument 'command' is empty");
  }
  if (command.find('\0') != std::string::npos) {
    throw ToolError("argument 'command' contains a NUL byte");
  }
  std::int64_t timeout = a.integer("timeout_seconds", 120, 1, 3600);
  std::int64_t max_out = a.integer("max_output_bytes", static_cast<std::int64_t>(ctx.result_cap), 64, 64ll << 20);

  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.env = current_environment();
  spec.cwd = ctx.workspace.string();
  spec.timeout = std::chrono::seconds(timeout);
  // Leave room for the footer so head and tail both survive the final cap.
  std::size_t room = ctx.result_cap > 400 ? ctx.result_cap - 200 : ctx.result_cap / 2;
  spec.max_output = std::min<std::size_t>(static_cast<std::size_t>(max_out), room);

  ProcessResult r = run_process(spec);
  ToolOutput out;
  out.command = command;
  std::string& text = out.content;
  text = r.output;
  if (text.empty()) text = "(no output)\n";
  if (text.back() != '\n') text += '\n';
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", static_cast<double>(r.elapsed.count()) / 1000.0);
  if (r.timed_out) {
    out.exit_code = 124;
    out.ok = false;
    text += "[timed out after " + std::to_string(timeout) +
            " s (timeout_seconds); the command's process group was killed]\n";
  } else if (r.term_signal) {
    out.exit_code = 128 + r.term_signal;
    const char* name = ::sigabbrev_np(r.term_signal);
    text += "[killed by signal " + std::to_string(r.term_signal) + (name ? std::string(" (SIG") + name + ")" : "") +
            " after " + secs + "]\n";
  } else {
    out.exit_code = r.exit_code;
    text += "[exit code " + std::to_string(r.exit_code) + ", " + secs + "]\n";
  }
  if (r.output_cut) {
    text += "[output was " + std::to_string(r.output_bytes) + " bytes; showing the first and last " +
            std::to_string(spec.max_output / 2) + "]\n";
  }
  return out;
}

}  // namespace child::tools_detail
