// Launch mechanics: exit status, the status pipe, fds, environment, PID namespace, pdeathsig.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "sandbox/explain.hpp"
#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"
#include "sandbox_test_util.hpp"

namespace fs = std::filesystem;
using namespace sandbox_test;

namespace {

bool readable_within(int fd, int ms) {
  struct pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

// Runs `body` in a forked process (for what a test must not do to the test runner: drop its ids,
// close its standard fds, make itself non-dumpable) and returns its exit code: body's result, 20
// for an exception (named on stderr under `what`), or minus the signal that killed it.
int in_forked_tester(const char* what, const std::function<int()>& body) {
  const pid_t tester = ::fork();
  REQUIRE(tester >= 0);
  if (tester == 0) {
    try {
      ::_exit(body());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", what, e.what());
    }
    ::_exit(20);
  }
  int status;
  REQUIRE(::waitpid(tester, &status, 0) == tester);
  return exit_code(status);
}

}  // namespace

TEST_CASE("a sandboxed program runs and its exit status comes back") {
  TempDir ws;
  auto policy = explore_policy();
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"true"})).status) == 0);
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"no-such-action"})).status) == 120);
}

TEST_CASE("a nonexistent executable is a clear error and nothing runs") {
  TempDir ws;
  auto req = request_for(ws.path, {});
  req.executable = "/nonexistent/program";
  auto plan = sandbox::prepare(explore_policy(), req);
  try {
    sandbox::launch(*plan);
    FAIL("launch succeeded");
  } catch (const sandbox::SandboxError& e) {
    CHECK(std::string(e.what()) ==
          "sandbox step 'execve' failed for '/nonexistent/program': No such file or directory");
  }
  // The failed child was reaped by launch(): no child of ours is left.
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
}

TEST_CASE("a failing sandbox step is reported by name, and the target never runs") {
  TempDir ws;
  auto req = request_for(ws.path, {"true"});
  auto plan = sandbox::prepare(explore_policy(), req);
  fs::remove(ws.path);  // binding the workspace into the child's root now fails
  try {
    sandbox::launch(*plan);
    FAIL("launch succeeded");
  } catch (const sandbox::SandboxError& e) {
    // As root the parent clones the roots (and names the path); otherwise the child does.
    CHECK(std::string(e.what()) ==
          (::geteuid() == 0
               ? "new root: cloning the mount tree at '" + ws.path.string() + "': No such file or directory"
               : std::string("sandbox step 'clone_root_path' failed: No such file or "
                             "directory")));
  }
  fs::create_directory(ws.path);
}

TEST_CASE("invalid launch requests are refused before fork") {
  TempDir ws;
  auto policy = explore_policy();
  auto req = request_for(ws.path, {"true"});
  req.executable = "relative/probe";
  CHECK_THROWS_WITH_AS(sandbox::prepare(policy, req),
                       "launch request: executable must be an absolute path (got 'relative/probe')",
                       sandbox::SandboxError);
  req = request_for(ws.path / "missing", {"true"});
  CHECK_THROWS_AS(sandbox::prepare(policy, req), sandbox::SandboxError);
}

TEST_CASE("no fd but 0, 1 and 2 reaches the child") {
  TempDir ws;
  int leak = ::open("/dev/null", O_RDONLY);  // not close-on-exec: a plain fork/exec inherits it
  REQUIRE(leak >= 3);
  auto plain = run_plain({"fds"});
  CHECK(exit_code(plain.status) == 1);
  CHECK(plain.out.find(std::to_string(leak) + "\n") != std::string::npos);
  auto boxed = run_sandboxed(explore_policy(), request_for(ws.path, {"fds"}));
  CHECK(exit_code(boxed.status) == 0);
  CHECK(boxed.out.empty());
  ::close(leak);
}

TEST_CASE("the environment holds the allowlist, the policy's values and the request's, nothing else") {
  TempDir ws;
  ::setenv("SANDBOX_TEST_SECRET", "hunter2", 1);
  ::setenv("LANG", "C.UTF-8", 1);
  auto plain = run_plain({"env"});
  CHECK(plain.out.find("SANDBOX_TEST_SECRET=hunter2") != std::string::npos);
  auto req = request_for(ws.path, {"env"});
  req.extra_env = {"SUBAGENT_PROTOCOL=1"};
  auto boxed = run_sandboxed(explore_policy(), req);
  CHECK(exit_code(boxed.status) == 0);
  std::string expected = "HOME=/home/subagent\nLANG=C.UTF-8\nPATH=/usr/bin:/bin\nSUBAGENT_PROTOCOL=1\n";
  CHECK(boxed.out == expected);
  ::unsetenv("SANDBOX_TEST_SECRET");
}

