// Writers that cannot reach outside (issue 14), through the real CLI as a hostile child would: the
// supervisor never runs repository-controlled programs on a tree a child could write, `run` honours
// workspace modes, the writer lock covers ancestors and descendants, patches are reviewed, and
// later-execution paths are protected or flagged. Every "did not run" has a twin showing that the
// same repository does run the program for a plain `git` call.
#include "workspace/git_step.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve_driver.hpp"
#include "policy/preset.hpp"
#include "workspace/later_execution.hpp"
#include "workspace/lock.hpp"
#include "workspace/held.hpp"
#include "test_util.hpp"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Plain git, as the user would type it (the twin of every neutralised step).
test::RunResult git(const fs::path& dir, const std::string& args) {
  return test::run({"/bin/sh", "-c", "git -c user.name=t -c user.email=t@t " + args}, "", dir);
}

void make_repo(const test::TempDir& d) {
  d.write("README", "top\n");
  d.write("sub/a.txt", "alpha\n");
  REQUIRE(git(d.path(), "init -q").code == 0);
  REQUIRE(git(d.path(), "add -A").code == 0);
  REQUIRE(git(d.path(), "commit -qm base").code == 0);
}

struct Cli {
  test::TempDir state, scripts;
  std::string model = "replay:" + scripts.write("m.jsonl", "{\"content\":\"unused\"}\n");

  // `run` with a shell child: the brief is the script the hostile child runs in its sandbox.
  test::RunResult run(const std::string& preset, const fs::path& ws, const std::string& script,
                      std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {test::bin("subagent-supervisor").string(),
                                  "run",
                                  "--preset",
                                  preset,
                                  "--workspace",
                                  ws.string(),
                                  "--brief",
                                  script,
                                  "--model",
                                  model,
                                  "--child",
                                  test::program("fake_child").string(),
                                  "--child-arg",
                                  "shell",
                                  "--state-dir",
                                  state.path().string(),
                                  "--lock-dir",
                                  (state.path() / "locks").string(),
                                  "--no-transcript",
                                  "--audit-log",
                                  (state.path() / "audit.jsonl").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run(a);
  }
  test::RunResult apply(const std::string& id, bool allow_flagged = false) const {
    std::vector<std::string> a = {
        test::bin("subagent-supervisor").string(), "apply", id, "--state-dir", state.path().string(), "--lock-dir",
        (state.path() / "locks").string()};
    if (allow_flagged) a.push_back("--allow-flagged");
    return test::run(a);
  }
};

json envelope(const test::RunResult& r) {
  json e = json::parse(r.out, nullptr, false);
  if (e.is_discarded()) FAIL("no envelope on stdout; stderr: " << r.err);
  return e;
}

bool contains(const json& arr, const std::string& s) {
  if (!arr.is_array()) return false;
  for (const auto& x : arr)
    if (x == s) return true;
  return false;
}

// A worker's run, and the release of what it left among the later-execution paths (held until then):
// for tests of what comes after.
json worker_released(const Cli& cli, const fs::path& ws, const std::string& script) {
  json e = envelope(cli.run("worker", ws, script));
  if (!e["artifacts"]["later_execution"].value("held", json::array()).empty()) {
    auto a = cli.apply(e["id"], true);
    REQUIRE_MESSAGE(a.code == 0, a.err);
  }
  return e;
}

// A repository configuration whose every executable setting leaves a marker file in `marks`.
std::string hostile_config(const fs::path& marks) {
  auto touch = [&](const std::string& name) { return "touch " + (marks / name).string(); };
  return "git config filter.x.clean '" + touch("clean") + "; cat' && " + "git config filter.x.smudge '" +
         touch("smudge") + "; cat' && " + "git config filter.y.process '" + touch("process") + "; false' && " +
         "git config core.fsmonitor '" + touch("fsmonitor") + "; false' && " + "git config diff.t.textconv '" +
         touch("textconv") + "; cat' && " + "git config diff.external '" + touch("external") + "; true' && " +
         "git config core.pager '" + touch("pager") + "; cat' && " + "mkdir -p hooks && printf '#!/bin/sh\\n" +
         touch("hook") +
         "\\n' > hooks/post-checkout && "
         "cp hooks/post-checkout hooks/pre-commit && chmod +x hooks/* && git config core.hooksPath \"$PWD/hooks\" && "
         "printf '*.txt filter=x diff=t\\n*.dat filter=y\\n' > .gitattributes";
}

}  // namespace

TEST_CASE(
    "implementation on a subdirectory: the child's own repository and its filter are never used by patch collection") {
  test::TempDir repo, marks;
  make_repo(repo);
  Cli cli;
  const std::string attack = "git init -q . && " + hostile_config(marks.path()) + " && echo changed > a.txt";
  auto r = cli.run("implementation", repo.path() / "sub", attack);
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  CHECK(fs::is_empty(marks.path()));  // no filter, fsmonitor, hook, textconv, pager ran as the supervisor
  const json& patch = e["artifacts"]["patch"];
  REQUIRE_MESSAGE(patch.contains("review"), patch.dump());
  CHECK(contains(patch["review"]["nested_repositories"], "."));
  CHECK(contains(patch["files"], "a.txt"));
  CHECK_FALSE(contains(patch["files"], ".git/config"));
  // The checkout is untouched until the parent applies.
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "alpha\n");
  CHECK_FALSE(fs::exists(repo.path() / "sub/.git"));

  // Twin: the same repository, built by the same script outside any sandbox, runs the filter for a
  // plain `git add`.
  test::TempDir twin, twin_marks;
  twin.write("a.txt", "alpha\n");
  REQUIRE(test::run({"/bin/sh", "-c", "git init -q . && " + hostile_config(twin_marks.path())}, "", twin.path()).code ==
          0);
  REQUIRE(git(twin.path(), "add -A").code == 0);
  CHECK(fs::exists(twin_marks.path() / "clean"));
}

