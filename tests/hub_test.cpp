// The hub behind `serve` and `mcp`: scope checks (inherit, never widen), approvals, the concurrency
// and per-turn limits, cancel, the one-writer lock, and implementation worktrees with patches.
#include "scheduling/hub.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "offload/offload.hpp"
#include "test_util.hpp"

using namespace supervisor;
using nlohmann::json;
using protocol::Status;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  boost::asio::io_context io;
  test::TempDir state, locks, ws, scripts;
  HubConfig cfg;
  std::unique_ptr<Hub> hub;
  std::map<std::string, protocol::Envelope> done;

  Fixture() {
    ws.write("README.md", "hello\n");
    cfg.policy_dir = test::policy_dir();
    cfg.child_executable = test::bin("subagent-child");
    cfg.workspaces.state_dir = state.path();
    cfg.workspaces.lock_dir = locks.path();
    cfg.default_model = "replay:" + script("quick", R"({"content":"done"})");
  }
  std::string script(const std::string& name, const std::string& body) {
    return scripts.write(name + ".jsonl", body + "\n");
  }
  Hub& make() {
    hub = std::make_unique<Hub>(io, cfg);
    return *hub;
  }
  SpawnRequest req(const std::string& preset = "explore", const std::string& model = "") {
    SpawnRequest r;
    r.preset = preset;
    r.brief = "do it";
    r.workspace = ws.path();
    r.model = model;
    return r;
  }
  std::string spawn(const SpawnRequest& r) {
    return hub->spawn(r, [this, r](const protocol::Envelope& e) { done[e.id] = e; });
  }
  // Runs the loop until `pred` holds (or 60 s pass: a bound for slow, busy CI machines, not a timing).
  bool until(const std::function<bool()>& pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!pred() && std::chrono::steady_clock::now() < deadline) {
      io.restart();
      io.run_for(std::chrono::milliseconds(10));
      if (io.stopped()) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of work: no spin
    }
    return pred();
  }
  std::string state_of(const std::string& id) { return to_string(hub->info(id)->state); }
};

const char* kSlow =
    R"({"content":"working","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":150,"repeat":6})"
    "\n"
    R"({"content":"done"})";

}  // namespace

TEST_CASE("scope: a preset, tool, budget or domain outside the parent's scope is refused by name") {
  Fixture f;
  f.cfg.scope.presets = std::vector<std::string>{"explore", "research"};
  f.cfg.scope.tools = std::vector<std::string>{"read_file", "grep", "list_dir", "glob", "web_fetch"};
  f.cfg.scope.domains = std::vector<std::string>{"example.org"};
  f.cfg.scope.budgets.max_steps = 20;
  Hub& hub = f.make();
  CHECK_THROWS_WITH_AS(f.spawn(f.req("worker")), doctest::Contains("preset: 'worker' is outside the parent's scope"),
                       ScopeError);
  SpawnRequest r = f.req("research");
  CHECK_THROWS_WITH_AS(f.spawn(r), doctest::Contains("'web_search' is outside the parent's scope"), ScopeError);
  r.tools = std::vector<std::string>{"read_file", "grep", "web_fetch"};
  r.domains = std::vector<std::string>{"evil.example"};
  CHECK_THROWS_WITH_AS(f.spawn(r), doctest::Contains("domains: 'evil.example' is outside the parent's scope"),
                       ScopeError);
  r = f.req();
  r.limits.max_steps = 50;
  CHECK_THROWS_WITH_AS(f.spawn(r), doctest::Contains("limits.max_steps 50 exceeds the parent's scope max_steps 20"),
                       WideningError);
  r = f.req();
  r.tools = std::vector<std::string>{"write_file"};
  CHECK_THROWS_WITH_AS(f.spawn(r), doctest::Contains("the preset explore does not grant 'write_file'"), ScopeError);
  CHECK(hub.list().empty());  // nothing was started or queued

  // Twin: within scope it runs, and inherits the parent's smaller budget.
  std::string id = f.spawn(f.req());
  CHECK(hub.info(id)->progress.max_steps == 20);
  REQUIRE(f.until([&] { return f.done.count(id) == 1; }));
  CHECK(f.done[id].status == Status::completed);
}