TEST_CASE("the target is PID 1 of its own PID namespace") {
  TempDir ws;
  CHECK(exit_code(run_plain({"pid"}).status) == 1);
  CHECK(exit_code(run_sandboxed(explore_policy(), request_for(ws.path, {"pid"})).status) == 0);
}

TEST_CASE("a double-forked setsid grandchild dies with the child") {
  TempDir ws;
  // Twin: without the sandbox the grandchild outlives the probe and holds the pipe open.
  {
    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(out[1], 1);
      ::execl(kProbe.c_str(), kProbe.c_str(), "grandchild", nullptr);
      ::_exit(127);
    }
    ::close(out[1]);
    int status;
    ::waitpid(pid, &status, 0);
    char buf[32] = {};
    REQUIRE(::read(out[0], buf, sizeof buf - 1) > 0);
    pid_t grandchild = std::atoi(buf);
    CHECK(!readable_within(out[0], 300));  // no EOF: the grandchild still holds stdout
    CHECK(::kill(grandchild, SIGKILL) == 0);
    ::close(out[0]);
  }
  {
    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    auto req = request_for(ws.path, {"grandchild"});
    req.stdout_fd = out[1];
    auto policy = explore_policy();
    policy.syscall_groups.push_back("process");  // explore itself refuses fork (EPERM)
    auto plan = sandbox::prepare(policy, req);
    auto child = sandbox::launch(*plan);
    ::close(out[1]);
    int status;
    REQUIRE(::waitpid(child.pid, &status, 0) == child.pid);
    CHECK(exit_code(status) == 0);
    drain(out[0]);  // returns at EOF: every holder of the pipe is dead
    CHECK(readable_within(out[0], 0));
    ::close(out[0]);
    ::close(child.pidfd);
    sandbox::release(child);
  }
}

TEST_CASE("the child dies with the thread that launched it (PR_SET_PDEATHSIG)") {
  // With a PID namespace the child is its init, whose death ends the namespace; without one the
  // parent-death signal is all that ends it. Twin: a plain fork and exec outlives the launcher.
  TempDir ws;
  enum class Launch { plain, sandboxed, no_pid_namespace };
  auto run_in_intermediate = [&](Launch how) {
    int out[2], go[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
    pid_t mid = ::fork();
    if (mid == 0) {
      char byte;
      if (how != Launch::plain) {
        try {  // never back into the test runner from this fork
          auto req = request_for(ws.path, {"sleep", "30"});
          req.stdout_fd = out[1];
          auto policy = explore_policy();
          if (how == Launch::no_pid_namespace) {
            policy = without_new_root(policy);
            policy.namespaces = {"user", "net", "ipc", "uts"};
          }
          auto plan = sandbox::prepare(policy, req);
          sandbox::launch(*plan);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "the launch in the intermediate: %s\n", e.what());
          ::_exit(30);
        }
      } else if (::fork() == 0) {
        ::dup2(out[1], 1);
        ::execl(kProbe.c_str(), kProbe.c_str(), "sleep", "30", nullptr);
        ::_exit(127);
      }
      ::close(go[1]);
      ::_exit(::read(go[0], &byte, 1) == 1 ? 0 : 1);  // exit when told to
    }
    ::close(out[1]);
    ::close(go[0]);
    char buf[32] = {};
    REQUIRE(::read(out[0], buf, sizeof buf - 1) > 0);  // the sleeper is up
    REQUIRE(::write(go[1], "x", 1) == 1);
    ::close(go[1]);
    int status;
    ::waitpid(mid, &status, 0);
    bool eof = readable_within(out[0], 2000) && drain(out[0]).empty();
    if (how == Launch::plain) ::kill(std::atoi(buf), SIGKILL);
    ::close(out[0]);
    return eof;
  };
  CHECK(!run_in_intermediate(Launch::plain));
  CHECK(run_in_intermediate(Launch::sandboxed));
  CHECK(run_in_intermediate(Launch::no_pid_namespace));
}