TEST_CASE("a worker plants .git with every executable setting: later implementation steps run none of them") {
  test::TempDir ws, marks;
  ws.write("a.txt", "alpha\n");
  Cli cli;
  // A worker on a directory that is no repository makes it one, with a hostile configuration.
  // (Its own git calls switch the programs off for themselves; the files keep them for later.)
  const std::string quiet_git =
      "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c filter.x.clean=cat "
      "-c filter.y.process= -c user.name=c -c user.email=c@c ";
  const std::string plant = "git init -q . && " + hostile_config(marks.path()) + " && " + quiet_git + "add -A && " +
                            quiet_git + "commit -qm planted";
  auto w = cli.run("worker", ws.path(), plant);
  json we = envelope(w);
  REQUIRE_MESSAGE(we["status"] == "completed", w.out << w.err);
  // The worker's planted repository is reported, held out of the workspace, and released on request.
  CHECK(contains(we["artifacts"]["later_execution"]["new_repositories"], "."));
  CHECK(contains(we["artifacts"]["later_execution"]["held"], ".git"));
  CHECK(we["artifacts"]["later_execution"].contains("warning"));
  CHECK_FALSE(fs::exists(ws.path() / ".git"));
  auto released = cli.apply(we["id"], true);
  REQUIRE_MESSAGE(released.code == 0, released.err);
  REQUIRE(fs::is_directory(ws.path() / ".git"));
  for (const auto& f : fs::directory_iterator(marks.path()))
    fs::remove(f.path());  // the worker's own git ran them inside its sandbox

  // An implementation child on that directory: worktree add (smudge, post-checkout), patch
  // collection (clean, fsmonitor, textconv, external diff, pager), worktree removal.
  auto r = cli.run("implementation", ws.path(), "echo beta > a.txt && echo more > c.dat");
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  REQUIRE_MESSAGE(e["artifacts"]["patch"].contains("files"), e["artifacts"].dump());
  CHECK(contains(e["artifacts"]["patch"]["files"], "a.txt"));
  // ... and apply.
  const std::string id = e["id"];
  auto a = cli.apply(id);
  CHECK_MESSAGE(a.code == 0, a.err);
  CHECK(test::slurp(ws.path() / "a.txt") == "beta\n");
  std::string ran;
  for (const auto& f : fs::directory_iterator(marks.path())) ran += f.path().filename().string() + " ";
  CHECK_MESSAGE(ran.empty(), "the supervisor ran: " << ran);

  // Twins: plain git in the same repository runs each of them.
  auto ran_now = [&](const std::string& name) { return fs::exists(marks.path() / name); };
  test::TempDir wt_parent;
  git(ws.path(), "worktree add -q --detach " + (wt_parent.path() / "w").string());
  CHECK(ran_now("smudge"));
  CHECK(ran_now("hook"));  // post-checkout
  ws.write("a.txt", "gamma\n");
  fs::remove(ws.path() / "c.dat");
  git(ws.path(), "status --porcelain");
  CHECK(ran_now("fsmonitor"));
  git(ws.path(), "diff");
  CHECK(ran_now("external"));
  git(ws.path(), "diff --no-ext-diff");
  CHECK(ran_now("textconv"));
  test::run({"/usr/bin/script", "-qec", "git log -1", "/dev/null"}, "", ws.path());  // a terminal: the pager runs
  CHECK(ran_now("pager"));
  git(ws.path(), "add -A");
  CHECK(ran_now("clean"));
  ws.write("c.dat", "other\n");  // last: a failing process filter stops the commands after it
  git(ws.path(), "add -A");
  CHECK(ran_now("process"));
}

TEST_CASE("run_git: explicit git dir, no discovery, and a sandbox that executes nothing but git") {
  test::TempDir repo, outside;
  make_repo(repo);
  supervisor::GitStep s;
  s.what = "test";
  s.git_dir = repo.path() / ".git";
  s.work_tree = repo.path();
  s.args = {"rev-parse", "--show-toplevel"};
  auto r = supervisor::must_git(s);
  CHECK(r.out == repo.path().string() + "\n");
  // The environment is clean: a variable of ours does not reach git.
  s.args = {"var", "GIT_EDITOR"};
  CHECK(supervisor::must_git(s).out == ":\n");
  // No write outside the step's write roots (none given here): twin below with the root given.
  s.args = {"update-ref", "refs/heads/x", "HEAD"};
  CHECK(supervisor::run_git(s).code != 0);
  s.write = {repo.path() / ".git"};
  CHECK(supervisor::run_git(s).code == 0);
  // An alias that would start a shell: the sandbox refuses to execute /bin/sh.
  s.args = {"-c", "alias.evil=!touch " + (outside.path() / "m").string(), "evil"};
  supervisor::run_git(s);
  CHECK_FALSE(fs::exists(outside.path() / "m"));
  REQUIRE(git(repo.path(), "-c 'alias.evil=!touch " + (outside.path() / "m").string() + "' evil").code == 0);
  CHECK(fs::exists(outside.path() / "m"));  // twin: plain git runs it
}

TEST_CASE("run_git: a step that hangs is killed at its timeout, an error naming the step; twin: it finishes") {
  test::TempDir repo;
  make_repo(repo);
  // A FIFO nobody writes: git blocks opening it, as on a stuck filesystem.
  REQUIRE(::mkfifo((repo.path() / "stuck").c_str(), 0600) == 0);
  repo.write("plain", "plain\n");
  supervisor::GitStep s;
  s.what = "git hash-object (test)";
  s.git_dir = repo.path() / ".git";
  s.work_tree = repo.path();
  s.timeout = std::chrono::milliseconds(1500);
  s.args = {"hash-object", (repo.path() / "stuck").string()};
  auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    supervisor::run_git(s);
  } catch (const std::exception& e) {
    error = e.what();
  }
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(error == "git hash-object (test): git did not finish within 1500 ms; it was killed");
  CHECK(took >= std::chrono::milliseconds(1500));
  CHECK(took < std::chrono::seconds(20));
  CHECK(supervisor::GitStep{}.timeout == std::chrono::seconds(120));
  // Twin: the same step on a regular file finishes well inside the same timeout.
  s.args = {"hash-object", (repo.path() / "plain").string()};
  auto r = supervisor::must_git(s);
  CHECK(r.out == git(repo.path(), "hash-object plain").out);
  CHECK(r.out.size() == 41);
}

