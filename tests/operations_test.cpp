// The operations layer every front end is a codec over (frontends/operations.hpp), on the in-process
// runtime: spawn, list, output and waits, cancel, approvals, apply, drain and shutdown, with scripted
// children and no fork. serve_test, mcp_test, the MCP SDK tests and run_cli_test drive the same layer
// through the real programs.
#include "frontends/operations.hpp"
#include "frontends/parent_loop.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <boost/asio/post.hpp>

#include "runtime/in_process_runtime.hpp"
#include "test_util.hpp"

using namespace supervisor;
using nlohmann::json;
namespace proto = protocol;

namespace {

// A child that asks to run one command (the worker preset marks run_command "ask"), reports what it
// was told in its final summary ("allowed" or "denied: REASON"), and exits. Until told, it waits;
// `stay`: once told, it goes on waiting until wrap_up.
ChildScript asks_once(bool stay = false) {
  return [stay](std::shared_ptr<ScriptedChild> c) {
    c->send(proto::Hello{{1}, "script/1"});
    std::weak_ptr<ScriptedChild> weak = c;
    c->on_message([weak, stay](const proto::SupervisorMessage& m) {
      auto child = weak.lock();
      if (!child) return;
      if (std::holds_alternative<proto::Welcome>(m)) {
        child->send(proto::ToolRequest{"t1", "run_command", {{"command", "true"}}});
      } else if (const auto* d = std::get_if<proto::ToolDecision>(&m)) {
        if (d->allow) child->send(proto::ToolDone{d->id, true, 1, {}});
        if (stay) return;
        child->send(proto::Final{d->allow ? "allowed" : "denied: " + d->reason, "a", json::object()});
        child->exit(0);
      } else if (std::holds_alternative<proto::WrapUp>(m)) {
        child->send(proto::Final{"wrapped up", "a", json::object()});
        child->exit(0);
      }
    });
  };
}

// A child that finishes once the test says so (release()).
struct Held {
  std::vector<std::weak_ptr<ScriptedChild>> children;
  ChildScript script() {
    return [this](std::shared_ptr<ScriptedChild> c) {
      c->send(proto::Hello{{1}, "script/1"});
      children.push_back(c);
      std::weak_ptr<ScriptedChild> weak = c;
      c->on_message([weak](const proto::SupervisorMessage& m) {
        auto child = weak.lock();
        if (child && std::holds_alternative<proto::WrapUp>(m)) {
          child->send(proto::Final{"wrapped up", "a", json::object()});
          child->exit(0);
        }
      });
    };
  }
  void release() {
    for (auto& w : children)
      if (auto c = w.lock(); c && !c->ended()) {
        c->send(proto::Final{"released", "a", json::object()});
        c->exit(0);
      }
  }
};

// A replay script behind a FIFO: reading it waits until write_now() (or 20 s, so a test whose loop is
// stuck reading it fails rather than hangs). The writer never blocks: it retries a non-blocking open
// until a reader is there.
struct FifoScript {
  std::filesystem::path path;
  std::atomic<bool> go{false};
  std::thread writer;
  explicit FifoScript(std::filesystem::path p) : path(std::move(p)) {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    writer = std::thread([this] {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!go && std::chrono::steady_clock::now() < limit) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      int fd = -1;
      while ((fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 && errno == ENXIO &&
             std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (fd < 0) return;
      const std::string script = "{\"content\":\"done\"}\n";
      (void)!::write(fd, script.data(), script.size());
      ::close(fd);
    });
  }
  ~FifoScript() {
    go = true;
    writer.join();
  }
  void write_now() { go = true; }
  void remove() {
    writer.join();
    std::filesystem::remove(path);
    writer = std::thread([] {});
  }
};

struct Fixture {
  test::TempDir root;
  boost::asio::io_context io;
  HubConfig cfg;
  explicit Fixture(ChildScript script) {
    cfg.policy_dir = test::policy_dir();
    cfg.child_executable = "/nonexistent/in-process";  // the runtime runs scripts
    cfg.default_model = "replay:" + root.write("model.jsonl", "{\"content\":\"done\"}\n");
    cfg.workspaces = {root.path() / "locks", root.path() / "state"};
    cfg.runtime = std::make_shared<InProcessRuntime>(std::move(script));
    std::filesystem::create_directories(root.path() / "ws");
  }
  SpawnRequest request(const std::string& preset = "explore") const {
    SpawnRequest r;
    r.preset = preset;
    r.brief = "test";
    r.description = "ops";
    r.workspace = std::filesystem::canonical(root.path() / "ws");
    return r;
  }
  // A spawn, answered: runs the loop until its checks are done (they run on a worker).
  Operations::Spawned spawn(Operations& ops, const SpawnRequest& r, Hub::DoneHandler done) {
    std::optional<Operations::SpawnAnswer> a;
    ops.spawn(
        r, [&](const Operations::SpawnAnswer& x) { a = x; }, std::move(done));
    run_until([&] { return a.has_value(); });
    if (a->error) std::rethrow_exception(a->error);
    return *a->spawned;
  }
  void run_until(const std::function<bool()>& done) {
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < limit) {
      io.restart();
      io.run_for(std::chrono::milliseconds(20));
    }
    REQUIRE_MESSAGE(done(), "the condition did not hold within 30 s");
  }
};

}  // namespace

