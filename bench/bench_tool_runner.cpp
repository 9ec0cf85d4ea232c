// bench_tool_runner: runs the child's real local tools (child::run_tool) on
// request, inside the sandbox the benchmark launched it in, and times each
// call.
//
//   bench_tool_runner          reads lines "TOOL JSON-ARGS" on stdin; for each,
//   runs the tool with
//                              the cwd as workspace and writes one JSON line:
//                              {"ns": elapsed, "ok": bool, "bytes": content
//                              size, "tail": last line}
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>

#include "child/tools.hpp"

namespace {

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The last non-empty line of a tool's output: the summary ("[12 matches in 3
// files; ...]").
std::string last_line(const std::string &s) {
  std::size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  std::size_t begin = s.rfind('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

}  // namespace

int main() {
  child::ToolContext ctx;
  ctx.workspace = std::filesystem::current_path();
  ctx.result_cap = 16000;  // what the presets give (tool_result_bytes)
  std::string line;
  while (std::getline(std::cin, line)) {
    std::size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string tool = line.substr(0, space);
    nlohmann::json args = nlohmann::json::parse(line.substr(space + 1), nullptr, false);
    const std::int64_t t0 = now_ns();
    child::ToolOutput out = child::run_tool(tool, args, ctx);
    const std::int64_t ns = now_ns() - t0;
    nlohmann::json reply = {
        {"ns", ns}, {"ok", out.ok}, {"bytes", out.content.size()}, {"tail", last_line(out.content)}};
    std::cout << reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  }
  return 0;
}