TEST_CASE("layers() reports every layer, and kernel_support() what the kernel offers") {
  TempDir ws;
  auto plan = sandbox::prepare(explore_policy(), request_for(ws.path, {"true"}));
  auto layers = sandbox::layers(*plan);
  REQUIRE(layers.size() == 22);  // sandbox::kLayers
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& layer = layers[i];
    INFO(layer.name << ": " << layer.detail);
    CHECK(!layer.detail.empty());
    CHECK(layer.layer == sandbox::kLayers[i]);
    CHECK(layer.name == sandbox::to_string(layer.layer));
    CHECK(sandbox::parse_layer(layer.name) == layer.layer);
  }
  CHECK(!sandbox::parse_layer("landlocks"));
  CHECK(!sandbox::parse_layer(""));
  auto support = sandbox::kernel_support();
  REQUIRE(support.size() == 22);
  CHECK(support[7].name == "landlock");
  CHECK(support[7].applied);
}

TEST_CASE("a required layer the plan lacks refuses the launch with the layer's name") {
  TempDir ws;
  auto policy = without_new_root(explore_policy());
  policy.namespaces.clear();
  policy.required.push_back(sandbox::Layer::kPidNamespace);
  CHECK_THROWS_WITH_AS(sandbox::prepare(policy, request_for(ws.path, {"true"})),
                       "policy explore.json: requires the 'pid_namespace' layer, which is not available: not "
                       "requested by the policy",
                       sandbox::SandboxError);
}

TEST_CASE("every capability is dropped, no_new_privs is set and the child leads a new session") {
  TempDir ws;
  auto plain = run_plain({"privileges"});
  REQUIRE(exit_code(plain.status) == 0);
  // The twin: this test runs as root with capabilities, in our session.
  if (::geteuid() == 0) CHECK(plain.out.find("effective 0\n") == std::string::npos);
  CHECK(plain.out.find("no_new_privs 0\n") != std::string::npos);
  CHECK(plain.out.find("session_leader 0\n") != std::string::npos);
  auto boxed = run_sandboxed(explore_policy(), request_for(ws.path, {"privileges"}));
  REQUIRE(exit_code(boxed.status) == 0);
  CHECK(boxed.out ==
        "effective 0\npermitted 0\ninheritable 0\nbounding 0\nambient 0\nno_new_privs 1\n"
        "session_leader 1\nsecurebits ef\n");
}

TEST_CASE("network \"loopback\" gives a private network namespace with lo up") {
  TempDir ws;
  auto policy = explore_policy();
  policy.network = sandbox::Network::loopback;
  auto plan = sandbox::prepare(policy, request_for(ws.path, {"true"}));
  CHECK(sandbox::layers(*plan)[12].detail == "no interfaces but loopback (up)");
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"socket_inet"})).status) == 0);
}

namespace {

std::string cmdline_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// start(), then finish() each time the status fd is readable, as an event loop would.
sandbox::Child start_and_finish(const sandbox::Plan& plan) {
  sandbox::PendingLaunch pending = sandbox::start(plan);
  REQUIRE(pending.pid() > 0);
  REQUIRE(pending.pidfd() >= 0);
  REQUIRE(pending.status_fd() >= 0);
  for (;;) {
    REQUIRE(readable_within(pending.status_fd(), 10000));
    if (std::optional<sandbox::Child> child = pending.finish()) {
      CHECK(pending.pid() == -1);
      CHECK(pending.status_fd() == -1);
      return std::move(*child);
    }
  }
}

}  // namespace

TEST_CASE("start() and finish() launch what launch() launches") {
  TempDir ws;
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  auto req = request_for(ws.path, {"env"});
  const std::string blocking = run_sandboxed(explore_policy(), req).out;  // through launch()
  CHECK(blocking.find("PATH=/usr/bin:/bin\n") != std::string::npos);
  req.stdout_fd = out[1];
  auto plan = sandbox::prepare(explore_policy(), req);
  sandbox::Child child = start_and_finish(*plan);
  ::close(out[1]);
  CHECK(drain(out[0]) == blocking);
  ::close(out[0]);
  int status;
  REQUIRE(::waitpid(child.pid, &status, 0) == child.pid);
  CHECK(exit_code(status) == 0);
  ::close(child.pidfd);
  sandbox::release(child);
}

