// The seccomp layer: every baseline denial, each next to its twin showing the same action works
// without the sandbox. Exit codes are the probe's errno (see tests/programs/sandbox_probe.cpp).
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/explain.hpp"
#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"
#include "sandbox_test_util.hpp"

namespace fs = std::filesystem;
using namespace sandbox_test;

namespace {

struct Case {
  const char* action;
  int sandboxed;  // probe exit code (errno) or -signal
  int plain;
};

}  // namespace

TEST_CASE("each baseline seccomp denial, and the same action without the sandbox") {
  TempDir ws;
  auto policy = explore_policy();
  // TIOCSTI needs a pty; grant it in Landlock so that the EPERM can only come from seccomp. The
  // whole /dev is bound, so that /dev/ptmx finds the /dev/pts instance beside it as on the host.
  policy.read_paths.push_back("/dev");
  policy.write_paths.push_back("/dev/ptmx");
  policy.write_paths.push_back("/dev/pts");
  const Case cases[] = {
      {"ptrace", EPERM, 0},
      {"process_vm_readv", EPERM, 0},
      {"io_uring_setup", EPERM, 0},
      {"unshare", EPERM, 0},
      {"mount", EPERM, 0},
      {"clone_newuser", EPERM, 0},
      {"clone_newnet", EPERM, 0},
      {"clone3", ENOSYS, 0},
      {"bpf", EPERM, 0},
      {"keyctl", EPERM, 0},
      {"tiocsti", EPERM, 0},
      {"tiocsti_high", EPERM, 0},  // request with garbage in the high 32 bits
      {"socket_inet", EAFNOSUPPORT, 0},
      {"socket_inet6_udp", EAFNOSUPPORT, 0},
      {"socket_netlink", EAFNOSUPPORT, 0},
      {"socketpair_inet", EAFNOSUPPORT, EOPNOTSUPP},
      // AF_UNIX sockets could connect to path-bound listeners, which Landlock does not mediate.
      {"socket_unix", EAFNOSUPPORT, 0},
      {"socketpair_unix_dgram", EAFNOSUPPORT, 0},
      // Legitimate work still succeeds.
      {"socketpair_unix", 0, 0},
      {"socketpair_unix_seqpacket", 0, 0},
      {"clone_plain", 0, 0},
      {"true", 0, 0},
  };
  // Without the sandbox these need privilege (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF; TIOCSTI
  // on another terminal needs CAP_SYS_ADMIN since Linux 6.2): as a user only the sandboxed half runs.
  const std::vector<std::string> twin_needs_root = {"unshare", "mount", "clone_newnet", "bpf",
                                                    "tiocsti", "tiocsti_high"};
  for (const Case& c : cases) {
    INFO("action: " << std::string(c.action));
    if (::geteuid() != 0 && std::find(twin_needs_root.begin(), twin_needs_root.end(),
                                      std::string(c.action)) != twin_needs_root.end())
      MESSAGE("not root: the unsandboxed twin of " << std::string(c.action) << " needs root");
    else
      CHECK(exit_code(run_plain({c.action}).status) == c.plain);
    CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {c.action})).status) == c.sandboxed);
  }
}

TEST_CASE("an x32 syscall number kills the process") {
  TempDir ws;
  // Without the sandbox the process survives (ENOSYS when the kernel has no x32 ABI).
  int plain = exit_code(run_plain({"x32"}).status);
  CHECK((plain == 0 || plain == ENOSYS));
  CHECK(exit_code(run_sandboxed(explore_policy(), request_for(ws.path, {"x32"})).status) ==
        -SIGSYS);
}

TEST_CASE("a policy's extra denials are added to the baseline") {
  TempDir ws;
  auto policy = explore_policy();
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"socketpair_unix"})).status) == 0);
  policy.extra_denied_syscalls = {"socketpair"};
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"socketpair_unix"})).status) ==
        EPERM);
}

TEST_CASE("syscall_table lists every decision of the filter") {
  auto table = sandbox::syscall_table(explore_policy());
  auto find = [&](const std::string& name, const std::string& condition) {
    for (const auto& d : table)
      if (d.syscall == name && d.condition == condition) return d.action;
    return std::string("missing");
  };
  CHECK(find("ptrace", "") == "errno EPERM");
  CHECK(find("clone3", "") == "errno ENOSYS");
  CHECK(find("clone", "flags & CLONE_NEWUSER") == "errno EPERM");
  CHECK(find("ioctl", "request == TIOCSTI") == "errno EPERM");
  CHECK(find("socket", "") == "errno EAFNOSUPPORT");
  CHECK(find("socketpair", "domain != AF_UNIX") == "errno EAFNOSUPPORT");
  CHECK(find("socketpair", "(type & SOCK_TYPE_MASK) == SOCK_DGRAM") == "errno EAFNOSUPPORT");
  auto host = explore_policy();
  host.network = "host";
  host.namespaces = {"user", "pid"};
  for (const auto& d : sandbox::syscall_table(host)) CHECK(d.syscall != "socket");
}