TEST_CASE("a spawn takes its preset from what the hub read when it was made, not from the file now") {
  Fixture f;
  test::TempDir policies;
  for (const auto& e : fs::directory_iterator(test::policy_dir()))
    if (e.path().extension() == ".json") fs::copy_file(e.path(), policies.path() / e.path().filename());
  f.cfg.policy_dir = policies.path();
  f.make();
  fs::remove(policies.path() / "explore.json");  // no file left to read at spawn time
  std::string id = f.spawn(f.req("explore"));
  REQUIRE(f.until([&] { return f.done.count(id) == 1; }));
  CHECK_MESSAGE(f.done[id].status == Status::completed, f.done[id].reason);
  // The twin: a hub made now reads the directory as it is, and knows no explore preset.
  Hub later(f.io, f.cfg);
  CHECK_THROWS_WITH_AS(later.spawn(f.req("explore"), [](const protocol::Envelope&) {}),
                       doctest::Contains("unknown preset 'explore'"), PresetError);
}

TEST_CASE("per-spawn limits only tighten") {
  Fixture f;
  f.make();
  SpawnRequest r = f.req();
  r.limits.max_tool_calls = 500;
  CHECK_THROWS_WITH_AS(f.spawn(r),
                       doctest::Contains("limits.max_tool_calls 500 exceeds the preset explore's max_tool_calls 200"),
                       WideningError);
  r.limits.max_tool_calls = 5;
  std::string id = f.spawn(r);
  CHECK(f.hub->info(id)->progress.max_tool_calls == 5);
}

TEST_CASE("approvals: answered, denied, timed out, and no approver") {
  // worker asks before run_command that is not a build/test prefix.
  const std::string ask = R"({"tool_calls":[{"name":"run_command","arguments":{"command":"echo hi > out.txt"}}]})"
                          "\n"
                          R"({"content":"finished"})";
  auto run_with = [&](Approver approver, std::chrono::milliseconds timeout) {
    Fixture f;
    f.cfg.approver = std::move(approver);
    f.cfg.approval_timeout = timeout;
    std::vector<json> events;
    f.cfg.on_event = [&](const json& e) { events.push_back(e); };
    f.make();
    std::string id = f.spawn(f.req("worker", "replay:" + f.script("ask", ask)));
    REQUIRE(f.until([&] { return f.done.count(id) == 1; }));
    bool wrote = fs::exists(f.ws.path() / "out.txt");
    std::string reason;
    for (const auto& e : events)
      if (e["event"] == "tool_decision" && e["tool"] == "run_command") reason = e["reason"];
    return std::make_tuple(f.done[id], wrote, reason);
  };

  std::vector<ApprovalRequest> seen;
  auto [e1, wrote1, r1] = run_with(
      [&](const ApprovalRequest& r, ApprovalReply reply) {
        seen.push_back(r);
        reply(true, "looks fine");
      },
      std::chrono::seconds(5));
  CHECK(e1.status == Status::completed);
  CHECK(wrote1);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].tool == "run_command");
  CHECK(seen[0].preset == "worker");
  CHECK(seen[0].child_id == e1.id);
  CHECK(seen[0].args["command"] == "echo hi > out.txt");

  auto [e2, wrote2, r2] =
      run_with([](const ApprovalRequest&, ApprovalReply reply) { reply(false, "no"); }, std::chrono::seconds(5));
  CHECK_FALSE(wrote2);
  CHECK(e2.tools_denied == 1);
  REQUIRE(e2.denials.listed.size() == 1);
  CHECK(e2.denials.listed[0].tool == "run_command");
  CHECK(e2.denials.listed[0].rule == "ask: declined by parent");
  CHECK(e2.denials.listed[0].reason.find("; no") != std::string::npos);
  CHECK(e1.denials.total() == 0);

  auto [e3, wrote3, r3] =
      run_with([](const ApprovalRequest&, ApprovalReply) { /* never answers */ }, std::chrono::milliseconds(300));
  CHECK_FALSE(wrote3);
  CHECK(e3.tools_denied == 1);
  REQUIRE(e3.denials.listed.size() == 1);
  CHECK(e3.denials.listed[0].rule == "ask: approval timed out");
  CHECK(e3.denials.listed[0].reason.find("no answer within 300 ms") != std::string::npos);
  CHECK(e3.status == Status::completed);

  auto start = std::chrono::steady_clock::now();
  auto [e4, wrote4, r4] = run_with(nullptr, std::chrono::seconds(60));
  CHECK_FALSE(wrote4);
  CHECK(r4.find("no approver is attached") != std::string::npos);
  REQUIRE(e4.denials.listed.size() == 1);
  CHECK(e4.denials.listed[0].rule == "ask: no approver");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));  // never parked for the 60 s timeout
}

