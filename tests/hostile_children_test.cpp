// Hostile children alongside good ones in one supervisor: `subagent-supervisor serve` runs as a real
// subprocess, driven through the control protocol as a parent drives it. For every kind of bad child
// (tests/programs/fake_child.cpp) the supervisor must stay up and answer `list` while the child
// misbehaves, the good children beside it must complete with correct envelopes, the bad child's
// envelope must carry the status protocol/README.md documents, and nothing may survive.
//
// One program serves as every child: `--child <copy of fake_child> --child-arg from_workspace`, and
// each spawn's workspace holds a `.fake-child` file naming its behaviour (even one that never says hello).
#include <doctest/doctest.h>
#include <sys/prctl.h>

#include <csignal>

#include "protocol/messages.hpp"
#include "serve_driver.hpp"

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A supervisor with a private copy of fake_child as its child program and per-spawn workspaces.
struct Bench {
  test::TempDir progs, scripts, spaces;
  fs::path child = test::private_program(progs, "fake_child", "hc");
  std::string model = test::replay(scripts, "fast", R"({"content":"## Summary\nquick"})");
  // Good children answer after a delay, so they are mid-run while the hostile child misbehaves.
  std::string slow_model = test::replay(scripts, "slow", R"({"content":"## Summary\ngood and slow","delay_ms":700})");
  int next_ws = 0;
  std::unique_ptr<test::Serve> serve;

  explicit Bench(std::vector<std::string> extra = {}, json hello_fields = json::object()) {
    std::vector<std::string> args = {"--child", child.string(), "--child-arg",      "from_workspace",
                                     "--model", model,          "--max-concurrent", "16"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve = std::make_unique<test::Serve>(test::Serve::Options{args});
    json h = serve->hello(hello_fields);
    REQUIRE_MESSAGE(h.value("type", "") == "hello", h.dump() << serve->stderr_text());
  }
  std::string name() const { return child.filename().string(); }
  // A fresh workspace whose children behave as `mode` ("good", "huge_line 1000", ...).
  std::string workspace(const std::string& mode) {
    fs::path w = spaces.path() / ("w" + std::to_string(next_ws++));
    fs::create_directories(w);
    std::ofstream(w / ".fake-child") << mode << "\n";
    return w.string();
  }
  std::string spawn(const std::string& mode, json extra = json::object()) {
    json f = {{"workspace", workspace(mode)}, {"description", mode}};
    f.update(extra);
    return serve->spawn_bg("spawn-" + std::to_string(next_ws), f);
  }
  std::string spawn_good() { return spawn("good", {{"model", slow_model}}); }
};

void check_good(const json& done) {
  REQUIRE_MESSAGE(done.is_object(), "a good child never reported");
  const json& e = done["envelope"];
  CHECK_MESSAGE(e["status"] == "completed", e.dump());
  CHECK(e["summary"] == "## Summary\ngood and slow");
  CHECK(e["answer"] == "## Summary\ngood and slow");
  CHECK(e["steps"] == 1);
  CHECK(e["exit"]["code"] == 0);
}

std::string state_of(const json& list, const std::string& id) {
  for (const auto& c : list["children"])
    if (c["child_id"] == id) return c["state"];
  return "";
}

// Waits until the child has said hello (its state in `list` is running and it used a step, or simply
// running for children that never take one).
void wait_running(test::Serve& s, const std::string& id) {
  for (int i = 0; i < 600; ++i) {
    json l = s.list("wait-" + std::to_string(i));
    REQUIRE_MESSAGE(l.is_object(), "list unanswered while waiting for " << id);
    if (state_of(l, id) == "running") return;
    std::this_thread::sleep_for(20ms);
  }
  FAIL("child " << id << " never ran");
}

struct Expect {
  std::string status;
  std::string reason;  // a substring of the envelope's reason
};

// The common shape: two good children, the hostile one, `list` while it misbehaves, `during` (e.g. a
// cancel), then every envelope, a new good child afterwards, a clean exit, and no survivors.
json alongside(const std::string& mode, const Expect& want, json spawn_extra = json::object(),
               const std::function<void(Bench&, const std::string&)>& during = nullptr,
               std::vector<std::string> serve_extra = {}) {
  CAPTURE(mode);
  Bench b(serve_extra);
  test::Serve& s = *b.serve;
  const std::string good1 = b.spawn_good();
  const std::string bad = b.spawn(mode, spawn_extra);
  const std::string good2 = b.spawn_good();
  REQUIRE(!good1.empty());
  REQUIRE(!bad.empty());
  REQUIRE(!good2.empty());

  json l = s.list("list-during");
  REQUIRE_MESSAGE(l.is_object(), "list unanswered while the hostile child runs");
  CHECK(l["children"].size() == 3);
  if (during) during(b, bad);

  json hostile = s.child_done(bad);
  REQUIRE_MESSAGE(hostile.is_object(), "the hostile child never reported; stderr: " << s.stderr_text());
  const json& e = hostile["envelope"];
  CHECK_MESSAGE(e["status"] == want.status, e.dump());
  CHECK_MESSAGE(e["reason"].get<std::string>().find(want.reason) != std::string::npos, e["reason"]);
  check_good(s.child_done(good1));
  check_good(s.child_done(good2));

  // Still at work: a new child after the hostile one completes too.
  const std::string after = b.spawn_good();
  check_good(s.child_done(after));
  CHECK(test::zombies_of(s.pid()) == 0);
  CHECK(test::children_of(s.pid()).empty());

  s.close_input();
  CHECK(s.wait_exit() == 0);
  CHECK(test::wait_none_named(b.name()) == 0);
  return e;
}

}  // namespace

TEST_CASE("stdout flood: a child that writes log lines forever is cancelled; the parent gets at most 1 MiB of it") {
  std::size_t logs = 0;
  json e =
      alongside("flood_forever", {"cancelled", "cancelled: stop the flood"}, json::object(),
                [&](Bench& b, const std::string& bad) {
                  wait_running(*b.serve, bad);
                  // The flood is on: the supervisor still answers at once.
                  for (int i = 0; i < 5; ++i) REQUIRE(b.serve->list("flood-" + std::to_string(i)).is_object());
                  b.serve->send({{"type", "cancel"}, {"id", "c"}, {"child_id", bad}, {"reason", "stop the flood"}});
                  CHECK(b.serve->reply("c")["type"] == "cancelling");
                  logs = b.serve->logs();
                });
  CHECK(e["exit"]["signal"] == "SIGKILL");
  // ~117-byte lines, capped at 1 MiB per child (then one line saying the rest is dropped).
  CHECK(logs < 10000);
}

TEST_CASE("stdout flood that ends: 24 MB of valid lines are read and the child completes") {
  alongside("flood 200000", {"completed", "final answer"});
}

TEST_CASE("a 100 MB line: protocol_error, and the supervisor never holds it in memory") {
  Bench b;
  test::Serve& s = *b.serve;
  const std::string good = b.spawn_good();
  const std::string bad = b.spawn("huge_line 104857600");
  REQUIRE(s.list("l").is_object());
  json hostile = s.child_done(bad);
  REQUIRE(hostile.is_object());
  CHECK(hostile["envelope"]["status"] == "protocol_error");
  CHECK(hostile["envelope"]["reason"].get<std::string>().find("line_too_long") != std::string::npos);
  check_good(s.child_done(good));
  const long hwm = test::status_kb(s.pid(), "VmHWM");
  MESSAGE("supervisor peak resident memory: " << hwm << " kB");
  CHECK(hwm > 0);
  // The line is 100 MiB; the reader keeps at most --max-line (1 MiB) of it.
  if (!test::kSanitized) CHECK(hwm < 64 * 1024);
  s.close_input();
  CHECK(s.wait_exit() == 0);
  CHECK(test::wait_none_named(b.name()) == 0);
}

TEST_CASE("invalid UTF-8: protocol_error") { alongside("invalid_utf8", {"protocol_error", "not valid UTF-8"}); }

TEST_CASE("an unknown message type: protocol_error naming it") {
  alongside("unknown_type", {"protocol_error", "unknown message type 'teleport'"});
}

TEST_CASE("a message cut mid-line followed by exit: protocol_error") {
  alongside("cut_line", {"protocol_error", "truncated"});
}

TEST_CASE("a line that is not JSON: protocol_error") { alongside("not_json", {"protocol_error", "not valid JSON"}); }

TEST_CASE("stdout closed while the process keeps running: protocol_error, and the process is killed") {
  // Before the fix the session waited for an exit that never came, until the wall-clock budget.
  json e = alongside("close_stdout", {"protocol_error", "closed its stdout but kept running"});
  CHECK(e["exit"]["signal"] == "SIGKILL");
  CHECK(e["duration_ms"].get<int>() < 30000);
}

TEST_CASE("wrap_up ignored: killed after the grace period, budget_exhausted") {
  json e = alongside("ignore_wrap_up", {"budget_exhausted", "did not wrap up within 10000 ms and was killed"},
                     {{"limits", {{"max_steps", 1}}}});
  CHECK(e["budget"] == "steps");
  CHECK(e["exit"]["signal"] == "SIGKILL");
}

TEST_CASE("cancel ignored (and SIGTERM, SIGINT, SIGHUP ignored): the tree is killed, cancelled") {
  json e = alongside("ignore_cancel", {"cancelled", "cancelled: go away"}, json::object(),
                     [](Bench& b, const std::string& bad) {
                       wait_running(*b.serve, bad);
                       b.serve->send({{"type", "cancel"}, {"id", "c"}, {"child_id", bad}, {"reason", "go away"}});
                       CHECK(b.serve->reply("c")["type"] == "cancelling");
                     });
  CHECK(e["exit"]["signal"] == "SIGKILL");
}

TEST_CASE("a child that never sends hello: protocol_error after the handshake timeout") {
  alongside("no_hello", {"protocol_error", "no hello within 10000 ms"});
}

TEST_CASE("a child that offers only an unknown protocol version: protocol_error") {
  alongside("bad_version", {"protocol_error", "no common protocol version"});
}

TEST_CASE("a child that crashes: failed with its signal") {
  json e = alongside("crash", {"failed", "killed by signal SIGSEGV"});
  CHECK(e["exit"]["signal"] == "SIGSEGV");
}

TEST_CASE("grandchildren forked to outlive the child (setsid, double fork) die with it") {
  const std::string gc = "hg" + std::to_string(::getpid() % 1000000);
  // reviewer: the default preset, explore, refuses fork itself (seccomp), so no grandchild would start.
  alongside("grandchild " + gc, {"failed", "exited with code 0 before sending a final answer"},
            {{"preset", "reviewer"}});
  CHECK(test::wait_none_named(gc) == 0);
}

TEST_CASE("twin: the same /proc scan sees a grandchild that really outlives its parent") {
  // fake_child's grandchild mode run directly, with no supervisor and no sandbox: the grandchild
  // escapes with setsid and a double fork, and the scan the test above relies on must find it.
  test::TempDir d;
  const std::string gc = "hv" + std::to_string(::getpid() % 1000000);
  protocol::Welcome w;
  w.child_id = "000000000000";
  w.task.brief = "b";
  const std::string welcome = protocol::encode_line(protocol::SupervisorMessage{w});
  auto r = test::run({test::program("fake_child").string(), "grandchild", gc}, welcome);
  CHECK(r.code == 0);
  auto pids = test::pids_named(gc);
  CHECK(pids.size() == 1);
  for (pid_t p : pids)
    if (p > 0) ::kill(p, SIGKILL);  // never 0 or -1
  CHECK(test::wait_none_named(gc) == 0);
}

TEST_CASE("a worker that holds the workspace lock and is killed: failed, and the waiting worker gets the lock") {
  Bench b;
  test::Serve& s = *b.serve;
  const std::string holder_name = "hl" + std::to_string(::getpid() % 1000000);
  const std::string ws = b.workspace("hang " + holder_name);
  const std::string good = b.spawn_good();
  const std::string holder = s.spawn_bg("holder", {{"preset", "worker"}, {"workspace", ws}, {"description", "holder"}});
  REQUIRE(!holder.empty());
  // Its new name shows it read its mode and holds on (the lock is the supervisor's, taken at start).
  std::vector<pid_t> pids;
  for (int i = 0; i < 3000 && pids.empty(); ++i, std::this_thread::sleep_for(10ms))
    pids = test::pids_named(holder_name);
  REQUIRE(pids.size() == 1);
  REQUIRE(pids[0] > 0);
  const std::string waiter = s.spawn_bg("waiter", {{"preset", "worker"}, {"workspace", ws}, {"description", "waiter"}});
  REQUIRE(!waiter.empty());
  json l = s.list("l1");
  REQUIRE(l.is_object());
  CHECK(state_of(l, waiter) == "waiting_for_lock");

  // The next child in this workspace behaves; then the holder dies from outside (as the OOM killer would).
  std::ofstream(fs::path(ws) / ".fake-child", std::ios::trunc) << "good\n";
  ::kill(pids[0], SIGKILL);

  json dead = s.child_done(holder);
  REQUIRE(dead.is_object());
  CHECK(dead["envelope"]["status"] == "failed");
  CHECK(dead["envelope"]["exit"]["signal"] == "SIGKILL");
  CHECK(dead["envelope"]["reason"].get<std::string>().find("killed by signal SIGKILL") != std::string::npos);
  json next = s.child_done(waiter);
  REQUIRE(next.is_object());
  CHECK(next["envelope"]["status"] == "completed");
  CHECK(next["envelope"]["summary"] == "## Summary\nquick");
  check_good(s.child_done(good));
  s.close_input();
  CHECK(s.wait_exit() == 0);
  CHECK(test::wait_none_named(b.name()) == 0);
  CHECK(test::wait_none_named(holder_name) == 0);
}

TEST_CASE("every hostile child at once, beside good children, in one supervisor") {
  const std::string gc = "ha" + std::to_string(::getpid() % 1000000);
  Bench b({"--max-concurrent", "16"});
  test::Serve& s = *b.serve;
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"flood 100000", "completed"},      {"huge_line 20000000", "protocol_error"},
      {"invalid_utf8", "protocol_error"}, {"unknown_type", "protocol_error"},
      {"cut_line", "protocol_error"},     {"not_json", "protocol_error"},
      {"close_stdout", "protocol_error"}, {"crash", "failed"},
      {"grandchild " + gc, "failed"},     {"exit_early", "failed"},
      {"bad_version", "protocol_error"},
  };
  std::vector<std::string> good, bad;
  for (int i = 0; i < 2; ++i) good.push_back(b.spawn_good());
  for (const auto& [mode, status] : hostile) bad.push_back(b.spawn(mode));
  for (int i = 0; i < 2; ++i) good.push_back(b.spawn_good());
  REQUIRE(s.list("during").is_object());
  for (std::size_t i = 0; i < bad.size(); ++i) {
    CAPTURE(hostile[i].first);
    json d = s.child_done(bad[i]);
    REQUIRE(d.is_object());
    CHECK_MESSAGE(d["envelope"]["status"] == hostile[i].second, d["envelope"].dump());
  }
  for (const auto& g : good) check_good(s.child_done(g));
  CHECK(test::zombies_of(s.pid()) == 0);
  s.close_input();
  CHECK(s.wait_exit() == 0);
  CHECK(test::wait_none_named(b.name()) == 0);
  CHECK(test::wait_none_named(gc) == 0);
}

