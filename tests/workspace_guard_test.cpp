// Workspace sanity (issue 13 part 5): "/", the home directory itself and system directories are
// refused as a workspace or a write root unless --allow-unsafe-workspace says so, in every front end
// (sandbox, run, serve, mcp) and in sandbox::prepare(). Each refusal has a twin: a normal temporary
// workspace works, and the flag allows the refused one.
#include "sandbox/workspace_guard.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "sandbox_test_util.hpp"
#include "serve_driver.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kUsage = 64;
const std::string kCli = test::bin("subagent-supervisor").string();

bool refused_for(const test::RunResult& r, const std::string& path) {
  return r.err.find("workspace '" + path + "'") != std::string::npos && r.err.find("is refused") != std::string::npos &&
         r.err.find("--allow-unsafe-workspace") != std::string::npos;
}

// As a non-root user /root cannot even be searched: that also means nothing was created there.
bool exists_quietly(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

std::string home() {
  const char* h = std::getenv("HOME");
  return h && *h == '/' ? fs::weakly_canonical(h).string() : std::string();
}

}  // namespace

TEST_CASE("the unsafe directories, and the ordinary ones beside them") {
  using sandbox::unsafe_workspace_reason;
  for (const char* p : {"/",          "/etc",     "/etc/ssl",      "/usr",           "/usr/lib/x86_64-linux-gnu",
                        "/bin",       "/sbin",    "/lib",          "/lib64",         "/boot",
                        "/proc",      "/proc/1",  "/sys",          "/sys/fs/cgroup", "/dev",
                        "/var",       "/var/lib", "/var/lib/dpkg", "/var/log",       "/run",
                        "/home",      "/root",    "/tmp",          "/tmp/",          "/var/tmp",
                        "/usr/local", "/opt",     "/srv"}) {
    INFO(p);
    CHECK_FALSE(unsafe_workspace_reason(p).empty());
  }
  for (const char* p : {"/tmp/project", "/var/tmp/build", "/opt/src/app", "/srv/repo", "/home/someone-else/repo",
                        "/work/wt/x", "/run/user/1000/sub", "/dev/pts", "/dev/shm"}) {
    INFO(p);
    CHECK(unsafe_workspace_reason(p).empty());
  }
  if (!home().empty() && home() != "/") {
    CHECK(unsafe_workspace_reason(home()).find("home directory") != std::string::npos);
    CHECK(unsafe_workspace_reason(fs::path(home()).parent_path()) != "");
    CHECK(unsafe_workspace_reason(fs::path(home()) / "project").empty());
  }
  CHECK_THROWS_WITH_AS(sandbox::check_workspace("/etc", "workspace"),
                       doctest::Contains("workspace '/etc' is refused: it is a system directory (/etc)"),
                       sandbox::UnsafeWorkspaceError);
}

TEST_CASE("sandbox: --workspace / is refused and nothing is created; a temp workspace works; the flag allows it") {
  test::TempDir ws;
  const std::string marker = "/root/subagent-unsafe-" + std::to_string(::getpid());
  auto r = test::run({kCli, "sandbox", "--preset", "worker", "--workspace", "/", "--", "/usr/bin/touch", marker});
  INFO(r.err);
  CHECK(r.code == kUsage);
  CHECK(refused_for(r, "/"));
  CHECK_FALSE(exists_quietly(marker));

  // A symlink to / is resolved first.
  fs::create_symlink("/", ws.path() / "to-root");
  r = test::run({kCli, "sandbox", "--preset", "worker", "--workspace", (ws.path() / "to-root").string(), "--",
                 "/usr/bin/touch", marker});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("(resolved: '/')") != std::string::npos);
  CHECK_FALSE(exists_quietly(marker));

  // System directories and the home directory itself, for a read-only preset too.
  for (const std::string& dir : {std::string("/etc"), std::string("/usr/lib"), std::string("/var/lib"), home()}) {
    if (dir.empty() || !fs::is_directory(dir)) continue;
    INFO(dir);
    r = test::run({kCli, "sandbox", "--preset", "explore", "--workspace", dir, "--", "/bin/true"});
    CHECK(r.code == kUsage);
    CHECK(refused_for(r, dir));
  }

  // Twin: an ordinary temporary workspace works.
  r = test::run({kCli, "sandbox", "--preset", "worker", "--workspace", ws.path().string(), "--", "/usr/bin/touch",
                 (ws.path() / "made").string()});
  CHECK(r.code == 0);
  CHECK(fs::exists(ws.path() / "made"));

  // The flag allows a refused directory (/tmp itself here: the file is made there). "/" stays
  // impossible even with the flag: the child's read-only root cannot hold the whole host tree.
  const std::string flagged = "/tmp/subagent-guard-test-" + std::to_string(::getpid());
  r = test::run({kCli, "sandbox", "--preset", "worker", "--workspace", "/tmp", "--allow-unsafe-workspace", "--",
                 "/usr/bin/touch", flagged});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(fs::exists(flagged));
  fs::remove(flagged);
  r = test::run(
      {kCli, "sandbox", "--preset", "worker", "--workspace", "/", "--allow-unsafe-workspace", "--", "/usr/bin/true"});
  CHECK(r.code != 0);
  CHECK(r.err.find("whole host tree") != std::string::npos);
}