TEST_CASE("a hub destroyed with children starting and running: the loop runs on and nothing calls back") {
  // What ~Hub leaves behind (a cancelled session, a plan being prepared) may still finish if the
  // loop runs on: it must find no hub rather than a destroyed one, and the loop must end.
  Fixture f;
  f.cfg.default_model = "replay:" + f.script("slow", kSlow);
  f.make();
  const std::string running = f.spawn(f.req());
  REQUIRE(f.until([&] { return f.hub->info(running)->progress.steps >= 1; }));
  f.spawn(f.req());  // its plan is still being prepared
  f.hub.reset();
  f.io.restart();
  auto start = std::chrono::steady_clock::now();
  f.io.run_for(std::chrono::seconds(20));
  CHECK(f.io.stopped());  // ran out of work: nothing is left waiting
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  CHECK(f.done.empty());

  // The twin: the same two children under a hub that lives report their envelopes.
  f.make();
  const std::string a = f.spawn(f.req()), b = f.spawn(f.req());
  REQUIRE(f.until([&] { return f.done.size() == 2; }));
  CHECK(f.done[a].status == Status::completed);
  CHECK(f.done[b].status == Status::completed);
}

TEST_CASE("concurrency cap: extra spawns queue, and list shows them queued") {
  Fixture f;
  f.cfg.max_concurrent = 2;
  f.cfg.default_model = "replay:" + f.script("slow", kSlow);
  Hub& hub = f.make();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(f.spawn(f.req()));
  CHECK(hub.running() == 2);
  auto list = hub.list();
  REQUIRE(list.size() == 5);
  CHECK(std::string(to_string(list[0].state)) == "running");
  CHECK(std::string(to_string(list[2].state)) == "queued");
  CHECK(list[2].waiting_for.find("concurrency limit (2)") != std::string::npos);
  std::size_t max_running = 0;
  REQUIRE(f.until([&] {
    max_running = std::max(max_running, hub.running());
    return f.done.size() == 5;
  }));
  CHECK(max_running == 2);
  for (const auto& id : ids) CHECK(f.done[id].status == Status::completed);
}

TEST_CASE("per-turn limit: spawns past it wait for the next turn") {
  Fixture f;
  f.cfg.max_per_turn = 3;
  Hub& hub = f.make();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(f.spawn(f.req()));
  REQUIRE(f.until([&] { return f.done.size() == 3; }));
  f.until([] { return false; });  // give it time: nothing more may start this turn
  CHECK(f.done.size() == 3);
  CHECK(std::string(to_string(hub.info(ids[4])->state)) == "queued");
  CHECK(hub.info(ids[4])->waiting_for.find("per-turn limit (3)") != std::string::npos);
  hub.new_turn();
  REQUIRE(f.until([&] { return f.done.size() == 5; }));
}