TEST_CASE("flooding children and a parent that does not read: log lines are dropped, not queued without bound") {
  // Before the fix every log line was queued for the parent: with 8 flooding children and a slow
  // parent the supervisor's resident memory grew by tens of MB (seen in the soak).
  Bench b;
  test::Serve& s = *b.serve;
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(b.spawn("flood 100000"));  // 6 x 1 MiB of log for the parent
  // Do not read stdout until every flooding child is gone (the /proc scan, not a sleep).
  CHECK(test::wait_none_named(b.name(), std::chrono::seconds(120)) == 0);
  const long hwm = test::status_kb(s.pid(), "VmHWM");
  MESSAGE("supervisor peak resident memory: " << hwm << " kB");
  for (const auto& id : ids) {
    json d = s.child_done(id);
    REQUIRE(d.is_object());
    CHECK(d["envelope"]["status"] == "completed");
  }
  bool noted = false;
  for (const auto& l : s.log_lines()) noted |= l.find("log lines dropped") != std::string::npos;
  CHECK(s.logs() < 6 * 9000);  // fewer than the 6 x ~8,000 lines the per-child cap alone allows
  CHECK(noted);
  if (!test::kSanitized) CHECK(hwm < 40 * 1024);
  s.close_input();
  CHECK(s.wait_exit() == 0);
}