TEST_CASE("run --preset implementation returns a patch and leaves the checkout untouched; apply, stale apply") {
  test::TempDir repo;
  make_repo(repo);
  Cli cli;
  auto r = cli.run("implementation", repo.path(), "echo ALPHA > sub/a.txt && echo new > sub/n.txt");
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  const json& patch = e["artifacts"]["patch"];
  CHECK(contains(patch["files"], "sub/a.txt"));
  CHECK(contains(patch["files"], "sub/n.txt"));
  CHECK(patch["review"]["flagged"] == false);
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "alpha\n");
  CHECK_FALSE(fs::exists(repo.path() / "sub/n.txt"));
  CHECK(git(repo.path(), "worktree list --porcelain").out.find("worktrees") == std::string::npos);  // removed
  // Stale: the file changed since; nothing is applied.
  repo.write("sub/a.txt", "someone else\n");
  auto stale = cli.apply(e["id"]);
  CHECK(stale.code == 1);
  CHECK(stale.err.find("no longer applies") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / "sub/n.txt"));
  repo.write("sub/a.txt", "alpha\n");  // twin: on the original text it applies
  auto ok = cli.apply(e["id"]);
  CHECK_MESSAGE(ok.code == 0, ok.err);
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "ALPHA\n");
  CHECK(test::slurp(repo.path() / "sub/n.txt") == "new\n");
}

TEST_CASE("apply holds the workspace's writer lock: refused, nothing changed, while a writer holds it; twin: after") {
  test::TempDir repo;
  make_repo(repo);
  Cli cli;
  json e = envelope(cli.run("implementation", repo.path(), "echo ALPHA > sub/a.txt"));
  REQUIRE(e["status"] == "completed");
  // A worker's lock on a subdirectory of the repository: the same writer lock (the repository top).
  auto writer = supervisor::WorkspaceLock::try_acquire(repo.path() / "sub", cli.state.path() / "locks");
  REQUIRE(writer);
  auto busy = cli.apply(e["id"]);
  CHECK(busy.code == 1);
  CHECK_MESSAGE(busy.err.find("another writer (a worker child, or an apply) holds the workspace") != std::string::npos,
                busy.err);
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "alpha\n");
  writer.reset();
  auto ok = cli.apply(e["id"]);
  CHECK_MESSAGE(ok.code == 0, ok.err);
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "ALPHA\n");
  // The apply let the lock go: a writer takes it again.
  CHECK(supervisor::WorkspaceLock::try_acquire(repo.path(), cli.state.path() / "locks"));
}

TEST_CASE("two implementation children in parallel, on one repository and on a subdirectory of it") {
  test::TempDir repo;
  make_repo(repo);
  Cli cli;
  test::RunResult a, b;
  std::thread ta([&] { a = cli.run("implementation", repo.path(), "sleep 1; echo TOP > README"); });
  std::thread tb([&] { b = cli.run("implementation", repo.path() / "sub", "sleep 1; echo sub > a.txt"); });
  ta.join();
  tb.join();
  json ea = envelope(a), eb = envelope(b);
  REQUIRE_MESSAGE(ea["status"] == "completed", a.err);
  REQUIRE_MESSAGE(eb["status"] == "completed", b.err);
  CHECK(ea["artifacts"]["patch"]["files"] == json::array({"README"}));
  CHECK(eb["artifacts"]["patch"]["files"] == json::array({"a.txt"}));  // relative to its workspace
  CHECK(cli.apply(ea["id"]).code == 0);
  CHECK(cli.apply(eb["id"]).code == 0);
  CHECK(test::slurp(repo.path() / "README") == "TOP\n");
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "sub\n");
  CHECK_FALSE(fs::exists(repo.path() / "a.txt"));  // applied inside the subdirectory, not at the top
}

TEST_CASE("patch review: symlinks, modes, new executables, later-execution paths; apply refuses unless told") {
  test::TempDir repo;
  make_repo(repo);
  Cli cli;
  auto r = cli.run("implementation", repo.path(),
                   "ln -s /etc/passwd sub/leak && ln -s ../../outside sub/up && ln -s a.txt sub/alias && "
                   "printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh && chmod +x README && "
                   "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && echo x > .envrc");
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  const json& rv = e["artifacts"]["patch"]["review"];
  INFO(rv.dump());
  CHECK(rv["flagged"] == true);
  bool leak = false, up = false, alias = false;
  for (const auto& s : rv["symlinks"]) {
    if (s["path"] == "sub/leak") leak = s["target"] == "/etc/passwd" && s["outside"] == true;
    if (s["path"] == "sub/up") up = s["outside"] == true;
    if (s["path"] == "sub/alias") alias = s["target"] == "a.txt" && s["outside"] == false;
  }
  CHECK(leak);
  CHECK(up);
  CHECK(alias);
  CHECK(contains(rv["new_executables"], "run.sh"));
  REQUIRE(rv["mode_changes"].size() == 1);
  CHECK(rv["mode_changes"][0]["path"] == "README");
  CHECK(rv["mode_changes"][0]["to"] == "100755");
  CHECK(contains(rv["later_execution"], ".vscode/tasks.json"));
  CHECK(contains(rv["later_execution"], ".envrc"));
  // Symlinks out of the workspace: refused even with --allow-flagged.
  auto a = cli.apply(e["id"], true);
  CHECK(a.code == 1);
  CHECK(a.err.find("outside the workspace") != std::string::npos);
  CHECK_FALSE(fs::exists(fs::symlink_status(repo.path() / "sub/leak")));
  CHECK_FALSE(fs::exists(repo.path() / "run.sh"));

  // Flagged but inside: refused without the explicit flag, applied with it.
  auto r2 = cli.run("implementation", repo.path(), "ln -s a.txt sub/alias && echo '{}' > .mcp.json");
  json e2 = envelope(r2);
  REQUIRE(e2["status"] == "completed");
  auto refused = cli.apply(e2["id"]);
  CHECK(refused.code == 1);
  CHECK(refused.err.find("--allow-flagged") != std::string::npos);
  CHECK(refused.err.find(".mcp.json") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / ".mcp.json"));
  auto allowed = cli.apply(e2["id"], true);
  CHECK_MESSAGE(allowed.code == 0, allowed.err);
  CHECK(fs::exists(repo.path() / ".mcp.json"));
  CHECK(fs::read_symlink(repo.path() / "sub/alias") == "a.txt");
}