TEST_CASE("the default per-turn limit is 24 and the concurrency limit 8, with compiled ceilings") {
  Fixture f;
  f.cfg.max_concurrent = 1000;
  f.cfg.max_per_turn = 1000;
  Hub& hub = f.make();
  CHECK(hub.config().max_concurrent == kMaxConcurrentCeiling);
  CHECK(hub.config().max_per_turn == kMaxPerTurnCeiling);
  CHECK(HubConfig{}.max_concurrent == 8);
  CHECK(HubConfig{}.max_per_turn == 24);
}

TEST_CASE("cancel: the whole tree dies, a cancelled envelope comes fast, nothing survives") {
  Fixture f;
  // Thirty steps of 200 ms: left alone, the child would run about six seconds more after its first step.
  f.cfg.default_model =
      "replay:" + f.script("long", R"({"content":"working","tool_calls":[{"name":"list_dir","arguments":{}}],)"
                                   R"("delay_ms":200,"repeat":30})"
                                   "\n"
                                   R"({"content":"done"})");
  f.cfg.max_concurrent = 1;
  const fs::path child = test::private_child(f.scripts);
  f.cfg.child_executable = child;
  Hub& hub = f.make();
  std::string running = f.spawn(f.req());
  std::string queued = f.spawn(f.req());
  REQUIRE(f.until([&] { return hub.info(running)->progress.steps >= 1; }));
  CHECK(test::processes_named(child.filename().string()) == 1);  // twin: the scan sees it while it lives
  CHECK(std::string(to_string(hub.info(queued)->state)) == "queued");
  CHECK(hub.cancel(queued, "test"));
  REQUIRE(f.until([&] { return f.done.count(queued) == 1; }));
  CHECK(f.done[queued].status == Status::cancelled);
  CHECK(f.done[queued].reason.find("before it started") != std::string::npos);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(hub.cancel(running, "test"));
  REQUIRE(f.until([&] { return f.done.count(running) == 1; }));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(f.done[running].status == Status::cancelled);
  // The tree is killed at once: the envelope comes well before the child could have finished its
  // script, and without waiting out the exit grace a polite stop would give it. (A bound, not a timing:
  // on a loaded machine this took 0.18 s; an unkilled child needs six.)
  CHECK(took < SessionConfig{}.exit_grace);
  CHECK(f.done[running].steps < 30);
  CHECK_FALSE(hub.cancel("000000000000", "x"));
  // No zombie or orphan: nothing runs this test's private copy of the child any more.
  CHECK(test::processes_named(child.filename().string()) == 0);
  int status;
  CHECK(::waitpid(-1, &status, WNOHANG) <= 0);
}

TEST_CASE("shutdown cancels everything and reports every envelope") {
  Fixture f;
  f.cfg.default_model = "replay:" + f.script("slow", kSlow);
  f.cfg.max_concurrent = 2;
  Hub& hub = f.make();
  for (int i = 0; i < 4; ++i) f.spawn(f.req());
  bool finished = false;
  hub.shutdown("end of input", [&] { finished = true; });
  REQUIRE(f.until([&] { return finished; }));
  CHECK(f.done.size() == 4);
  for (auto& [id, e] : f.done) CHECK(e.status == Status::cancelled);
  CHECK_THROWS_AS(f.spawn(f.req()), ScopeError);
}

TEST_CASE("worker lock: one writer per workspace, also through a symlink") {
  Fixture f;
  f.cfg.default_model = "replay:" + f.script("slow", kSlow);
  Hub& hub = f.make();
  fs::path link = f.scripts.path() / "link";
  fs::create_directory_symlink(f.ws.path(), link);
  std::string a = f.spawn(f.req("worker"));
  SpawnRequest via_link = f.req("worker");
  via_link.workspace = link;
  std::string b = f.spawn(via_link);
  std::string reader = f.spawn(f.req("explore"));  // readers never wait for the lock
  CHECK(std::string(to_string(hub.info(a)->state)) == "running");
  CHECK(std::string(to_string(hub.info(b)->state)) == "waiting_for_lock");
  CHECK(std::string(to_string(hub.info(reader)->state)) == "running");
  REQUIRE(f.until([&] { return f.done.count(a) == 1; }));
  CHECK(f.until([&] { return std::string(to_string(hub.info(b)->state)) != "waiting_for_lock"; }));
  REQUIRE(f.until([&] { return f.done.count(b) == 1; }));
  CHECK(f.done[b].status == Status::completed);
}