TEST_CASE("an exec failure comes out of finish() with launch()'s text, and the child is reaped") {
  TempDir ws;
  auto req = request_for(ws.path, {});
  req.executable = "/nonexistent/program";
  auto plan = sandbox::prepare(explore_policy(), req);
  std::string blocking, split;
  try {
    sandbox::launch(*plan);
    FAIL("launch succeeded");
  } catch (const sandbox::ExecError& e) {
    blocking = e.what();
    CHECK(e.error == ENOENT);
  }
  {
    sandbox::PendingLaunch pending = sandbox::start(*plan);
    try {
      // A non-root supervisor's launch takes a turn for the id maps first (finish() returns nullopt).
      for (int turn = 0; turn < 2; ++turn) {
        REQUIRE(readable_within(pending.status_fd(), 10000));
        if (pending.finish()) {
          FAIL("start and finish succeeded");
          break;
        }
      }
      FAIL("finish() neither exec'd nor failed in two turns");
    } catch (const sandbox::ExecError& e) {
      split = e.what();
      CHECK(e.error == ENOENT);
    }
    CHECK(pending.pid() == -1);  // over: the child is gone, the fds closed
    CHECK(pending.status_fd() == -1);
    CHECK_THROWS_AS((void)pending.finish(), sandbox::SandboxError);
  }
  CHECK(blocking == "sandbox step 'execve' failed for '/nonexistent/program': No such file or directory");
  CHECK(split == blocking);
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);  // both children reaped
  CHECK(errno == ECHILD);
}

TEST_CASE("a PendingLaunch destroyed before finish() kills and reaps its child") {
  TempDir ws;
  auto plan = sandbox::prepare(explore_policy(), request_for(ws.path, {"sleep", "30"}));
  pid_t pid;
  {
    sandbox::PendingLaunch pending = sandbox::start(*plan);
    pid = pending.pid();
    REQUIRE(pid > 0);
    CHECK(::kill(pid, 0) == 0);  // twin: alive while the launch is pending
  }
  CHECK(::kill(pid, 0) == -1);
  CHECK(errno == ESRCH);  // not even a zombie: reaped
}

TEST_CASE("start() returns while the child still waits for the parent; finish() lets it exec") {
  // As a non-root supervisor with a user namespace, the child reports that it is ready for its id
  // maps and waits for them: it cannot exec before the first finish() writes them and releases it.
  // Run as uid 65534 in a forked process (its exit code is the verdict).
  // (scripts/unprivileged.sh runs this file as uid 65534 already: then there is nothing to drop.)
  TempDir ws;
  const bool root = ::geteuid() == 0;
  if (root) REQUIRE(::chown(ws.path.c_str(), 65534, 65534) == 0);
  CHECK(in_forked_tester("as uid 65534", [&] {
          if (root && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) return 10;
          // No cgroups: this process inherited the root parent's cached cgroup roots, which uid 65534
          // may not write.
          auto policy = explore_policy();
          policy.tree_limits.memory_mb = 0;
          policy.tree_limits.cpu_percent = 0;
          auto plan = sandbox::prepare(policy, request_for(ws.path, {"sleep", "30"}));
          sandbox::PendingLaunch pending = sandbox::start(*plan);
          const pid_t pid = pending.pid();
          if (pid <= 0 || pending.status_fd() < 0) return 11;
          // Still a copy of this process, not the probe (it waits for its id maps).
          if (cmdline_of(pid) != cmdline_of(::getpid())) return 12;
          if (!readable_within(pending.status_fd(), 10000)) return 13;
          if (pending.finish()) return 14;  // the first turn writes the maps and releases it
          if (!readable_within(pending.status_fd(), 10000)) return 15;
          std::optional<sandbox::Child> child = pending.finish();
          if (!child || child->pid != pid) return 16;
          // Twin of the check above: now it is the probe.
          if (cmdline_of(pid).find("sandbox_probe") == std::string::npos) return 17;
          ::kill(pid, SIGKILL);
          int status;
          if (::waitpid(pid, &status, 0) != pid) return 18;
          return 0;
        }) == 0);
}

namespace {

std::size_t mappings_of_this_process() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

}  // namespace

