// Workspace sanity (issue 13 part 5): "/", the home directory itself and system directories are
// refused as a workspace or a write root unless --allow-unsafe-workspace says so, in every front end
// (sandbox, run, serve, mcp) and in sandbox::prepare(). Each refusal has a twin: a normal temporary
// workspace works, and the flag allows the refused one.
#include "sandbox/workspace_guard.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>
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

// Issue 33 item 3: credential directories and files of every user's home, their ancestors below the
// home, and the supervisor's own config and state are refused as a workspace and as a literal root.
namespace {

// A fake home with credentials in it and a project beside them.
struct FakeHome {
  test::TempDir dir;
  fs::path home = dir.path() / "home";
  FakeHome() {
    dir.write("home/.aws/credentials", "[default]\naws_secret_access_key = fake-secret\n");
    dir.write("home/.config/gh/hosts.yml", "github.com:\n  oauth_token: fake\n");
    dir.write("home/.kube/config", "fake\n");
    dir.write("home/.ssh/id_ed25519", "fake\n");
    dir.write("home/.netrc", "machine x login y password z\n");
    dir.write("home/src/project/README", "a project\n");
  }
  // argv run with HOME pointing here (and the state and model config the supervisor would use in it).
  std::vector<std::string> with_home(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"/usr/bin/env", "-u", "XDG_CONFIG_HOME", "-u", "XDG_STATE_HOME", "-u",
                               "SUBAGENT_STATE_DIR", "-u", "SUBAGENT_MODEL_CONFIG", "HOME=" + home.string()});
    return argv;
  }
};

struct HomeEnv {  // HOME for this process while a query runs
  std::string old;
  explicit HomeEnv(const fs::path& h) {
    if (const char* o = std::getenv("HOME")) old = o;
    ::setenv("HOME", h.c_str(), 1);
  }
  ~HomeEnv() { ::setenv("HOME", old.c_str(), 1); }
};

}  // namespace

TEST_CASE("credential directories, their ancestors below the home and the supervisor's state are refused") {
  FakeHome h;
  HomeEnv env(h.home);
  const fs::path home = fs::canonical(h.home);
  using sandbox::credential_reason;
  for (const char* rel :
       {".aws", ".aws/credentials", ".ssh", ".kube", ".config", ".config/gh", ".config/gcloud", ".netrc", ".docker",
        ".gnupg", ".cargo", ".cargo/credentials.toml", ".local", ".local/state/subagent-supervisor",
        ".local/state/subagent-supervisor/transcripts", ".config/subagent-supervisor"}) {
    INFO(rel);
    CHECK_FALSE(credential_reason(home / rel).empty());
    CHECK_FALSE(sandbox::unsafe_workspace_reason(home / rel).empty());
    CHECK_FALSE(sandbox::unsafe_root_reason(home / rel, sandbox::RootKind::read).empty());
  }
  CHECK(credential_reason(home / ".aws").find(home.string() + "/.aws") != std::string::npos);
  CHECK(credential_reason(home / ".config").find("holds " + home.string() + "/.config/") != std::string::npos);
  // The twins: a project in the home, the worktrees implementation children work in, and elsewhere.
  for (const fs::path& p : {home / "src/project", home / "src", home / ".local/state/subagent-supervisor/worktrees/ab",
                            fs::path("/work/x"), fs::path("/usr/lib")}) {
    INFO(p);
    CHECK(credential_reason(p).empty());
  }
  // Every user's home: /root's (from /etc/passwd and named anyway) counts whoever runs this.
  CHECK_FALSE(credential_reason("/root/.ssh").empty());
  CHECK_FALSE(credential_reason("/root/.config").empty());
  CHECK(credential_reason("/root/project").empty());
  // A symlink to the credentials elsewhere: its target is refused too.
  test::TempDir elsewhere;
  elsewhere.write("aws-real/credentials", "x\n");
  fs::remove_all(home / ".aws");
  fs::create_directory_symlink(elsewhere.path() / "aws-real", home / ".aws");
  // The resolved list is kept for a second (workspace_guard.cpp, current_secrets): a link made just
  // now is seen once that second has passed.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  CHECK_FALSE(credential_reason(fs::canonical(elsewhere.path() / "aws-real")).empty());
  CHECK_THROWS_AS(sandbox::check_workspace(elsewhere.path() / "aws-real", "workspace"), sandbox::UnsafeWorkspaceError);
  CHECK_THROWS_WITH(sandbox::check_workspace(home / ".aws", "workspace"), doctest::Contains("(resolved: '"));
  CHECK_NOTHROW(sandbox::check_workspace(elsewhere.path(), "workspace"));
}

