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

TEST_CASE("protect_self opens /dev/null on a closed standard fd, so that no pipe takes its number") {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(0);
    ::close(2);
    if (::fcntl(0, F_GETFD) >= 0) ::_exit(1);  // the twin: closed before
    sandbox::protect_self();
    int p[2];
    if (::pipe(p) != 0) ::_exit(2);
    ::_exit(::fcntl(0, F_GETFD) >= 0 && ::fcntl(2, F_GETFD) >= 0 && p[0] > 2 && p[1] > 2 ? 0 : 3);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
