// `subagent-supervisor serve`: the command line of the control-protocol server (frontends/serve_server.hpp).

#include <cstdio>

#include "cli/cli.hpp"
#include "cli/front_end.hpp"
#include "frontends/serve_server.hpp"

namespace supervisor::cli {

namespace {

constexpr const char* kServeUsage = R"(usage: subagent-supervisor serve [options]

Speaks the control protocol (protocol/README.md, "Control protocol") on stdin/stdout: the parent
says hello with its own scope, then spawns children (sync or background), lists them, reads their
output, cancels them, answers approvals and applies patches. End of stdin cancels what still runs,
reports every envelope and exits 0; with --drain it lets every child finish first (a first SIGINT
or SIGTERM then cancels them), so `serve --drain < session.jsonl` runs a session from a file.

  --drain                  at end of stdin, wait for running and queued children to finish

Options:
)";

}  // namespace

int cmd_serve(Args args) {
  ServeConfig s;
  FrontEndOptions o;
  while (auto a = args.next()) {
    const std::string& f = *a;
    if (f == "-h" || f == "--help") {
      std::fputs(kServeUsage, stdout);
      std::fputs(kFrontEndFlagsHelp, stdout);
      return 0;
    }
    if (f == "--drain")
      s.drain_on_eof = true;
    else if (!parse_front_end_flag(args, f, o))
      throw UsageError("unknown option '" + f + "' (see serve --help)");
  }
  finish_front_end(o);
  s.base = o.base;
  s.default_workspace = o.default_workspace;
  s.max_line = o.max_line;
  serve_control(std::move(s));
  return 0;
}

}  // namespace supervisor::cli
