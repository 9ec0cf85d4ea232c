// The MCP server: JSON-RPC 2.0 over stdio wired to one Hub, so that any MCP client (Claude Code,
// Codex, Gemini CLI, agent SDKs) can delegate to sandboxed children through five tools. The protocol
// pieces (messages, tool definitions, argument checks) live in mcp.hpp; `subagent-supervisor mcp`
// (cli/mcp.cpp) parses the command line and calls serve_mcp().
//
// Errors: a bad message is answered with a JSON-RPC error and the server goes on; nothing thrown
// from a handler ends it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "scheduling/hub.hpp"
#include "policy/preset.hpp"

namespace supervisor {

struct McpConfig {
  HubConfig base;                            // complete: policy directory, child, records
  std::filesystem::path default_workspace;   // for spawns that name none
  std::vector<std::filesystem::path> roots;  // canonical; a workspace must be at or under one
  std::vector<std::string> preset_filter;    // --presets, or empty for every preset
  std::vector<Preset> presets;               // what tools/list offers
  std::size_t max_line = 4u << 20;
};

// Serves one MCP client on stdin/stdout until end of input, SIGINT or SIGTERM; every child still
// running is cancelled and its envelope delivered first.
void serve_mcp(McpConfig config);

}  // namespace supervisor