TEST_CASE("patch caps: bytes and files from the policy; nothing is saved past them") {
  test::TempDir repo, policies;
  make_repo(repo);
  json doc = supervisor::read_jsonc_file(test::policy_dir() / "implementation.json");
  doc["preset"] = "capped";
  doc["writes"] = {{"max_patch_bytes", 4000}, {"max_patch_files", 3}};
  std::ofstream(policies.path() / "capped.json") << doc.dump(2);
  Cli cli;
  const std::string pd = "--policy-dir";
  auto big =
      cli.run("capped", repo.path(), "head -c 20000 /dev/zero | tr '\\0' a > big.txt", {pd, policies.path().string()});
  json e = envelope(big);
  CHECK(e["artifacts"]["patch"]["error"].get<std::string>().find("larger than 4000 bytes") != std::string::npos);
  CHECK_FALSE(fs::exists(cli.state.path() / "patches" / (e["id"].get<std::string>() + ".patch")));
  auto many =
      cli.run("capped", repo.path(), "for i in 1 2 3 4 5; do echo $i > f$i; done", {pd, policies.path().string()});
  CHECK(envelope(many)["artifacts"]["patch"]["error"].get<std::string>().find("more than 3 files") !=
        std::string::npos);
  auto fine = cli.run("capped", repo.path(), "echo 1 > f1; echo 2 > f2", {pd, policies.path().string()});  // twin
  CHECK(envelope(fine)["artifacts"]["patch"]["files"].size() == 2);
}

TEST_CASE("worker: existing later-execution paths are read-only, new ones are flagged; normal files are edited") {
  test::TempDir repo;
  make_repo(repo);
  repo.write(".vscode/settings.json", "{}\n");
  repo.write(".husky/pre-commit", "#!/bin/sh\n");
  repo.write("sub/deep/.claude/settings.json", "{}\n");
  REQUIRE(git(repo.path(), "config core.hooksPath .husky").code == 0);
  Cli cli;
  auto r =
      cli.run("worker", repo.path(),
              "r=''; "
              "echo x > .vscode/tasks.json 2>/dev/null && r=\"$r vscode\"; "
              "echo x >> .husky/pre-commit 2>/dev/null && r=\"$r husky\"; "
              "echo x > .git/config 2>/dev/null && r=\"$r git\"; "
              "echo x > sub/deep/.claude/settings.json 2>/dev/null && r=\"$r claude\"; "
              "mv .vscode gone 2>/dev/null && r=\"$r moved\"; "
              "echo edited > sub/a.txt && r=\"$r normal\"; "
              "mkdir -p sub/x/.git && echo '[core]' > sub/x/.git/config && echo '{}' > .mcp.json && echo x > .envrc; "
              "echo \"wrote:$r\" > result.txt");
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  CHECK(test::slurp(repo.path() / "result.txt") == "wrote: normal\n");
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "edited\n");
  const json& le = e["artifacts"]["later_execution"];
  INFO(le.dump());
  CHECK(contains(le["changed"], ".mcp.json"));
  CHECK(contains(le["changed"], ".envrc"));
  CHECK(contains(le["changed"], "sub/x/.git"));
  CHECK(contains(le["new_repositories"], "sub/x"));
  // What it created there is held outside the workspace; what existed stays where it was.
  for (const char* p : {".mcp.json", ".envrc", "sub/x/.git"}) {
    CHECK(contains(le["held"], p));
    CHECK_FALSE(fs::exists(fs::symlink_status(repo.path() / p)));
    CHECK(fs::exists(fs::path(le["held_dir"].get<std::string>()) / p));
  }
  CHECK(fs::exists(repo.path() / ".husky/pre-commit"));
  CHECK(fs::exists(repo.path() / ".git/config"));
  CHECK(contains(le["protected"], (repo.path() / ".husky").string()));
  CHECK(contains(le["protected"], (repo.path() / "sub/deep/.claude").string()));
  // Twin: the same writes without the sandbox succeed.
  auto twin =
      test::run({"/bin/sh", "-c", "echo x > .vscode/tasks.json && echo x >> .husky/pre-commit"}, "", repo.path());
  CHECK(twin.code == 0);
}

namespace {

// A worker's attack on the user's next ordinary commands: a nested repository in sub/ whose
// core.fsmonitor runs on the next `git status` there (which many shell prompts run on `cd`), and a
// pre-commit hook where the repository's core.hooksPath points. Each leaves a mark in `marks`.
std::string later_attack(const fs::path& marks) {
  return "git init -q sub && git -C sub config core.fsmonitor 'touch " + (marks / "fsmonitor").string() +
         "; false' && git -C sub -c core.fsmonitor=false -c core.hooksPath=/dev/null add -A && "
         "mkdir .husky && printf '#!/bin/sh\\ntouch " +
         (marks / "hook").string() + "\\n' > .husky/pre-commit && chmod +x .husky/pre-commit";
}

// What the user types next, outside any sandbox.
void user_commands(const fs::path& repo) {
  test::run({"/bin/sh", "-c", "cd sub && git status"}, "", repo);
  git(repo, "commit -q --allow-empty -m next");
}

}  // namespace

TEST_CASE("worker: a nested fsmonitor and a hooksPath hook are held; the user's git status and commit run neither") {
  test::TempDir repo, marks;
  make_repo(repo);
  REQUIRE(git(repo.path(), "config core.hooksPath .husky").code == 0);  // set, but .husky does not exist yet
  Cli cli;
  auto r = cli.run("worker", repo.path(), later_attack(marks.path()) + " && echo edited > sub/a.txt");
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  const json& le = e["artifacts"]["later_execution"];
  INFO(le.dump());
  CHECK(contains(le["held"], "sub/.git"));
  CHECK(contains(le["held"], ".husky"));
  const std::string id = e["id"];
  CHECK(le["release"] == "subagent-supervisor apply " + id + " --allow-flagged");
  CHECK(test::slurp(repo.path() / "sub/a.txt") == "edited\n");  // ordinary edits stay in place
  user_commands(repo.path());
  CHECK_FALSE(fs::exists(marks.path() / "fsmonitor"));
  CHECK_FALSE(fs::exists(marks.path() / "hook"));

  // apply without --allow-flagged names what is held and moves nothing.
  auto refused = cli.apply(id);
  CHECK(refused.code == 1);
  CHECK(refused.err.find("later-execution path sub/.git") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / "sub/.git"));
  // Nothing that exists now is overwritten.
  fs::create_directory(repo.path() / ".husky");
  auto blocked = cli.apply(id, true);
  CHECK(blocked.code == 1);
  CHECK(blocked.err.find("'.husky' exists") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / "sub/.git"));
  fs::remove(repo.path() / ".husky");

  // Twin: released, the same files run both programs on the same commands.
  auto released = cli.apply(id, true);
  REQUIRE_MESSAGE(released.code == 0, released.err);
  CHECK(fs::exists(repo.path() / "sub/.git/config"));
  CHECK(fs::exists(repo.path() / ".husky/pre-commit"));
  user_commands(repo.path());
  CHECK(fs::exists(marks.path() / "fsmonitor"));
  CHECK(fs::exists(marks.path() / "hook"));
  CHECK(cli.apply(id, true).out.find("released already") != std::string::npos);
}

