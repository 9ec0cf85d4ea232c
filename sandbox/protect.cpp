#include "sandbox/protect.hpp"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cstring>
#include <string>

#include "sandbox/launch.hpp"
#include "syscalls.hpp"

namespace sandbox {

void protect_self() {
  auto fail = [](const char* step) {
    int err = errno;
    throw SandboxError(std::string("protect_self: ") + step + " failed: " + std::strerror(err));
  };
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail("PR_SET_DUMPABLE");
  struct rlimit core = {0, 0};
  if (::setrlimit(RLIMIT_CORE, &core) != 0) fail("setrlimit(RLIMIT_CORE)");
  if (sys::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) fail("close_range(CLOSE_RANGE_CLOEXEC)");
  // An ignored SIGCHLD survives execve, and with it the kernel reaps our children itself: waitpid
  // would fail with ECHILD and every child's status would be lost.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  if (::sigaction(SIGCHLD, &dfl, nullptr) != 0) fail("sigaction(SIGCHLD, SIG_DFL)");
}

}  // namespace sandbox
