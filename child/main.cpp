// subagent-child: the reference child agent. Speaks protocol v1 on stdin/stdout; see protocol/README.md.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "child/agent.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::puts(
        "usage: subagent-child\n"
        "The reference child agent of subagent-supervisor. It is started by the supervisor inside a\n"
        "sandbox and speaks the JSON-lines protocol v1 (protocol/README.md) on stdin and stdout.\n"
        "\n"
        "Context trimming (docs/models.md): once the history has passed a threshold, the results of tool\n"
        "turns older than the newest few become a stub naming the tool and the result's size (repeat the\n"
        "call to see it again).\n"
        "  --no-trim                  never trim\n"
        "  --trim-threshold-bytes N   history size that starts trimming, for good (default 8000)\n"
        "  --trim-keep-turns N        newest tool turns kept whole (default 1, at least 1)\n"
        "  --trim-block N             the trim boundary moves N tool turns at a time (default 1)");
    return 0;
  }
  child::TrimOptions trim;
  try {
    trim = child::parse_trim_flags(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "subagent-child: %s\n", e.what());
    return 64;
  }
  return child::run_agent(STDIN_FILENO, STDOUT_FILENO, trim);
}