TEST_CASE("operations: spawn, list, output, and waits that end with the child or their time") {
  Held held;
  Fixture f(held.script());
  Operations ops(f.io, f.cfg);
  int done_calls = 0;
  std::optional<proto::Envelope> env;
  auto s = f.spawn(ops, f.request(), [&](const proto::Envelope& e) {
    ++done_calls;
    env = e;
  });
  CHECK(s.child_id.size() > 0);
  CHECK(s.state != ChildState::done);
  REQUIRE(ops.list().size() == 1);
  CHECK(ops.list()[0].id == s.child_id);
  CHECK_FALSE(ops.idle());
  f.run_until([&] { return !held.children.empty() && ops.output(s.child_id)->state == ChildState::running; });

  // A wait that times out answers with the child still running; one that is dropped never answers.
  std::optional<ChildInfo> timed_out, woken;
  bool dropped_called = false;
  const auto t1 = ops.wait(s.child_id, std::chrono::milliseconds(50), [&](const ChildInfo& i) { timed_out = i; });
  const auto t2 = ops.wait(s.child_id, std::chrono::seconds(60), [&](const ChildInfo& i) { woken = i; });
  const auto t3 = ops.wait(s.child_id, std::chrono::seconds(60), [&](const ChildInfo&) { dropped_called = true; });
  CHECK(ops.waiting(t1));
  CHECK(ops.stop_waiting(t3));
  CHECK_FALSE(ops.stop_waiting(t3));
  f.run_until([&] { return timed_out.has_value(); });
  CHECK(timed_out->state == ChildState::running);
  CHECK_FALSE(timed_out->envelope.has_value());
  CHECK_FALSE(ops.waiting(t1));
  CHECK(ops.waiting(t2));

  // The child's end wakes the long wait at once, after the spawn's own answer.
  held.release();
  f.run_until([&] { return woken.has_value(); });
  CHECK(done_calls == 1);
  REQUIRE(env.has_value());
  CHECK(env->status == proto::Status::completed);
  CHECK(woken->state == ChildState::done);
  REQUIRE(woken->envelope.has_value());
  CHECK(woken->envelope->summary.text == "released");
  CHECK_FALSE(dropped_called);
  CHECK(ops.idle());

  // An ended child's wait answers at once; an unknown child's not at all (ticket 0).
  bool at_once = false;
  CHECK(ops.wait(s.child_id, std::chrono::seconds(60), [&](const ChildInfo& i) { at_once = i.envelope.has_value(); }) !=
        0);
  CHECK(at_once);
  bool unknown_called = false;
  CHECK(ops.wait("ffffffffffff", std::chrono::seconds(1), [&](const ChildInfo&) { unknown_called = true; }) == 0);
  CHECK_FALSE(unknown_called);
  CHECK_FALSE(ops.output("ffffffffffff").has_value());
  CHECK_FALSE(ops.cancel("ffffffffffff", "no such child"));
}