TEST_CASE("worker lock holds across supervisor processes (flock)") {
  test::TempDir ws, locks;
  auto held = WorkspaceLock::try_acquire(ws.path(), locks.path());
  REQUIRE(held);
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {  // another process: must not get it while we hold it
    auto other = WorkspaceLock::try_acquire(ws.path(), locks.path());
    char c = other ? 'y' : 'n';
    (void)!::write(pipefd[1], &c, 1);
    ::_exit(0);
  }
  char c = '?';
  REQUIRE(::read(pipefd[0], &c, 1) == 1);
  ::waitpid(pid, nullptr, 0);
  CHECK(c == 'n');
  held.reset();  // twin: released, the other process gets it
  pid = ::fork();
  if (pid == 0) {
    auto other = WorkspaceLock::try_acquire(ws.path(), locks.path());
    char d = other ? 'y' : 'n';
    (void)!::write(pipefd[1], &d, 1);
    ::_exit(0);
  }
  REQUIRE(::read(pipefd[0], &c, 1) == 1);
  ::waitpid(pid, nullptr, 0);
  CHECK(c == 'y');
}

TEST_CASE("worker lock: a bind mount of the workspace shares the lock") {
  test::TempDir ws, mnt, locks;
  if (::mount(ws.path().c_str(), mnt.path().c_str(), nullptr, MS_BIND, nullptr) != 0) {
    MESSAGE("skipped: cannot bind-mount here (" << std::strerror(errno) << ")");
    return;
  }
  {
    auto a = WorkspaceLock::try_acquire(ws.path(), locks.path());
    REQUIRE(a);
    CHECK_FALSE(WorkspaceLock::try_acquire(mnt.path(), locks.path()));
  }
  CHECK(WorkspaceLock::try_acquire(mnt.path(), locks.path()));
  ::umount2(mnt.path().c_str(), MNT_DETACH);
}

TEST_CASE("worker lock: a case variant on a case-insensitive filesystem shares the lock") {
  test::TempDir dir, locks;
  fs::path img = dir.path() / "ci.img", mnt = dir.path() / "mnt";
  fs::create_directory(mnt);
  auto mk = test::run({"/bin/sh", "-c",
                       "truncate -s 16M " + img.string() + " && mkfs.ext4 -q -F -O casefold " + img.string() +
                           " && mount -o loop " + img.string() + " " + mnt.string() + " && mkdir " + mnt.string() +
                           "/Work && chattr +F " + mnt.string() + "/Work"});
  if (mk.code != 0) {
    MESSAGE("skipped: cannot make a case-insensitive filesystem here: " << mk.err);
    return;
  }
  fs::path upper = mnt / "Work" / "Repo";
  fs::create_directory(upper);
  fs::path lower = mnt / "Work" / "repo";
  REQUIRE(fs::is_directory(lower));  // the case variant names the same directory
  {
    auto a = WorkspaceLock::try_acquire(upper, locks.path());
    REQUIRE(a);
    CHECK_FALSE(WorkspaceLock::try_acquire(lower, locks.path()));
  }
  CHECK(WorkspaceLock::try_acquire(lower, locks.path()));
  test::run({"/bin/umount", "-l", mnt.string()});
}

