// The control-protocol server (protocol/README.md, "Control protocol"): JSON lines on stdin/stdout
// wired to one Hub. The parent says hello with its scope, then spawns, lists, reads, cancels, answers
// approvals and applies patches. `subagent-supervisor serve` (cli/serve.cpp) parses the command line
// and calls serve_control().
//
// Errors: a bad request is answered with an "error" message naming what was wrong; the server goes on.
#pragma once

#include <cstddef>
#include <filesystem>

#include "scheduling/hub.hpp"

namespace supervisor {

struct ServeConfig {
  HubConfig base;                           // complete: policy directory, child, records
  std::filesystem::path default_workspace;  // for spawns that name none
  std::size_t max_line = 4u << 20;
  bool drain_on_eof = false;  // end of input lets every child finish (a signal then cancels them)
};

// Serves one parent on stdin/stdout until end of input, SIGINT or SIGTERM; every envelope is
// delivered before it returns.
void serve_control(ServeConfig config);

}  // namespace supervisor
