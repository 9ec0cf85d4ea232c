// rlimits and the process cap: each limit holds a bomb that runs to completion without the sandbox.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sandbox/explain.hpp"
#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kProbe = SUBAGENT_TEST_PROGRAM_DIR "/sandbox_probe";

sandbox::Policy explore_policy() {
  std::ifstream in(SUBAGENT_SOURCE_DIR "/policies/explore.json");
  std::stringstream text;
  text << in.rdbuf();
  auto doc = nlohmann::json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  return sandbox::parse_policy(doc.at("sandbox"), "explore.json");
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "sandbox-test-XXXXXX").string();
    path = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Outcome {
  int status = -1;
  std::string out;
};

std::string drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

sandbox::LaunchRequest request_for(const fs::path& workspace, std::vector<std::string> args) {
  sandbox::LaunchRequest req;
  req.executable = kProbe;
  req.argv = {kProbe};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.workspace = workspace;
  req.child_dir = SUBAGENT_TEST_PROGRAM_DIR;
  return req;
}

Outcome run_sandboxed(const sandbox::Policy& policy, sandbox::LaunchRequest req) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  req.stdout_fd = out[1];
  auto plan = sandbox::prepare(policy, req);
  sandbox::Child child = sandbox::launch(*plan);
  ::close(out[1]);
  Outcome o;
  o.out = drain(out[0]);
  ::close(out[0]);
  REQUIRE(::waitpid(child.pid, &o.status, 0) == child.pid);
  ::close(child.pidfd);
  sandbox::release(child);
  return o;
}

Outcome run_plain(std::vector<std::string> args) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  args.insert(args.begin(), kProbe);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(kProbe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  Outcome o;
  o.out = drain(out[0]);
  ::close(out[0]);
  ::waitpid(pid, &o.status, 0);
  return o;
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status); }

}  // namespace

TEST_CASE("a fork bomb is held by the process cap, also as root") {
  TempDir ws;
  auto policy = explore_policy();
  policy.rlimits.processes = 16;
  CHECK(exit_code(run_plain({"forkbomb", "64"}).status) == 0);
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"forkbomb", "64"})).status) ==
        EAGAIN);
}

TEST_CASE("a memory bomb is held by the address-space limit") {
  TempDir ws;
  auto policy = explore_policy();
  policy.rlimits.address_space_mb = 256;
  CHECK(exit_code(run_plain({"membomb", "512"}).status) == 0);
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"membomb", "512"})).status) ==
        ENOMEM);
}

TEST_CASE("a CPU spin is killed at the CPU limit") {
  TempDir ws;
  auto policy = explore_policy();
  policy.rlimits.cpu_seconds = 1;
  CHECK(exit_code(run_plain({"spin", "1.5"}).status) == 0);
  // PID 1 of a namespace ignores the soft limit's SIGXCPU (no handler), so the hard limit's
  // SIGKILL, one second later, ends it; without a PID namespace SIGXCPU does.
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"spin", "3"})).status) == -SIGKILL);
  policy.namespaces = {"user", "net"};
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"spin", "3"})).status) == -SIGXCPU);
}

TEST_CASE("a file cannot grow past the file-size limit") {
  TempDir ws;
  auto policy = explore_policy();
  policy.write_paths = {"${workspace}"};
  policy.rlimits.file_size_mb = 0;
  CHECK(exit_code(run_plain({"write", (ws.path / "plain.txt").string()}).status) == 0);
  // SIGXFSZ, or EFBIG from write() when the target is PID 1 (which ignores SIGXFSZ).
  int rc = exit_code(
      run_sandboxed(policy, request_for(ws.path, {"write", (ws.path / "x").string()})).status);
  CHECK((rc == -SIGXFSZ || rc == EFBIG));
}

TEST_CASE("the process cap layer says how it is enforced") {
  TempDir ws;
  auto plan = sandbox::prepare(explore_policy(), request_for(ws.path, {"true"}));
  auto layers = sandbox::layers(*plan);
  REQUIRE(layers.back().name == "process_cap");
  INFO(layers.back().detail);
  CHECK(layers.back().applied);
}