TEST_CASE(
    "sandbox --preset worker|implementation: what CMD plants is held and listed on stderr; the exit status is CMD's") {
  for (const std::string preset : {"worker", "implementation"}) {
    CAPTURE(preset);
    test::TempDir repo, marks, state;
    make_repo(repo);
    REQUIRE(git(repo.path(), "config core.hooksPath .husky").code == 0);
    auto r = test::run({test::bin("subagent-supervisor").string(), "sandbox", "--preset", preset, "--workspace",
                        repo.path().string(), "--state-dir", state.path().string(), "--", "/bin/sh", "-c",
                        later_attack(marks.path()) + " && exit 7"});
    INFO(r.err);
    CHECK(r.code == 7);
    CHECK(r.err.find("  sub/.git\n") != std::string::npos);
    CHECK(r.err.find("  .husky\n") != std::string::npos);
    const std::string tail = " --allow-flagged --state-dir " + state.path().string();
    const auto at = r.err.find("subagent-supervisor apply ");
    REQUIRE(at != std::string::npos);
    const std::string id = r.err.substr(at + 26, 12);
    CHECK(r.err.find("subagent-supervisor apply " + id + tail) != std::string::npos);
    user_commands(repo.path());
    CHECK_FALSE(fs::exists(marks.path() / "fsmonitor"));
    CHECK_FALSE(fs::exists(marks.path() / "hook"));
    // Twin: released with the printed command, the same files run on the same commands.
    auto a = test::run({test::bin("subagent-supervisor").string(), "apply", id, "--allow-flagged", "--state-dir",
                        state.path().string()});
    REQUIRE_MESSAGE(a.code == 0, a.err);
    user_commands(repo.path());
    CHECK(fs::exists(marks.path() / "fsmonitor"));
    CHECK(fs::exists(marks.path() / "hook"));
  }
  // A read-only preset holds nothing and says nothing.
  test::TempDir ws, state;
  auto r = test::run({test::bin("subagent-supervisor").string(), "sandbox", "--preset", "explore", "--workspace",
                      ws.path().string(), "--state-dir", state.path().string(), "--", "/bin/true"});
  CHECK(r.code == 0);
  CHECK(r.err.find("held") == std::string::npos);
  CHECK_FALSE(fs::exists(state.path() / "held"));
}

TEST_CASE("worker: a legitimate git init is held, then released with apply, and works") {
  test::TempDir ws;
  Cli cli;
  auto r = cli.run("worker", ws.path(), "git init -q proj && echo hi > proj/README");
  json e = envelope(r);
  REQUIRE_MESSAGE(e["status"] == "completed", r.out << r.err);
  CHECK(contains(e["artifacts"]["later_execution"]["held"], "proj/.git"));
  CHECK(fs::exists(ws.path() / "proj/README"));
  CHECK(git(ws.path() / "proj", "status").code != 0);  // no repository there until released
  auto a = cli.apply(e["id"], true);
  REQUIRE_MESSAGE(a.code == 0, a.err);
  CHECK(a.out.find("released") != std::string::npos);
  CHECK(git(ws.path() / "proj", "status").code == 0);
}

TEST_CASE("held: moved across filesystems without following a symlink, settled once, released in place") {
  test::TempDir ws, outside;
  // The state directory on another filesystem than the workspace when there is one (rename: EXDEV).
  std::string tmpl =
      (fs::exists("/dev/shm") ? std::string("/dev/shm") : fs::temp_directory_path().string()) + "/subagent-held-XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()));
  const fs::path state = tmpl;
  ws.write("src/main.c", "int main;\n");
  const std::string id = "abc123";
  supervisor::record_spawn(state, id,
                           supervisor::watch_later_execution(ws.path(), supervisor::default_later_execution()));
  CHECK(fs::exists(state / "held" / id / "spawn.json"));
  // What a child leaves: a repository whose .git it made unwritable, a symlinked directory on the
  // way to a listed path (its target must stay where it is), a listed name that is a symlink.
  ws.write("proj/.git/config", "[core]\n");
  fs::permissions(ws.path() / "proj/.git", fs::perms::owner_read | fs::perms::owner_exec);
  outside.write("workflows/ci.yml", "on: push\n");
  fs::create_directory_symlink(outside.path(), ws.path() / ".github");
  fs::create_symlink("/etc/passwd", ws.path() / ".envrc");
  supervisor::HeldReport r = supervisor::settle_later_execution(state, id);
  INFO(r.failed.size());
  CHECK(r.failed.empty());
  std::set<std::string> held(r.held.begin(), r.held.end());
  CHECK(held == std::set<std::string>{".envrc", ".github", "proj/.git"});
  CHECK_FALSE(fs::exists(fs::symlink_status(ws.path() / ".github")));
  CHECK_FALSE(fs::exists(fs::symlink_status(ws.path() / ".envrc")));
  CHECK_FALSE(fs::exists(ws.path() / "proj/.git"));
  CHECK(fs::exists(outside.path() / "workflows/ci.yml"));  // the link moved, not its target
  CHECK(fs::exists(ws.path() / "src/main.c"));
  const fs::path files = state / "held" / id / "files";
  CHECK(fs::is_symlink(files / ".github"));
  CHECK(test::slurp(files / "proj/.git/config") == "[core]\n");
  CHECK_FALSE(fs::exists(state / "held" / id / "spawn.json"));
  CHECK(supervisor::settle_later_execution(state, id).held == r.held);  // once: the record answers again

  auto refused = supervisor::release_held(state, id, false);
  CHECK_FALSE(refused.ok);
  CHECK_FALSE(fs::exists(ws.path() / "proj/.git"));
  auto released = supervisor::release_held(state, id, true);
  CHECK_MESSAGE(released.ok, released.message);
  CHECK(fs::read_symlink(ws.path() / ".github") == outside.path());
  CHECK(fs::read_symlink(ws.path() / ".envrc") == "/etc/passwd");
  CHECK(test::slurp(ws.path() / "proj/.git/config") == "[core]\n");
  CHECK((fs::status(ws.path() / "proj/.git").permissions() & fs::perms::owner_write) == fs::perms::none);
  fs::permissions(ws.path() / "proj/.git", fs::perms::owner_all);
  fs::remove_all(state);
}