TEST_CASE("implementation children work in parallel worktrees and return independent patches") {
  Fixture f;
  auto git = [&](const std::string& args) {
    return test::run({"/bin/sh", "-c", "git -c user.name=t -c user.email=t@t " + args}, "", f.ws.path());
  };
  REQUIRE(git("init -q").code == 0);
  f.ws.write("src/a.txt", "alpha\n");
  f.ws.write("src/b.txt", "beta\n");
  REQUIRE(git("add -A").code == 0);
  REQUIRE(git("commit -qm base").code == 0);
  auto edit = [&](const std::string& name, const std::string& file, const std::string& from, const std::string& to) {
    return "replay:" + f.script(name, R"({"tool_calls":[{"name":"edit_file","arguments":{"path":")" + file +
                                          R"(","old_string":")" + from + R"(","new_string":")" + to +
                                          R"("}}],"delay_ms":100})"
                                          "\n"
                                          R"({"content":"## Summary\nedited"})");
  };
  Hub& hub = f.make();
  std::string a = f.spawn(f.req("implementation", edit("a", "src/a.txt", "alpha", "ALPHA")));
  std::string b = f.spawn(f.req("implementation", edit("b", "src/b.txt", "beta", "BETA")));
  CHECK(std::string(to_string(hub.info(a)->state)) == "running");
  CHECK(std::string(to_string(hub.info(b)->state)) == "running");  // no lock: they run side by side
  REQUIRE(f.until([&] { return f.done.size() == 2; }));
  for (const auto& id : {a, b}) {
    const auto& e = f.done[id];
    CHECK_MESSAGE(e.status == Status::completed, e.reason);
    REQUIRE(e.artifacts.contains("patch"));
    CHECK(e.artifacts["patch"]["files"].size() == 1);
  }
  CHECK(f.done[a].artifacts["patch"]["files"][0] == "src/a.txt");
  CHECK(f.done[b].artifacts["patch"]["files"][0] == "src/b.txt");
  // The workspace is untouched until the parent applies.
  CHECK(test::slurp(f.ws.path() / "src/a.txt") == "alpha\n");
  CHECK_FALSE(fs::exists(f.state.path() / "worktrees" / a));
  ApplyResult ra = apply_patch(f.state.path(), a);
  CHECK_MESSAGE(ra.ok, ra.message);
  CHECK(test::slurp(f.ws.path() / "src/a.txt") == "ALPHA\n");
  ApplyResult rb = apply_patch(f.state.path(), b);
  CHECK(rb.ok);
  CHECK(test::slurp(f.ws.path() / "src/b.txt") == "BETA\n");
}

TEST_CASE("worktrees of one repository made and removed on many threads at once all work") {
  // git's own `worktree add` reads every other worktree's admin directory, and `worktree prune`
  // removes one whose gitdir file is not written yet: without the repository lock in workspace/worktree.cpp
  // this failed with "failed to read .../commondir" (seen in the spawn-load benchmark).
  test::TempDir ws, state, locks;
  auto git = [&](const std::string& args) {
    return test::run({"/bin/sh", "-c", "git -c user.name=t -c user.email=t@t " + args}, "", ws.path());
  };
  REQUIRE(git("init -q").code == 0);
  for (int i = 0; i < 50; ++i) ws.write("src/f" + std::to_string(i) + ".txt", "x\n");
  REQUIRE(git("add -A").code == 0);
  REQUIRE(git("commit -qm base").code == 0);
  constexpr int kThreads = 8, kRounds = 5;
  std::mutex mutex;
  std::vector<std::string> errors;
  int made = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::string id = "wt" + std::to_string(t) + "r" + std::to_string(r);
        try {
          Worktree wt = create_worktree(ws.path(), state.path(), locks.path(), id);
          const bool ok = fs::exists(wt.path / "src/f0.txt") && fs::exists(wt.git_dir / "commondir");
          remove_worktree(wt);
          std::lock_guard lock(mutex);
          if (ok)
            ++made;
          else
            errors.push_back(id + ": the worktree is incomplete");
        } catch (const std::exception& e) {
          std::lock_guard lock(mutex);
          errors.push_back(id + ": " + e.what());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) MESSAGE(e);
  CHECK(errors.empty());
  CHECK(made == kThreads * kRounds);
  // Every worktree was removed, and the repository forgot them all.
  CHECK(git("worktree list --porcelain").out.find("wt") == std::string::npos);
}

