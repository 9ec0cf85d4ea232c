#include "sandbox/protect.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

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
  // Started with 0, 1 or 2 closed, the supervisor would hand that number to its next pipe, and a
  // write meant for stderr would land in it: /dev/null fills each gap (open takes the lowest).
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int null = ::open("/dev/null", O_RDWR);
    if (null < 0) fail("open(/dev/null) for a closed standard fd");
  }
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
