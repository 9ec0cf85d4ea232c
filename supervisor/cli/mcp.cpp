// `subagent-supervisor mcp`: the command line of the MCP server (frontends/mcp_server.hpp).

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/cli.hpp"
#include "cli/front_end.hpp"
#include "frontends/mcp_server.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kMcpUsage = R"(usage: subagent-supervisor mcp [options]

A Model Context Protocol server over stdio (JSON-RPC 2.0, one message per line). Register it in an
MCP client's configuration (README.md, "MCP") and the client's model gets five tools: agent_spawn,
agent_list, agent_output, agent_cancel and agent_apply. Approvals ('ask' decisions) are put to the
user through elicitation when the client supports it, and denied otherwise. Logs go to stderr.
End of stdin, SIGINT or SIGTERM cancels what still runs and exits 0.

Options:
  --presets A,B,...        offer only these presets (default: every preset in the policy directory)
  --allow-workspace DIR    a directory children may work in, besides --workspace and what is
                           under it (repeatable); anything else is refused
)";

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int cmd_mcp(Args args) {
  McpConfig s;
  FrontEndOptions opts;
  std::vector<std::string> extra_roots;
  while (auto a = args.next()) {
    const std::string& f = *a;
    if (f == "-h" || f == "--help") {
      std::fputs(kMcpUsage, stdout);
      std::fputs(kFrontEndFlagsHelp, stdout);
      return 0;
    }
    if (f == "--presets") {
      for (auto& n : split_names(args.value(f))) s.preset_filter.push_back(n);
      if (s.preset_filter.empty()) throw UsageError("--presets needs at least one preset name");
    } else if (f == "--allow-workspace") {
      extra_roots.push_back(args.value(f));
    } else if (!parse_front_end_flag(args, f, opts)) {
      throw UsageError("unknown option '" + f + "' (see mcp --help)");
    }
  }
  finish_front_end(opts, "mcp");

  s.roots.push_back(fs::canonical(opts.default_workspace));
  for (const auto& r : extra_roots) {
    std::error_code ec;
    fs::path c = fs::canonical(r, ec);
    if (ec || !fs::is_directory(c)) throw UsageError("--allow-workspace: '" + r + "' is not an existing directory");
    s.roots.push_back(c);
  }
  const auto available = list_presets(opts.base.policy_dir);
  for (const auto& n : s.preset_filter)
    if (std::find(available.begin(), available.end(), n) == available.end())
      throw UsageError("--presets: no preset '" + n + "' in " + opts.base.policy_dir.string());
  for (const auto& n : available) {
    if (!s.preset_filter.empty() &&
        std::find(s.preset_filter.begin(), s.preset_filter.end(), n) == s.preset_filter.end())
      continue;
    try {
      s.presets.push_back(load_preset(n, opts.base.policy_dir));
    } catch (const std::exception& e) {
      // A broken policy file is reported and not offered; the others still work.
      std::fprintf(stderr, "subagent-supervisor mcp: preset '%s' not offered: %s\n", n.c_str(), e.what());
    }
  }

  s.base = opts.base;
  s.default_workspace = opts.default_workspace;
  s.max_line = opts.max_line;
  serve_mcp(std::move(s));
  return 0;
}

}  // namespace supervisor::cli