TEST_CASE("a child holding a lock on the repository's .git does not stall worktree creation") {
  // Any child that can read the repository can flock(2) its .git (the base syscall group allows
  // flock; `subagent-supervisor sandbox --preset worker -- flock .git sleep 60` does it). The
  // supervisor's own lock is a file in its lock directory, which no child can reach.
  test::TempDir ws, state, locks;
  auto git = [&](const std::string& args) {
    return test::run({"/bin/sh", "-c", "git -c user.name=t -c user.email=t@t " + args}, "", ws.path());
  };
  REQUIRE(git("init -q").code == 0);
  ws.write("a.txt", "a\n");
  REQUIRE(git("add -A").code == 0);
  REQUIRE(git("commit -qm base").code == 0);
  const int held = ::open((ws.path() / ".git").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX | LOCK_NB) == 0);
  // The twin: the lock is real, another description cannot take it.
  const int other = ::open((ws.path() / ".git").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(other >= 0);
  CHECK(::flock(other, LOCK_EX | LOCK_NB) != 0);
  ::close(other);
  auto made = std::async(std::launch::async, [&] {
    Worktree wt = create_worktree(ws.path(), state.path(), locks.path(), "held1");
    const bool ok = fs::exists(wt.path / "a.txt");
    remove_worktree(wt);
    return ok;
  });
  const bool finished = made.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  ::close(held);  // lets a stalled creation finish, so that the test ends either way
  CHECK_MESSAGE(finished, "create_worktree waited for the lock a child held on .git");
  CHECK(made.get());
}

TEST_CASE("a stale patch is reported, not forced") {
  Fixture f;
  f.ws.write("notes.txt", "one\n");  // not a git repository: the child works in a copy
  std::string model =
      "replay:" +
      f.script(
          "e",
          R"({"tool_calls":[{"name":"edit_file","arguments":{"path":"notes.txt","old_string":"one","new_string":"two"}}]})"
          "\n"
          R"({"content":"done"})");
  f.make();
  std::string id = f.spawn(f.req("implementation", model));
  REQUIRE(f.until([&] { return f.done.count(id) == 1; }));
  REQUIRE(f.done[id].artifacts.contains("patch"));
  f.ws.write("notes.txt", "someone else changed this\n");
  ApplyResult r = apply_patch(f.state.path(), id);
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("no longer applies") != std::string::npos);
  CHECK(test::slurp(f.ws.path() / "notes.txt") == "someone else changed this\n");
  f.ws.write("notes.txt", "one\n");  // twin: on the original text it applies
  r = apply_patch(f.state.path(), id);
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(test::slurp(f.ws.path() / "notes.txt") == "two\n");
}

// ---- offload.hpp: blocking work off the loop ----------------------------------------------------

TEST_CASE("offloaded work runs on a worker thread and its result arrives on the loop thread") {
  boost::asio::io_context io;
  OffloadGroup jobs;
  const auto loop = std::this_thread::get_id();
  std::thread::id worker, done_on;
  std::optional<Outcome<int>> got;
  jobs.run(
      io,
      [&worker] {
        worker = std::this_thread::get_id();
        return 42;
      },
      [&](Outcome<int> r) {
        done_on = std::this_thread::get_id();
        got = std::move(r);
      });
  io.run();  // returns only once the result is in: the work keeps the loop busy
  REQUIRE(got);
  REQUIRE(*got);
  CHECK(*got->value == 42);
  CHECK(worker != loop);
  CHECK(done_on == loop);
}