// README "Architecture": a spawn's checks read files (here the replay script), so they run on a
// worker. A script behind a FIFO with no writer yet holds that spawn only: the loop goes on serving
// the child already running, and the launch reads nothing again once the check has read it.
TEST_CASE(
    "operations: a spawn's checks run off the loop; a model script that cannot be read yet holds only its spawn") {
  Held held;
  Fixture f(held.script());
  Operations ops(f.io, f.cfg);
  std::optional<proto::Envelope> first_env;
  f.spawn(ops, f.request(), [&](const proto::Envelope& e) { first_env = e; });
  f.run_until([&] { return held.children.size() == 1; });

  FifoScript fifo(f.root.path() / "slow-model.jsonl");
  SpawnRequest slow = f.request();
  slow.model = "replay:" + fifo.path.string();
  std::optional<Operations::SpawnAnswer> answer;
  std::optional<proto::Envelope> slow_env;
  ops.spawn(
      slow, [&](const Operations::SpawnAnswer& a) { answer = a; }, [&](const proto::Envelope& e) { slow_env = e; });
  // Meanwhile the first child is served: it ends, and its envelope is delivered.
  held.release();
  f.run_until([&] { return first_env.has_value(); });
  CHECK(first_env->status == proto::Status::completed);
  CHECK_FALSE(answer.has_value());
  CHECK(ops.list().size() == 1);  // a spawn being checked is not a child yet
  fifo.write_now();
  f.run_until([&] { return answer.has_value(); });
  REQUIRE_FALSE(answer->error);
  // Its launch makes the provider from what the check read: with the script gone, a second read
  // would fail the child.
  fifo.remove();
  f.run_until([&] { return held.children.size() == 2; });
  held.release();
  f.run_until([&] { return slow_env.has_value(); });
  CHECK(slow_env->status == proto::Status::completed);
  CHECK(slow_env->id == answer->spawned->child_id);
}

TEST_CASE("operations: a spawn still being checked when a shutdown begins gets its id, then is cancelled unstarted") {
  Held held;
  Fixture f(held.script());
  Operations ops(f.io, f.cfg);
  FifoScript fifo(f.root.path() / "slow-model.jsonl");
  SpawnRequest slow = f.request();
  slow.model = "replay:" + fifo.path.string();
  std::vector<std::string> order;
  std::optional<Operations::SpawnAnswer> answer;
  std::optional<proto::Envelope> env;
  ops.spawn(
      slow,
      [&](const Operations::SpawnAnswer& a) {
        answer = a;
        order.push_back("answer");
      },
      [&](const proto::Envelope& e) {
        env = e;
        order.push_back("envelope");
      });
  bool shut = false;
  ops.shutdown("the parent left", [&] { shut = true; });
  // Asked for after the shutdown began: refused, and answered before the shutdown is done.
  std::optional<Operations::SpawnAnswer> late;
  ops.spawn(
      f.request(), [&](const Operations::SpawnAnswer& a) { late = a; }, [](const proto::Envelope&) {});
  f.run_until([&] { return late.has_value(); });
  REQUIRE(late->error);
  CHECK_FALSE(shut);  // it waits for the spawn being checked
  fifo.write_now();
  f.run_until([&] { return shut; });
  REQUIRE(answer.has_value());
  REQUIRE_FALSE(answer->error);
  REQUIRE(env.has_value());
  CHECK(order == std::vector<std::string>{"answer", "envelope"});
  CHECK(env->status == proto::Status::cancelled);
  CHECK(env->reason.find("the parent left") != std::string::npos);
  CHECK(held.children.empty());  // never started
}