TEST_CASE("a state directory named with a trailing separator is refused as itself and what it keeps") {
  // The comparison is of normal paths without a trailing separator: "/x/state/" names "/x/state".
  // Before, a state directory outside every home, not made yet and named with a trailing separator,
  // was not refused as itself (the first two checks failed); below a home its ancestor rule held.
  // Not made yet (a policy's literal root is checked whether or not it exists): nothing resolves it.
  test::TempDir dir;
  const fs::path state = fs::canonical(dir.path()) / "state";
  struct StateEnv {
    std::string old;
    bool had = false;
    explicit StateEnv(const std::string& v) {
      if (const char* o = std::getenv("SUBAGENT_STATE_DIR")) old = o, had = true;
      ::setenv("SUBAGENT_STATE_DIR", v.c_str(), 1);
    }
    ~StateEnv() { had ? ::setenv("SUBAGENT_STATE_DIR", old.c_str(), 1) : ::unsetenv("SUBAGENT_STATE_DIR"); }
  } env(state.string() + "/");
  CHECK(sandbox::credential_reason(state).find("it is " + state.string() + ",") != std::string::npos);
  CHECK(sandbox::credential_reason(state.string() + "/").find("it is " + state.string() + ",") != std::string::npos);
  CHECK(sandbox::credential_reason(state / "transcripts").find("it is " + (state / "transcripts").string()) !=
        std::string::npos);
  CHECK(sandbox::credential_reason(state / "supervisors/x").find("lies inside " + (state / "supervisors").string()) !=
        std::string::npos);
  // The twins: beside it and the worktrees kept in it are not refused.
  CHECK(sandbox::credential_reason(dir.path() / "project").empty());
  CHECK(sandbox::credential_reason(state / "worktrees/ab").empty());
}

TEST_CASE("a home directory relinked elsewhere is refused at its new place at once") {
  // Only the passwd lookup is kept for a second: $HOME's target is resolved at every check.
  test::TempDir dir;
  fs::create_directories(dir.path() / "a/project");
  fs::create_directories(dir.path() / "b/project");
  const fs::path link = dir.path() / "home-link";
  fs::create_directory_symlink(dir.path() / "a", link);
  HomeEnv env(link);
  const fs::path a = fs::canonical(dir.path() / "a"), b = fs::canonical(dir.path() / "b");
  CHECK(sandbox::unsafe_workspace_reason(a).find("home directory") != std::string::npos);
  CHECK(sandbox::unsafe_workspace_reason(b).empty());
  fs::remove(link);
  fs::create_directory_symlink(dir.path() / "b", link);
  CHECK(sandbox::unsafe_workspace_reason(b).find("home directory") != std::string::npos);
  CHECK(sandbox::unsafe_workspace_reason(a).empty());
  // The twin: a project inside the home is fine wherever the home lies.
  CHECK(sandbox::unsafe_workspace_reason(b / "project").empty());
}

TEST_CASE("run and sandbox refuse a credential directory as the workspace; the flag and a project beside it work") {
  FakeHome h;
  const std::string demo = "replay:" + test::source("examples/explore-demo.jsonl").string();
  auto run = [&](const fs::path& ws, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {kCli,      "run", "--preset", "explore", "--workspace",     ws.string(),
                                  "--brief", "b",   "--model",  demo,      "--no-transcript", "--quiet"};
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run(h.with_home(a));
  };
  for (const char* rel : {".aws", ".config", ".config/gh", ".ssh"}) {
    INFO(rel);
    auto r = run(h.home / rel);
    CHECK(r.code == kUsage);
    CHECK(refused_for(r, (h.home / rel).string()));
    CHECK(r.err.find("credentials") != std::string::npos);
    CHECK(r.out.empty());
  }
  // Twins: the flag lets it through; a project beside the credentials needs no flag.
  auto r = run(h.home / ".aws", {"--allow-unsafe-workspace"});
  INFO(r.err);
  CHECK(r.code != kUsage);
  CHECK(r.err.find("is refused") == std::string::npos);
  CHECK_FALSE(r.out.empty());
  r = run(h.home / "src/project");
  CHECK(r.code != kUsage);
  CHECK(r.err.find("is refused") == std::string::npos);
  CHECK_FALSE(r.out.empty());

  // sandbox: the explore preset's cat of the credentials file is refused, allowed with the flag.
  const std::string creds = (h.home / ".aws/credentials").string();
  auto s = test::run(h.with_home({kCli, "sandbox", "--preset", "explore", "--workspace", (h.home / ".aws").string(),
                                  "--", "/usr/bin/cat", creds}));
  CHECK(s.code == kUsage);
  CHECK(refused_for(s, (h.home / ".aws").string()));
  CHECK(s.out.find("fake-secret") == std::string::npos);
  s = test::run(h.with_home({kCli, "sandbox", "--preset", "explore", "--workspace", (h.home / ".aws").string(),
                             "--allow-unsafe-workspace", "--", "/usr/bin/cat", creds}));
  INFO(s.err);
  CHECK(s.code == 0);
  CHECK(s.out.find("fake-secret") != std::string::npos);
  s = test::run(h.with_home({kCli, "sandbox", "--preset", "explore", "--workspace", (h.home / "src/project").string(),
                             "--", "/usr/bin/cat", (h.home / "src/project/README").string()}));
  CHECK(s.code == 0);
  CHECK(s.out == "a project\n");
}