// The supervisor (non-dumpable since protect_self) clones as root with CLONE_VM on x86_64 outside
// sanitizer builds: until execve the child runs in this process's memory, on a stack of its own
// (launch.cpp). Run here in a forked process made non-dumpable the same way, its exit code the
// verdict. Elsewhere the clone is a plain fork and these hold trivially.
TEST_CASE("a child cloned into the launcher's memory writes nothing of the launcher's, and its stack goes") {
  TempDir ws;
  CHECK(in_forked_tester("cloned into the launcher's memory", [&] {
          if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return 10;
          auto plan = sandbox::prepare(explore_policy(), request_for(ws.path, {"true"}));
          // The child's set-up ends with system calls that fail by design (as root, reading the
          // bounding set past the last capability: EINVAL). libc's wrappers would store that errno in
          // the thread-local storage of the thread that cloned, this one.
          sandbox::PendingLaunch pending = sandbox::start(*plan);
          if (pending.pid() <= 0) return 11;
          errno = ENOTTY;  // the child is released and still setting up (it has not exec'd: no EOF yet)
          std::optional<sandbox::Child> child;
          while (!child) {
            struct pollfd p = {pending.status_fd(), POLLIN, 0};
            if (::poll(&p, 1, 10000) != 1) return 12;
            child = pending.finish();
          }
          if (errno != ENOTTY) return 13;
          int status;
          if (::waitpid(child->pid, &status, 0) != child->pid || exit_code(status) != 0) return 14;
          ::close(child->pidfd);
          sandbox::release(*child);

          // Each launch's stack (and its guard page) is given back once the child has exec'd or is
          // reaped, whichever way the launch ends.
          const std::size_t before = mappings_of_this_process();
          for (int i = 0; i < 30; ++i) {
            if (exit_code(run_sandboxed(explore_policy(), request_for(ws.path, {"true"})).status) != 0) return 15;
            sandbox::PendingLaunch abandoned = sandbox::start(*plan);  // destroyed unfinished: killed, reaped
          }
          auto bad = request_for(ws.path, {});
          bad.executable = "/nonexistent/program";
          auto bad_plan = sandbox::prepare(explore_policy(), bad);
          for (int i = 0; i < 30; ++i) {
            try {
              sandbox::launch(*bad_plan);
              return 16;
            } catch (const sandbox::ExecError&) {
            }
          }
#ifdef SUBAGENT_SANITIZER_BUILD
          (void)before;  // a plain fork there (no stacks), and the sanitizer's allocator maps as it likes
          return 0;
#else
    return mappings_of_this_process() < before + 10 ? 0 : 17;  // 90 launches: a leak adds 90 or more
#endif
        }) == 0);
}

TEST_CASE("a launch leaves the launcher as dumpable as it was") {
  // The identity layer's setresuid sets the dumpable flag of the child's memory to
  // fs.suid_dumpable: a child that shared a still-dumpable launcher's memory would clear its flag
  // (and that of everything it forks later). Twin: the supervisor's own launches, non-dumpable,
  // are the test above.
  TempDir ws;
  REQUIRE(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
  CHECK(exit_code(run_sandboxed(explore_policy(), request_for(ws.path, {"true"})).status) == 0);
  CHECK(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
}

TEST_CASE("a launcher whose standard fds are closed still hears of every step the child fails") {
  // The status pipe (and the Landlock ruleset) would take fd 0 or 1, which the child's stdio dup3 overwrites before
  // execve: the parent would see EOF ("exec'd") while the child still sets up, and a later step's failure (here
  // execve's) would be lost. Run in a forked process: it closes its own 0 and 1.
  TempDir ws;
  auto req = request_for(ws.path, {});
  req.executable = "/nonexistent/program";
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);  // the child's stdio: not 0, 1 or 2
  REQUIRE(null > 2);
  req.stdin_fd = req.stdout_fd = req.stderr_fd = null;
  const int verdict = in_forked_tester("with 0 and 1 closed", [&] {
    ::close(0);
    ::close(1);
    try {
      // Prepared here: the Landlock ruleset would take fd 0 (and be replaced by the child's stdin).
      auto plan = sandbox::prepare(explore_policy(), req);
      sandbox::PendingLaunch pending = sandbox::start(*plan);
      for (;;) {
        struct pollfd p = {pending.status_fd(), POLLIN, 0};
        if (::poll(&p, 1, 10000) != 1) return 11;
        if (pending.finish()) return 12;  // "exec'd": the execve step's failure went unheard
      }
    } catch (const sandbox::ExecError& e) {
      return std::string(e.what()).find("execve") != std::string::npos ? 0 : 13;
    }
  });
  ::close(null);
  CHECK(verdict == 0);
}