TEST_CASE("operations: a spawn's errors are answered, never thrown, and name the field; nothing is started") {
  Fixture f(asks_once());
  Operations ops(f.io, f.cfg);
  auto refused = [&](SpawnRequest r) {
    std::optional<Operations::SpawnAnswer> answer;
    bool ended = false;
    ops.spawn(
        r, [&](const Operations::SpawnAnswer& a) { answer = a; }, [&](const proto::Envelope&) { ended = true; });
    CHECK_FALSE(answer.has_value());  // never within the call
    f.run_until([&] { return answer.has_value(); });
    CHECK_FALSE(ended);
    REQUIRE(answer->error);
    return answer->error;
  };
  auto what = [](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return std::string(ex.what());
    }
    return std::string();
  };
  // The types survive the worker: the front ends map them to their error codes.
  SpawnRequest bad_ws = f.request();
  bad_ws.workspace = f.root.path() / "missing";
  auto e = refused(bad_ws);
  CHECK_THROWS_AS(std::rethrow_exception(e), ScopeError);
  CHECK(what(e).find("workspace: '") == 0);
  SpawnRequest bad_model = f.request();
  bad_model.model = "replay:" + (f.root.path() / "nothing.jsonl").string();
  e = refused(bad_model);
  CHECK_THROWS_AS(std::rethrow_exception(e), ModelSpecError);
  CHECK(what(e).find("nothing.jsonl") != std::string::npos);
  SpawnRequest bad_preset = f.request("no-such-preset");
  e = refused(bad_preset);
  CHECK_THROWS_AS(std::rethrow_exception(e), PresetError);
  CHECK(what(e).find("no-such-preset") != std::string::npos);
  SpawnRequest wide = f.request();
  wide.max_disk_bytes = std::uint64_t{1} << 60;
  CHECK_THROWS_AS(std::rethrow_exception(refused(wide)), WideningError);
  CHECK(ops.list().empty());
  // The same request, valid: accepted.
  auto s = f.spawn(ops, f.request(), [](const proto::Envelope&) {});
  CHECK_FALSE(s.child_id.empty());
}

TEST_CASE("operations: an approval goes to the parent under an id, and the parent's answer reaches the child") {
  for (const bool allow : {true, false}) {
    CAPTURE(allow);
    Fixture f(asks_once());
    std::vector<std::pair<std::string, ApprovalRequest>> asked;
    Operations ops(f.io, f.cfg, [&](const std::string& id, const ApprovalRequest& r) { asked.emplace_back(id, r); });
    std::optional<proto::Envelope> env;
    auto s = f.spawn(ops, f.request("worker"), [&](const proto::Envelope& e) { env = e; });
    f.run_until([&] { return !asked.empty(); });
    REQUIRE(asked.size() == 1);
    CHECK(asked[0].first == "a1");
    CHECK(asked[0].second.child_id == s.child_id);
    CHECK(asked[0].second.tool == "run_command");
    CHECK(ops.asking("a1"));
    CHECK_FALSE(ops.approve("a2", true, "no such approval"));
    CHECK(ops.approve("a1", allow, allow ? "yes from the test" : "no from the test"));
    CHECK_FALSE(ops.asking("a1"));
    CHECK_FALSE(ops.approve("a1", true, "answered twice"));
    f.run_until([&] { return env.has_value(); });
    CHECK(env->summary.text == (allow ? "allowed" : "denied: approval denied: no from the test"));
  }
}

