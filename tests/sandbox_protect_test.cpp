// protect_self: run in a forked child (it is irreversible), assert through the exit status.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/protect.hpp"

namespace {

// 0 when the process is dumpable-off, core-less and fd `fd` is close-on-exec, else a bit mask.
int check(int fd) {
  int bad = 0;
  if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) bad |= 1;
  struct rlimit core;
  if (::getrlimit(RLIMIT_CORE, &core) != 0 || core.rlim_cur != 0 || core.rlim_max != 0) bad |= 2;
  if (!(::fcntl(fd, F_GETFD) & FD_CLOEXEC)) bad |= 4;
  return bad;
}

int in_child(bool protect) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open("/dev/null", O_RDONLY);  // inherited, not close-on-exec
    if (protect) sandbox::protect_self();
    ::_exit(check(fd));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

}  // namespace

TEST_CASE("protect_self makes the process non-dumpable, core-less and its fds close-on-exec") {
  int before = in_child(false);
  CHECK((before & 1) == 1);  // the twin: a plain process is dumpable
  CHECK((before & 4) == 4);
  CHECK(in_child(true) == 0);
}
