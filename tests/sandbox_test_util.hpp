// Helpers shared by the sandbox_* tests: the probe program, policies built in code, and running a
// command with or without the sandbox (a forked child, its exit status or signal, its output).
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"

namespace sandbox_test {
namespace fs = std::filesystem;

inline const std::string kProbe = SUBAGENT_TEST_PROGRAM_DIR "/sandbox_probe";

inline sandbox::Policy explore_policy() {
  std::ifstream in(SUBAGENT_SOURCE_DIR "/policies/explore.json");
  std::stringstream text;
  text << in.rdbuf();
  auto doc = nlohmann::json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  return sandbox::parse_policy(doc.at("sandbox"), "explore.json");
}

// The same policy without the mount namespace, so that Landlock alone decides what a path gives
// (with it, a path outside the policy does not exist in the child's root: ENOENT, not EACCES).
inline sandbox::Policy without_new_root(sandbox::Policy p) {
  std::erase(p.namespaces, "mount");
  std::erase(p.required, sandbox::Layer::kReadOnlyHost);
  std::erase(p.required, sandbox::Layer::kMountNamespace);
  return p;
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

inline std::string drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

inline sandbox::LaunchRequest request_for(const fs::path& workspace, std::vector<std::string> args) {
  sandbox::LaunchRequest req;
  req.executable = kProbe;
  req.argv = {kProbe};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.workspace = workspace;
  req.child_dir = SUBAGENT_TEST_PROGRAM_DIR;
  return req;
}

inline Outcome run_sandboxed(const sandbox::Policy& policy, sandbox::LaunchRequest req) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  req.stdout_fd = out[1];
  sandbox::Child child = sandbox::prepare_and_launch(policy, req).child;
  ::close(out[1]);
  Outcome o;
  o.out = drain(out[0]);
  ::close(out[0]);
  REQUIRE(::waitpid(child.pid, &o.status, 0) == child.pid);
  ::close(child.pidfd);
  sandbox::release(child);
  return o;
}

inline Outcome run_plain(std::vector<std::string> args) {
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

inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status); }

}  // namespace sandbox_test