TEST_CASE("operations: without a parent to ask, and while draining, an approval is denied at once") {
  SUBCASE("nobody to ask") {
    Fixture f(asks_once());
    Operations ops(f.io, f.cfg);
    std::optional<proto::Envelope> env;
    f.spawn(ops, f.request("worker"), [&](const proto::Envelope& e) { env = e; });
    f.run_until([&] { return env.has_value(); });
    CHECK(env->summary.text.rfind("denied: ", 0) == 0);
  }
  SUBCASE("draining: the parent can no longer answer; the child still finishes and the drain ends") {
    Fixture f(asks_once());
    int asked = 0;
    Operations ops(f.io, f.cfg, [&](const std::string&, const ApprovalRequest&) { ++asked; });
    std::optional<proto::Envelope> env;
    // Asked for before the drain, checked after it began: it runs, as it would have then.
    std::optional<Operations::SpawnAnswer> answer;
    ops.spawn(
        f.request("worker"), [&](const Operations::SpawnAnswer& a) { answer = a; },
        [&](const proto::Envelope& e) { env = e; });
    bool drained = false;
    ops.drain("denied: nobody is left to answer", [&] { drained = true; });
    f.run_until([&] { return drained; });
    CHECK(asked == 0);
    REQUIRE(env.has_value());
    CHECK(env->status == proto::Status::completed);
    CHECK(env->summary.text == "denied: approval denied: denied: nobody is left to answer");
    REQUIRE(answer.has_value());
    CHECK_FALSE(answer->error);
  }
}

TEST_CASE("operations: shutdown denies a pending approval and cancels the child; an apply asked is answered") {
  Fixture f(asks_once());
  std::vector<std::string> asked;
  Operations ops(f.io, f.cfg, [&](const std::string& id, const ApprovalRequest&) { asked.push_back(id); });
  std::optional<proto::Envelope> env;
  f.spawn(ops, f.request("worker"), [&](const proto::Envelope& e) { env = e; });
  f.run_until([&] { return !asked.empty(); });
  // An apply of a child that left nothing: answered (with why), even though shutdown follows at once.
  std::optional<ApplyResult> applied;
  std::vector<std::string> order;
  ops.apply("0123456789ab", false, [&](ApplyResult r) {
    applied = std::move(r);
    order.push_back("apply");
  });
  bool ended = false;
  ops.shutdown("the supervisor is ending", [&] {
    ended = true;
    order.push_back("ended");
  });
  CHECK_FALSE(ops.asking(asked[0]));
  f.run_until([&] { return ended; });
  REQUIRE(applied.has_value());
  CHECK_FALSE(applied->ok);
  CHECK(applied->message.find("nothing to apply for child 0123456789ab") != std::string::npos);
  CHECK(order == std::vector<std::string>{"apply", "ended"});
  REQUIRE(env.has_value());
  // The denial reached the child before the cancel: it reported it, or the cancel ended it first.
  CHECK((env->summary.text == "denied: approval denied: the supervisor is ending" ||
         env->status == proto::Status::cancelled));
}

TEST_CASE("operations: applies are answered in the order asked, never on the caller's stack") {
  Fixture f(asks_once());
  Operations ops(f.io, f.cfg);
  std::vector<std::string> answered;
  for (const char* id : {"000000000001", "000000000002", "not-an-id"})
    ops.apply(id, false, [&answered, id](ApplyResult r) {
      CHECK_FALSE(r.ok);
      answered.push_back(id);
    });
  CHECK(answered.empty());
  f.run_until([&] { return answered.size() == 3; });
  CHECK(answered == std::vector<std::string>{"000000000001", "000000000002", "not-an-id"});
}

TEST_CASE(
    "operations: with no child left, shutdown still waits for the apply asked before it; one asked after is refused") {
  Fixture f(asks_once());
  Operations ops(f.io, f.cfg);
  std::vector<std::string> order;
  ops.apply("000000000001", false, [&](ApplyResult) { order.push_back("apply"); });
  ops.shutdown("the supervisor is ending", [&] { order.push_back("ended"); });
  f.run_until([&] { return order.size() == 2; });
  CHECK(order == std::vector<std::string>{"apply", "ended"});
  std::optional<ApplyResult> late;
  ops.apply("000000000001", false, [&](ApplyResult r) { late = std::move(r); });
  REQUIRE(late.has_value());  // at once: nothing would run it any more
  CHECK_FALSE(late->ok);
  CHECK(late->message.find("the supervisor is ending") != std::string::npos);
}