TEST_CASE("prepare() refuses an unsafe workspace or write root unless the request allows it") {
  sandbox_test::TempDir ws;
  auto policy = sandbox_test::explore_policy();
  auto req = sandbox_test::request_for("/", {"true"});
  CHECK_THROWS_WITH_AS(sandbox::prepare(policy, req), doctest::Contains("launch request: workspace '/' is refused"),
                       sandbox::UnsafeWorkspaceError);
  req.allow_unsafe_workspace = true;
  // Past the guard, the read-only root refuses "/" on its own: it cannot bind the whole host.
  CHECK_THROWS_WITH(sandbox::prepare(policy, req), doctest::Contains("whole host tree"));
  req = sandbox_test::request_for("/tmp", {"true"});
  CHECK_THROWS_AS(sandbox::prepare(policy, req), sandbox::UnsafeWorkspaceError);
  req.allow_unsafe_workspace = true;
  CHECK_NOTHROW(sandbox::prepare(policy, req));

  // A write root that resolves to a system directory, with an ordinary workspace.
  policy.write_paths = {"${workspace}", "/etc"};
  req = sandbox_test::request_for(ws.path, {"true"});
  CHECK_THROWS_WITH_AS(sandbox::prepare(policy, req),
                       doctest::Contains("policy explore.json: write root '/etc' is refused"),
                       sandbox::UnsafeWorkspaceError);
  policy.write_paths = {"${workspace}", "/dev/null"};  // a file, not a directory: fine
  CHECK_NOTHROW(sandbox::prepare(policy, req));
}

TEST_CASE("run refuses an unsafe workspace; a normal one works; the flag lets it through") {
  const std::string demo = "replay:" + test::source("examples/explore-demo.jsonl").string();
  auto args = [&](const std::string& ws, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {kCli,      "run", "--preset", "explore", "--workspace",     ws,
                                  "--brief", "b",   "--model",  demo,      "--no-transcript", "--quiet"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto r = test::run(args("/"));
  CHECK(r.code == kUsage);
  CHECK(refused_for(r, "/"));
  CHECK(r.out.empty());  // no envelope: no child was started
  r = test::run(args("/etc"));
  CHECK(r.code == kUsage);
  CHECK(refused_for(r, "/etc"));
  // Twin: this repository as the workspace (the demo's tool calls read it).
  r = test::run(args(test::source("").string()));
  INFO(r.err);
  CHECK(r.code == 0);
  // The flag: the refusal is gone (the demo's paths do not exist under /etc; the run still ends).
  r = test::run(args("/etc", {"--allow-unsafe-workspace"}));
  CHECK(r.code != kUsage);
  CHECK(r.err.find("is refused") == std::string::npos);
  CHECK_FALSE(r.out.empty());
}

TEST_CASE("serve and mcp refuse an unsafe default workspace; serve refuses an unsafe spawn workspace") {
  for (const char* front : {"serve", "mcp"}) {
    INFO(front);
    auto r = test::run({kCli, front, "--workspace", "/", "--model", "replay:/dev/null", "--no-transcript"});
    CHECK(r.code == kUsage);
    CHECK(r.err.find("--workspace '/' is refused") != std::string::npos);
    CHECK(r.err.find("--allow-unsafe-workspace") != std::string::npos);
  }

  test::TempDir ws, scripts;
  const std::string model = test::replay(scripts, "q", R"({"content":"## Summary\nquick"})");
  test::Serve s(test::Serve::Options{{"--workspace", ws.path().string(), "--model", model}});
  s.send({{"type", "hello"}, {"id", 1}, {"protocol", 1}, {"parent", "guard-test"}});
  REQUIRE(s.reply(1)["type"] == "hello");
  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "worker"}, {"brief", "x"}, {"workspace", "/"}});
  json err = s.reply(2);
  CHECK(err["type"] == "error");
  CHECK(err["message"].get<std::string>().find("workspace '/' is refused") != std::string::npos);
  CHECK(err["message"].get<std::string>().find("--allow-unsafe-workspace") != std::string::npos);
  // Twin: the same spawn in the default (temporary) workspace runs.
  s.send({{"type", "spawn"}, {"id", 3}, {"preset", "explore"}, {"brief", "x"}});
  json ok = s.reply(3);
  CHECK(ok["type"] == "result");
  CHECK(ok["envelope"]["status"] == "completed");
}