TEST_CASE(
    "writer lock: workers on repo and repo/sub never run at once; unrelated directories do; run waits with a line") {
  test::TempDir repo, other;
  make_repo(repo);
  Cli cli;
  test::RunResult holder;
  // The holder holds until the test lets it go (a file it polls for), not for a fixed time: on a
  // busy machine the steps below can take longer than any fixed sleep.
  std::thread t([&] {
    holder = cli.run("worker", repo.path(), "touch started; while [ ! -e release ]; do sleep 0.05; done",
                     {"--timeout", "120s"});  // bounded, should a REQUIRE below end the test early
  });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(repo.path() / "started") && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(fs::exists(repo.path() / "started"));
  // A worker below the holder waits, says so, and gives up at its timeout.
  auto below = cli.run("worker", repo.path() / "sub", "echo ran > ran.txt", {"--timeout", "1s"});
  json eb = envelope(below);
  CHECK(eb["status"] == "timeout");
  CHECK(eb["reason"].get<std::string>().find("workspace lock") != std::string::npos);
  CHECK(below.err.find("waiting: another writer holds the workspace") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / "sub/ran.txt"));
  // Twin: an unrelated directory runs at once, while the holder still holds its lock.
  auto unrelated = cli.run("worker", other.path(), "echo ran > ran.txt", {"--timeout", "20s"});
  CHECK(envelope(unrelated)["status"] == "completed");
  CHECK(fs::exists(other.path() / "ran.txt"));
  // A worker that waits long enough gets the lock when the holder is done (let go 1.5 s after the
  // waiting worker started, so that it has waited).
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    repo.write("release", "");
  });
  auto later = cli.run("worker", repo.path() / "sub", "echo ran > ran.txt", {"--timeout", "60s"});
  release.join();
  CHECK(envelope(later)["status"] == "completed");
  CHECK(later.err.find("waiting:") != std::string::npos);
  t.join();
  CHECK(envelope(holder)["status"] == "completed");
  CHECK(fs::exists(repo.path() / "sub/ran.txt"));
}

TEST_CASE("writer lock: the hierarchy, across processes (flock)") {
  test::TempDir root, locks;
  fs::create_directories(root.path() / "a/b");
  fs::create_directories(root.path() / "c");
  auto a = supervisor::WorkspaceLock::try_acquire(root.path() / "a", locks.path());
  REQUIRE(a);
  CHECK_FALSE(supervisor::WorkspaceLock::try_acquire(root.path() / "a/b", locks.path()));  // below
  CHECK_FALSE(supervisor::WorkspaceLock::try_acquire(root.path(), locks.path()));          // above
  CHECK(supervisor::WorkspaceLock::try_acquire(root.path() / "c", locks.path()));          // beside
  a.reset();
  CHECK(supervisor::WorkspaceLock::try_acquire(root.path() / "a/b", locks.path()));
  // In a git repository the key is the repository's top: two subdirectories conflict.
  test::TempDir repo;
  make_repo(repo);
  fs::create_directories(repo.path() / "other");
  auto s = supervisor::WorkspaceLock::try_acquire(repo.path() / "sub", locks.path());
  REQUIRE(s);
  CHECK(s->root() == repo.path());
  CHECK_FALSE(supervisor::WorkspaceLock::try_acquire(repo.path() / "other", locks.path()));
}

TEST_CASE("serve and mcp apply: the explicit allow_flagged field") {
  test::TempDir repo, scripts;
  make_repo(repo);
  test::Serve serve({{"--child", test::program("fake_child").string(), "--child-arg", "shell", "--model",
                      test::replay(scripts, "m.jsonl", "{\"content\":\"unused\"}")}});
  serve.hello();
  std::string id = serve.spawn_bg("s1", {{"preset", "implementation"},
                                         {"workspace", repo.path().string()},
                                         {"brief", "printf '#!/bin/sh\\n' > tool.sh && chmod +x tool.sh"}});
  REQUIRE_FALSE(id.empty());
  json done = serve.child_done(id);
  CHECK(done["envelope"]["artifacts"]["patch"]["review"]["new_executables"] == json::array({"tool.sh"}));
  serve.send({{"type", "apply"}, {"id", "a1"}, {"child_id", id}});
  json refused = serve.reply("a1");
  CHECK(refused["ok"] == false);
  CHECK(refused["message"].get<std::string>().find("new executable tool.sh") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / "tool.sh"));
  serve.send({{"type", "apply"}, {"id", "a2"}, {"child_id", id}, {"allow_flagged", "yes"}});
  CHECK(serve.reply("a2")["type"] == "error");
  serve.send({{"type", "apply"}, {"id", "a3"}, {"child_id", id}, {"allow_flagged", true}});
  json applied = serve.reply("a3");
  CHECK_MESSAGE(applied["ok"] == true, applied.dump());
  CHECK(fs::exists(repo.path() / "tool.sh"));
}

TEST_CASE("serve: a worker's nested fsmonitor and hooksPath hook are held; serve's apply releases them") {
  test::TempDir repo, scripts, marks;
  make_repo(repo);
  REQUIRE(git(repo.path(), "config core.hooksPath .husky").code == 0);
  test::Serve serve({{"--child", test::program("fake_child").string(), "--child-arg", "shell", "--model",
                      test::replay(scripts, "m.jsonl", "{\"content\":\"unused\"}")}});
  serve.hello();
  std::string id = serve.spawn_bg(
      "s1", {{"preset", "worker"}, {"workspace", repo.path().string()}, {"brief", later_attack(marks.path())}});
  REQUIRE_FALSE(id.empty());
  json done = serve.child_done(id);
  const json& le = done["envelope"]["artifacts"]["later_execution"];
  INFO(le.dump());
  CHECK(contains(le["held"], "sub/.git"));
  CHECK(contains(le["held"], ".husky"));
  user_commands(repo.path());
  CHECK_FALSE(fs::exists(marks.path() / "fsmonitor"));
  CHECK_FALSE(fs::exists(marks.path() / "hook"));
  serve.send({{"type", "apply"}, {"id", "a1"}, {"child_id", id}});
  json refused = serve.reply("a1");
  CHECK(refused["ok"] == false);
  CHECK(refused["message"].get<std::string>().find("later-execution path .husky") != std::string::npos);
  serve.send({{"type", "apply"}, {"id", "a2"}, {"child_id", id}, {"allow_flagged", true}});
  json released = serve.reply("a2");
  CHECK_MESSAGE(released["ok"] == true, released.dump());
  user_commands(repo.path());  // twin
  CHECK(fs::exists(marks.path() / "fsmonitor"));
  CHECK(fs::exists(marks.path() / "hook"));
}