TEST_CASE("operations: an approval is forgotten when its child ends, and a drain denies one already asked") {
  SUBCASE("the child is cancelled while its approval waits") {
    Fixture f(asks_once());
    std::vector<std::string> asked;
    Operations ops(f.io, f.cfg, [&](const std::string& id, const ApprovalRequest&) { asked.push_back(id); });
    std::optional<proto::Envelope> env;
    auto s = f.spawn(ops, f.request("worker"), [&](const proto::Envelope& e) { env = e; });
    f.run_until([&] { return !asked.empty(); });
    CHECK(ops.asking(asked[0]));
    CHECK(ops.cancel(s.child_id, "the test cancels"));
    f.run_until([&] { return env.has_value(); });
    CHECK(env->status == proto::Status::cancelled);
    CHECK_FALSE(ops.asking(asked[0]));
    CHECK_FALSE(ops.approve(asked[0], true, "too late"));
  }
  SUBCASE("the session's approval timeout denies it: the layer forgets it too, while the child runs on") {
    Fixture f(asks_once(/*stay=*/true));
    f.cfg.approval_timeout = std::chrono::milliseconds(200);
    std::vector<std::string> asked;
    Operations ops(f.io, f.cfg, [&](const std::string& id, const ApprovalRequest&) { asked.push_back(id); });
    std::optional<proto::Envelope> env;
    f.spawn(ops, f.request("worker"), [&](const proto::Envelope& e) { env = e; });
    f.run_until([&] { return !asked.empty(); });
    CHECK(ops.asking(asked[0]));
    f.run_until([&] { return !ops.asking(asked[0]); });
    CHECK_FALSE(env.has_value());  // forgotten by the timeout, not by the child's end
    CHECK_FALSE(ops.approve(asked[0], true, "too late"));
    ops.shutdown("the test ends", [] {});
    f.run_until([&] { return env.has_value(); });
  }
  SUBCASE("drain: the pending approval is denied, so the child finishes without waiting for its timeout") {
    Fixture f(asks_once());
    f.cfg.approval_timeout = std::chrono::hours(1);
    std::vector<std::string> asked;
    Operations ops(f.io, f.cfg, [&](const std::string& id, const ApprovalRequest&) { asked.push_back(id); });
    std::optional<proto::Envelope> env;
    f.spawn(ops, f.request("worker"), [&](const proto::Envelope& e) { env = e; });
    f.run_until([&] { return !asked.empty(); });
    bool drained = false;
    ops.drain("nobody is left to answer", [&] { drained = true; });
    f.run_until([&] { return drained; });
    REQUIRE(env.has_value());
    CHECK(env->summary.text == "denied: approval denied: nobody is left to answer");
    CHECK_FALSE(ops.asking(asked[0]));
  }
}

// frontends/parent_loop.hpp: what a front end uses to keep a parent's requests in order while a
// spawn is checked off the loop.
TEST_CASE("request gate: requests after a held one wait and run in order; input pauses while it holds") {
  RequestGate gate;
  std::vector<std::string> ran;
  gate.on_hold = [&](bool holding) { ran.push_back(holding ? "pause" : "resume"); };
  gate.submit([&] { ran.push_back("1"); });
  CHECK(ran == std::vector<std::string>{"1"});  // nothing held: at once
  gate.hold();
  gate.submit([&] { ran.push_back("2"); });
  gate.submit([&] {
    ran.push_back("3");
    gate.hold();  // this one too is answered later
  });
  gate.submit([&] { ran.push_back("4"); });
  CHECK(ran == std::vector<std::string>{"1", "pause"});
  gate.release();
  CHECK(ran == std::vector<std::string>{"1", "pause", "2", "3"});  // stopped at the one that held; still paused
  gate.submit([&] { ran.push_back("5"); });
  gate.release();
  CHECK(ran == std::vector<std::string>{"1", "pause", "2", "3", "4", "5", "resume"});
  // A request that throws leaves the gate usable.
  gate.hold();
  gate.submit([] { throw std::runtime_error("bad"); });
  gate.submit([&] { ran.push_back("6"); });
  CHECK_THROWS(gate.release());
  gate.release();
  CHECK(ran.back() == "resume");
  CHECK(ran[ran.size() - 2] == "6");
}
