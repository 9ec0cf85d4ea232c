// The Landlock layer: filesystem rules and scopes, each denial next to its twin without the
// sandbox.
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
#include "sandbox_test_util.hpp"

namespace fs = std::filesystem;
using namespace sandbox_test;

namespace {

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("reading outside the read roots is denied, also through a symlink") {
  TempDir ws, outside;
  write_file(ws.path / "inside.txt", "ok");
  write_file(outside.path / "secret.txt", "secret");
  fs::create_symlink(outside.path / "secret.txt", ws.path / "link.txt");
  auto policy = without_new_root(explore_policy());
  for (const char* name : {"inside.txt", "link.txt"})
    CHECK(exit_code(run_plain({"read", (ws.path / name).string()}).status) == 0);
  CHECK(exit_code(run_plain({"read", (outside.path / "secret.txt").string()}).status) == 0);

  auto boxed = [&](const fs::path& p) {
    return exit_code(run_sandboxed(policy, request_for(ws.path, {"read", p.string()})).status);
  };
  CHECK(boxed(ws.path / "inside.txt") == 0);
  CHECK(boxed(outside.path / "secret.txt") == EACCES);
  CHECK(boxed(ws.path / "link.txt") == EACCES);
  CHECK(boxed("/etc/passwd") == EACCES);
  CHECK(boxed("/proc/1/environ") == EACCES);
}

TEST_CASE("a hard link to a file outside the roots cannot be made") {
  TempDir ws, outside;
  write_file(outside.path / "secret.txt", "secret");
  auto policy = without_new_root(explore_policy());
  policy.write_paths = {"${workspace}"};
  policy.syscall_groups.push_back("filesystem_write");  // so that only Landlock can refuse
  CHECK(exit_code(run_plain({"link", (outside.path / "secret.txt").string(), (ws.path / "plain-hard.txt").string()})
                      .status) == 0);
  int rc = exit_code(run_sandboxed(policy, request_for(ws.path, {"link", (outside.path / "secret.txt").string(),
                                                                 (ws.path / "hard.txt").string()}))
                         .status);
  CHECK((rc == EXDEV || rc == EACCES));
  CHECK(!fs::exists(ws.path / "hard.txt"));
}

TEST_CASE("writing outside the write roots is denied; inside them it works") {
  TempDir ws, outside;
  auto read_only = without_new_root(explore_policy());
  auto writer = without_new_root(explore_policy());
  writer.write_paths = {"${workspace}"};
  writer.rlimits.file_size_mb = 1;
  CHECK(exit_code(run_plain({"write", (outside.path / "new.txt").string()}).status) == 0);
  CHECK(exit_code(run_plain({"write", (ws.path / "plain.txt").string()}).status) == 0);

  auto boxed = [&](const sandbox::Policy& p, const fs::path& target) {
    return exit_code(run_sandboxed(p, request_for(ws.path, {"write", target.string()})).status);
  };
  CHECK(boxed(read_only, ws.path / "a.txt") == EACCES);
  CHECK(boxed(writer, ws.path / "b.txt") == 0);
  CHECK(fs::exists(ws.path / "b.txt"));
  CHECK(boxed(writer, outside.path / "c.txt") == EACCES);
  CHECK(!fs::exists(outside.path / "c.txt"));
}

TEST_CASE("a program outside the execute roots cannot be executed") {
  TempDir ws;
  fs::copy_file(kProbe, ws.path / "probe-copy");
  fs::permissions(ws.path / "probe-copy", fs::perms::owner_all);
  auto plain = run_plain({"true"});
  CHECK(exit_code(plain.status) == 0);
  auto req = request_for(ws.path, {"true"});
  req.executable = (ws.path / "probe-copy").string();
  auto plan = sandbox::prepare(without_new_root(explore_policy()), req);
  CHECK_THROWS_WITH_AS(sandbox::launch(*plan),
                       ("sandbox step 'execve' failed for '" + req.executable + "': Permission denied ('" +
                        req.executable + "' is not under any sandbox.filesystem.execute path of the policy)")
                           .c_str(),
                       sandbox::SandboxError);
}

TEST_CASE("signals to processes outside the sandbox are scoped away (Landlock ABI 6)") {
  if (sandbox::kernel_support()[8].applied == false) return;  // landlock_scopes
  TempDir ws;
  auto policy = without_new_root(explore_policy());
  policy.namespaces = {"user", "net"};  // same PID namespace, so only Landlock can refuse
  const std::string me = std::to_string(::getpid());
  CHECK(exit_code(run_plain({"kill", me}).status) == 0);
  CHECK(exit_code(run_sandboxed(policy, request_for(ws.path, {"kill", me})).status) == EPERM);
}

TEST_CASE("protected paths inside a write root are read-only; the rest of the root is writable") {
  TempDir ws;
  fs::create_directories(ws.path / ".git" / "hooks");
  write_file(ws.path / ".git" / "config", "[core]\n");
  auto policy = explore_policy();  // protected paths need the mount namespace
  policy.write_paths = {"${workspace}"};
  policy.protected_paths = {".git"};
  policy.rlimits.file_size_mb = 1;
  const fs::path hook = ws.path / ".git" / "hooks" / "pre-commit";
  CHECK(exit_code(run_plain({"write", (ws.path / ".git" / "plain").string()}).status) == 0);
  auto boxed = [&](const fs::path& target) {
    return exit_code(run_sandboxed(policy, request_for(ws.path, {"write", target.string()})).status);
  };
  CHECK(boxed(hook) == EROFS);
  CHECK(boxed(ws.path / ".git" / "config") == EROFS);
  CHECK(!fs::exists(hook));
  CHECK(boxed(ws.path / "new-top-level.txt") == 0);
  fs::create_directory(ws.path / "src");
  CHECK(boxed(ws.path / "src" / "main.cpp") == 0);
  // The read-only bind mount stays inside the child's mount namespace.
  CHECK(exit_code(run_plain({"write", hook.string()}).status) == 0);

  auto plan = sandbox::prepare(policy, request_for(ws.path, {"true"}));
  CHECK(sandbox::layers(*plan)[15].detail.find("read-only: " + (ws.path / ".git").string()) != std::string::npos);
  policy.namespaces = {"user", "pid"};
  CHECK_THROWS_AS(sandbox::prepare(policy, request_for(ws.path, {"true"})), sandbox::SandboxError);
}