TEST_CASE("SIGKILL to serve while a worker runs: what it planted is live until the next start holds it") {
  test::TempDir repo, scripts, marks;
  make_repo(repo);
  REQUIRE(git(repo.path(), "config core.hooksPath .husky").code == 0);
  test::Serve serve({{"--child", test::program("fake_child").string(), "--child-arg", "shell", "--model",
                      test::replay(scripts, "m.jsonl", "{\"content\":\"unused\"}")}});
  serve.hello();
  // The child plants both files, then keeps running: the supervisor dies before the child ends.
  std::string id = serve.spawn_bg("s1", {{"preset", "worker"},
                                         {"workspace", repo.path().string()},
                                         {"brief", later_attack(marks.path()) + " && touch planted && sleep 600"}});
  REQUIRE_FALSE(id.empty());
  for (int i = 0; i < 3000 && !fs::exists(repo.path() / "planted"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(repo.path() / "planted"));
  const fs::path state = serve.state.path();
  const int status = serve.kill_and_reap(SIGKILL);
  REQUIRE(WIFSIGNALED(status));
  // What a dead supervisor left is live: the child's files are in the workspace (the quarantine's
  // stated window, docs/writers.md).
  CHECK(fs::exists(repo.path() / "sub/.git/config"));
  CHECK(fs::exists(repo.path() / ".husky/pre-commit"));

  // The next start of a command on the same state directory holds them.
  auto r = test::run({test::bin("subagent-supervisor").string(), "recover", "--state-dir", state.string()});
  INFO(r.out);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("held 2 later-execution path(s)") != std::string::npos);
  CHECK_FALSE(fs::exists(repo.path() / "sub/.git"));
  CHECK_FALSE(fs::exists(repo.path() / ".husky"));
  CHECK(fs::exists(repo.path() / "planted"));  // ordinary files stay where the child wrote them
  user_commands(repo.path());
  CHECK_FALSE(fs::exists(marks.path() / "fsmonitor"));
  CHECK_FALSE(fs::exists(marks.path() / "hook"));

  // Twin: released with apply, the same files run both programs on the same commands.
  auto a = test::run(
      {test::bin("subagent-supervisor").string(), "apply", id, "--allow-flagged", "--state-dir", state.string()});
  REQUIRE_MESSAGE(a.code == 0, a.err);
  user_commands(repo.path());
  CHECK(fs::exists(marks.path() / "fsmonitor"));
  CHECK(fs::exists(marks.path() / "hook"));
}

TEST_CASE("mcp agent_apply releases a worker's held files through the same code (allow_flagged explicit)") {
  test::TempDir repo, marks;
  make_repo(repo);
  REQUIRE(git(repo.path(), "config core.hooksPath .husky").code == 0);
  Cli cli;
  json e = envelope(cli.run("worker", repo.path(), later_attack(marks.path())));
  REQUIRE(e["status"] == "completed");
  CHECK(contains(e["artifacts"]["later_execution"]["held"], "sub/.git"));
  const std::string id = e["id"];
  auto call = [&](int n, json args) {
    return json{{"jsonrpc", "2.0"},
                {"id", n},
                {"method", "tools/call"},
                {"params", {{"name", "agent_apply"}, {"arguments", args}}}}
               .dump() +
           "\n";
  };
  // One mcp session per call: what the user's commands run in between is what the call left.
  auto mcp = [&](int n, json args) {
    std::string in = json{{"jsonrpc", "2.0"},
                          {"id", 1},
                          {"method", "initialize"},
                          {"params",
                           {{"protocolVersion", "2025-06-18"},
                            {"capabilities", json::object()},
                            {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}}
                         .dump() +
                     "\n" + json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump() + "\n" +
                     call(n, std::move(args));
    auto r = test::run(
        {test::bin("subagent-supervisor").string(), "mcp", "--state-dir", cli.state.path().string(), "--workspace",
         repo.path().string(), "--no-transcript", "--audit-log", (cli.state.path() / "mcp-audit.jsonl").string()},
        in);
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) {
      json j = json::parse(l, nullptr, false);
      if (j.is_object() && j.value("id", 0) == n) return j;
    }
    FAIL("no reply " << n << ": " << r.out << r.err);
    return json();
  };
  json refused = mcp(2, {{"child_id", id}});
  CHECK(refused["result"]["isError"] == true);
  CHECK(refused.dump().find("later-execution path sub/.git") != std::string::npos);
  user_commands(repo.path());
  CHECK_FALSE(fs::exists(marks.path() / "fsmonitor"));
  CHECK_FALSE(fs::exists(marks.path() / "hook"));
  json released = mcp(3, {{"child_id", id}, {"allow_flagged", true}});
  CHECK_MESSAGE(released["result"]["isError"] == false, released.dump());
  user_commands(repo.path());  // twin: released, the same commands run them
  CHECK(fs::exists(marks.path() / "fsmonitor"));
  CHECK(fs::exists(marks.path() / "hook"));
}

TEST_CASE("policy explain lists the later-execution paths and the patch caps") {
  test::TempDir repo;
  make_repo(repo);
  repo.write(".vscode/x", "{}");
  auto r = test::run(
      {test::bin("subagent-supervisor").string(), "policy", "explain", "worker", "--workspace", repo.path().string()});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("WRITES") != std::string::npos);
  CHECK(r.out.find(".github/workflows") != std::string::npos);
  CHECK(r.out.find("r--  .vscode") != std::string::npos);
  auto i = test::run({test::bin("subagent-supervisor").string(), "policy", "explain", "implementation"});
  CHECK(i.out.find("patch caps: 16777216 bytes, 2000 files") != std::string::npos);
}