TEST_CASE("offloaded work that throws reports its message; a destroyed group drops the result") {
  boost::asio::io_context io;
  std::optional<Outcome<void>> failed;
  {
    OffloadGroup jobs;
    jobs.run(
        io, [] { throw std::runtime_error("git worktree add failed: disk full"); },
        [&](Outcome<void> r) { failed = std::move(r); });
    io.run();
  }
  REQUIRE(failed);
  CHECK_FALSE(*failed);
  CHECK(failed->error == "git worktree add failed: disk full");

  // The twin: the same work with its group gone before the loop runs never calls back.
  io.restart();
  bool called = false;
  {
    OffloadGroup jobs;
    jobs.run(
        io, [] {}, [&called](Outcome<void>) { called = true; });
  }  // waits for the work if it already started
  io.run();
  CHECK_FALSE(called);
}

TEST_CASE("a destroyed group cancels its queued work: the loop is let go and nothing it captured outlives it") {
  // Four jobs of another group (on another loop) hold every pool thread, so the next job queues.
  boost::asio::io_context other;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int holding = 0;
  OffloadGroup blockers;
  for (int i = 0; i < 4; ++i)
    blockers.run(
        other,
        [&] {
          std::unique_lock lock(mu);
          ++holding;
          cv.notify_all();
          cv.wait(lock, [&] { return release; });
        },
        [](Outcome<void>) {});
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return holding == 4; }));
  }

  const auto loop = std::this_thread::get_id();
  std::thread::id freed_on;
  bool ran = false;
  auto captured = std::shared_ptr<int>(new int(1), [&](int* p) {
    freed_on = std::this_thread::get_id();
    delete p;
  });
  boost::asio::io_context io;
  {
    OffloadGroup jobs;
    jobs.run(
        io, [&ran, captured] { ran = true; }, [captured](Outcome<void>) {});
    captured.reset();
    io.poll();
    CHECK_FALSE(io.stopped());  // the queued job keeps the loop waiting for its result
  }
  // The group is gone: its job no longer holds the loop, and what it captured was freed here.
  io.poll();
  CHECK(io.stopped());
  CHECK(freed_on == loop);

  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  other.run();  // the blockers finish; the cancelled job must not run after them
  CHECK_FALSE(ran);

  // The twin: the same job in a group that lives until the loop runs out of work runs and reports.
  io.restart();
  bool reported = false;
  OffloadGroup jobs;
  jobs.run(
      io, [&ran] { ran = true; }, [&reported](Outcome<void> r) { reported = bool(r); });
  io.run();
  CHECK(ran);
  CHECK(reported);
}

TEST_CASE("an io_context destroyed with work in flight waits for it, and what the work held dies on the loop") {
  // The owner's `done` holds a strong reference (as a session does while its plan is prepared), so
  // the group outlives every other owner; the io_context's destructor must still end it cleanly.
  struct Owner : std::enable_shared_from_this<Owner> {
    std::thread::id* report = nullptr;
    bool* called = nullptr;
    OffloadGroup jobs;
    ~Owner() { *report = std::this_thread::get_id(); }
  };
  for (bool run_loop : {false, true}) {  // the twin runs the loop: then `done` is called
    CAPTURE(run_loop);
    std::thread::id died_on;
    bool called = false;
    std::mutex mu;
    std::condition_variable cv;
    bool started = false, release = false;
    auto io = std::make_unique<boost::asio::io_context>();
    std::weak_ptr<Owner> weak;
    {
      auto owner = std::make_shared<Owner>();
      owner->report = &died_on;
      owner->called = &called;
      weak = owner;
      owner->jobs.run(
          *io,
          [&] {
            std::unique_lock lock(mu);
            started = true;
            cv.notify_all();
            cv.wait(lock, [&] { return release; });
          },
          [self = owner->shared_from_this()](Outcome<void>) { *self->called = true; });
      std::unique_lock lock(mu);
      REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return started; }));
    }
    REQUIRE_FALSE(weak.expired());  // only the work keeps it
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard lock(mu);
      release = true;
      cv.notify_all();
    });
    if (run_loop) io->run();
    io.reset();  // waits for the running work; its posted result is destroyed with the loop
    releaser.join();
    CHECK(weak.expired());
    CHECK(died_on == std::this_thread::get_id());
    CHECK(called == run_loop);
  }
}