// Every denial is recorded and audited, and every request id remembered: a child that kept asking
// for a refused tool would grow the audit log and the supervisor without end. After 1,000 denials
// its next request ends it; the twin, 1,000 and then a final, completes.
TEST_CASE("a child that keeps asking for refused tools is ended after 1000 denials; at 1000 it completes") {
  json e = alongside("deny_flood 1001", {"protocol_error", "after 1000 denied tool requests"});
  CHECK(e["tools_denied"] == 1000);
  json twin = alongside("deny_flood 1000", {"completed", ""});
  CHECK(twin["tools_denied"] == 1000);
  CHECK(twin["answer"] == "denied 1000");
}

// A child that sends many calls the policy asks about, all at once: eight questions wait for the
// parent, the rest are denied without asking (rule "ask: too many waiting"). The twin sends eight:
// every one reaches the parent.
TEST_CASE("a child that asks about many calls at once: 8 questions reach the parent and the rest are denied at once") {
  for (const std::size_t n : {std::size_t{12}, std::size_t{8}}) {
    CAPTURE(n);
    Bench b({}, {{"approvals", true}});
    test::Serve& s = *b.serve;
    const std::string id = b.spawn("ask_flood " + std::to_string(n), {{"preset", "worker"}});
    REQUIRE(!id.empty());
    std::vector<json> asks;
    for (std::size_t i = 0; i < 8; ++i) {
      json a = s.next([](const json& j) { return j.value("type", "") == "approval_request"; });
      REQUIRE_MESSAGE(a.is_object(), "approval request " << i << " never came; stderr: " << s.stderr_text());
      CHECK(a["child_id"] == id);
      CHECK(a["tool"] == "run_command");
      asks.push_back(a);
    }
    // The child logs each answer as it comes: those past the eighth question come at once.
    auto at_once = [&] {
      std::size_t k = 0;
      for (const auto& l : s.log_lines()) k += l.find("already waiting for the parent") != std::string::npos;
      return k;
    };
    for (int i = 0; i < 200 && at_once() < n - 8; ++i) s.next([](const json&) { return false; }, 50ms);
    CHECK(at_once() == n - 8);
    // A ninth question would have reached the parent before those answers.
    CHECK(s.next([](const json& j) { return j.value("type", "") == "approval_request"; }, 300ms).is_null());
    for (const json& a : asks)
      s.send({{"type", "approval"}, {"approval_id", a["approval_id"]}, {"allow", false}, {"reason", "not now"}});
    json done = s.child_done(id);
    REQUIRE_MESSAGE(done.is_object(), s.stderr_text());
    const json& e = done["envelope"];
    CHECK_MESSAGE(e["status"] == "completed", e.dump());
    CHECK(e["tools_denied"] == n);
    std::size_t waiting = 0, declined = 0;
    for (const auto& d : e["denials"]) {
      waiting += d["rule"] == "ask: too many waiting";
      declined += d["rule"] == "ask: declined by parent";
    }
    CHECK(waiting == n - 8);
    CHECK(declined == 8);
    s.close_input();
    CHECK(s.wait_exit() == 0);
    CHECK(test::wait_none_named(b.name()) == 0);
  }
}