TEST_CASE("mcp agent_apply: allow_flagged is explicit, and a wrong type is refused") {
  test::TempDir repo;
  make_repo(repo);
  Cli cli;
  json e = envelope(cli.run("implementation", repo.path(), "printf '#!/bin/sh\\n' > tool.sh && chmod +x tool.sh"));
  REQUIRE(e["status"] == "completed");
  const std::string id = e["id"];
  auto call = [&](int n, json args) {
    return json{{"jsonrpc", "2.0"},
                {"id", n},
                {"method", "tools/call"},
                {"params", {{"name", "agent_apply"}, {"arguments", args}}}}
               .dump() +
           "\n";
  };
  std::string in = json{{"jsonrpc", "2.0"},
                        {"id", 1},
                        {"method", "initialize"},
                        {"params",
                         {{"protocolVersion", "2025-06-18"},
                          {"capabilities", json::object()},
                          {"clientInfo", {{"name", "t"}, {"version", "1"}}}}}}
                       .dump() +
                   "\n" + json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump() + "\n" +
                   call(2, {{"child_id", id}, {"allow_flagged", "yes"}}) + call(3, {{"child_id", id}}) +
                   call(4, {{"child_id", id}, {"allow_flagged", true}});
  auto r = test::run(
      {test::bin("subagent-supervisor").string(), "mcp", "--state-dir", cli.state.path().string(), "--workspace",
       repo.path().string(), "--no-transcript", "--audit-log", (cli.state.path() / "mcp-audit.jsonl").string()},
      in);
  std::map<int, json> replies;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    json j = json::parse(l, nullptr, false);
    if (j.is_object() && j.contains("id") && j["id"].is_number()) replies[j["id"]] = j;
  }
  REQUIRE_MESSAGE(replies.count(4), r.out << r.err);
  CHECK(replies[2]["result"]["isError"] == true);
  CHECK(replies[2].dump().find("allow_flagged: must be true or false") != std::string::npos);
  CHECK(replies[3]["result"]["isError"] == true);
  CHECK(replies[3].dump().find("new executable tool.sh") != std::string::npos);
  CHECK(replies[4]["result"]["isError"] == false);
  CHECK(fs::exists(repo.path() / "tool.sh"));
}

TEST_CASE("a planted .git naming another repository: the supervisor neither follows nor reads it") {
  test::TempDir secret;
  secret.write("secret.txt", "SECRET\n");
  REQUIRE(git(secret.path(), "init -q").code == 0);
  REQUIRE(git(secret.path(), "add -A").code == 0);
  REQUIRE(git(secret.path(), "commit -qm secret").code == 0);
  const std::string sg = (secret.path() / ".git").string();
  const std::string probe = "test -e secret.txt && echo LEAK > leak.txt; echo ok > done.txt";
  Cli cli;
  SUBCASE("a .git file (gitdir: ...) that the repository does not name back") {
    test::TempDir ws;
    ws.write("a.txt", "a\n");
    REQUIRE(worker_released(cli, ws.path(), "printf 'gitdir: " + sg + "\\n' > .git")["status"] == "completed");
    json e = envelope(cli.run("implementation", ws.path(), probe));
    CHECK(e["status"] == "failed");
    CHECK(e["reason"].get<std::string>().find("refusing to use it") != std::string::npos);
    // Twin: plain git follows the planted file into the other repository.
    CHECK(git(ws.path(), "log --oneline").out.find("secret") != std::string::npos);
  }
  SUBCASE("a .git directory whose refs and objects are symlinks into the other repository") {
    test::TempDir ws;
    ws.write("a.txt", "a\n");
    REQUIRE(worker_released(cli, ws.path(),
                            "mkdir .git && echo 'ref: refs/heads/master' > .git/HEAD && "
                            "printf '[core]\\n\\trepositoryformatversion = 0\\n' > .git/config && "
                            "ln -s " +
                                sg + "/refs .git/refs && ln -s " + sg + "/objects .git/objects")["status"] ==
            "completed");
    REQUIRE(git(secret.path(), "branch -m master").code == 0);
    json e = envelope(cli.run("implementation", ws.path(), probe));
    INFO(e.dump());
    // The supervisor's git cannot read through the symlinks: no worktree of the other repository.
    if (e["status"] == "completed") {
      CHECK(contains(e["artifacts"]["patch"]["files"], "done.txt"));
      CHECK_FALSE(contains(e["artifacts"]["patch"]["files"], "leak.txt"));
    } else {
      CHECK(e["status"] == "failed");
    }
    // Twin: plain git reads the other repository's history through them.
    CHECK(git(ws.path(), "log --oneline").out.find("secret") != std::string::npos);
  }
}

TEST_CASE("the writes section: bad entries are refused naming the field; absent means the shipped defaults") {
  json doc = supervisor::read_jsonc_file(test::policy_dir() / "worker.json");
  auto parse = [&](const json& writes) {
    json d = doc;
    d["writes"] = writes;
    return supervisor::parse_preset(d, "worker.json", "x");
  };
  for (const std::string bad : {"../up", "/abs", "**/a/b", "a/./b", ""}) {
    INFO(bad);
    try {
      parse({{"later_execution", {bad}}});
      FAIL("accepted");
    } catch (const supervisor::PresetError& e) {
      CHECK(std::string(e.what()).find("writes.later_execution") != std::string::npos);
    }
  }
  CHECK_THROWS_WITH_AS(parse({{"max_patch_bytes", 0}}), doctest::Contains("writes.max_patch_bytes"),
                       supervisor::PresetError);
  CHECK_THROWS_WITH_AS(parse({{"bogus", 1}}), doctest::Contains("writes.bogus"), supervisor::PresetError);
  CHECK(parse({{"later_execution", {"**/.envrc", "tools/run.sh"}}}).writes.later_execution.size() == 2);  // twin
  json d = doc;
  d.erase("writes");
  CHECK(supervisor::parse_preset(d, "worker.json", "x").writes.later_execution ==
        supervisor::default_later_execution());
  CHECK(supervisor::is_later_execution("a/b/.git/config", {"**/.git"}));
  CHECK(supervisor::is_later_execution(".github/workflows/ci.yml", {".github/workflows"}));
  CHECK_FALSE(supervisor::is_later_execution(".github/CODEOWNERS", {".github/workflows"}));
  CHECK_FALSE(supervisor::is_later_execution("src/git.c", {"**/.git"}));
}