TEST_CASE("a policy naming credentials as a read root: launch refuses it, policy check warns; the flag allows it") {
  FakeHome h;
  test::TempDir policies;
  std::string text = test::slurp(test::policy_dir() / "explore.json");
  const std::string from = "\"read\": [\"${workspace}\", ";
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), from + "\"" + (h.home / ".aws").string() + "\", ");
  policies.write("explore.json", text);
  const std::string creds = (h.home / ".aws/credentials").string();
  const std::string project = (h.home / "src/project").string();
  auto s = test::run(h.with_home({kCli, "sandbox", "--preset", "explore", "--policy-dir", policies.path().string(),
                                  "--workspace", project, "--", "/usr/bin/cat", creds}));
  INFO(s.err);
  CHECK(s.code == kUsage);
  CHECK(s.err.find("read root '" + (h.home / ".aws").string() + "'") != std::string::npos);
  CHECK(s.err.find("is refused") != std::string::npos);
  CHECK(s.out.find("fake-secret") == std::string::npos);
  // Twin: the flag allows it, and the child reads the file the root grants.
  s = test::run(h.with_home({kCli, "sandbox", "--preset", "explore", "--policy-dir", policies.path().string(),
                             "--workspace", project, "--allow-unsafe-workspace", "--", "/usr/bin/cat", creds}));
  INFO(s.err);
  CHECK(s.code == 0);
  CHECK(s.out.find("fake-secret") != std::string::npos);
  // policy check warns (read roots are warnings; a write root there is an error, as for /etc).
  auto c = test::run(h.with_home({kCli, "policy", "check", "--policy-dir", test::policy_dir().string(),
                                  (policies.path() / "explore.json").string()}));
  INFO(c.out);
  CHECK(c.out.find("warning: sandbox.filesystem.read[1] '" + (h.home / ".aws").string() + "' is refused at launch") !=
        std::string::npos);
  // Twin: the shipped preset has no such finding.
  c = test::run(h.with_home({kCli, "policy", "check", (test::policy_dir() / "explore.json").string()}));
  CHECK(c.out.find("is refused at launch") == std::string::npos);
}

TEST_CASE("serve refuses a spawn in a credential directory; a spawn in a project beside it runs") {
  FakeHome h;
  test::TempDir scripts;
  const std::string model = test::replay(scripts, "q", R"({"content":"## Summary\nquick"})");
  test::Serve s(test::Serve::Options{
      {"--workspace", (h.home / "src/project").string(), "--model", model}, false, {"HOME=" + h.home.string()}});
  s.send({{"type", "hello"}, {"id", 1}, {"protocol", 1}, {"parent", "guard-test"}});
  REQUIRE(s.reply(1)["type"] == "hello");
  s.send({{"type", "spawn"},
          {"id", 2},
          {"preset", "explore"},
          {"brief", "x"},
          {"workspace", (h.home / ".kube").string()}});
  json err = s.reply(2);
  CHECK(err["type"] == "error");
  CHECK(err["message"].get<std::string>().find("workspace '" + (h.home / ".kube").string() + "' is refused") !=
        std::string::npos);
  s.send({{"type", "spawn"}, {"id", 3}, {"preset", "explore"}, {"brief", "x"}});
  json ok = s.reply(3);
  CHECK(ok["type"] == "result");
  CHECK(ok["envelope"]["status"] == "completed");
  // serve's own --workspace: refused at start.
  auto r = test::run(h.with_home(
      {kCli, "serve", "--workspace", (h.home / ".ssh").string(), "--model", "replay:/dev/null", "--no-transcript"}));
  CHECK(r.code == kUsage);
  CHECK(r.err.find("--workspace '" + (h.home / ".ssh").string() + "' is refused") != std::string::npos);
}
