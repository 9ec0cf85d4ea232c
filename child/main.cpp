// subagent-child: the reference child agent. Speaks protocol v1 on stdin/stdout; see protocol/README.md.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "child/agent.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::puts(
        "usage: subagent-child\n"
        "The reference child agent of subagent-supervisor. It is started by the supervisor inside a\n"
        "sandbox and speaks the JSON-lines protocol v1 (protocol/README.md) on stdin and stdout.");
    return 0;
  }
  return child::run_agent(STDIN_FILENO, STDOUT_FILENO);
}
