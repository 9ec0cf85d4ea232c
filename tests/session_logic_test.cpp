// A session's logic on the in-process runtime (runtime/in_process_runtime.hpp): the protocol, the
// budgets and every way a child ends, with scripted children on the session's own loop, no fork. The
// same promises with the real sandboxed child are in session_test.cpp.
#include "runtime/in_process_runtime.hpp"

#include <doctest/doctest.h>

#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <atomic>
#include <filesystem>
#include <thread>

#include "session/budgets.hpp"
#include "session/scope.hpp"
#include "session/session.hpp"
#include "test_util.hpp"

using namespace supervisor;
using nlohmann::json;
namespace proto = protocol;
using proto::Status;

namespace {

struct Result {
  proto::Envelope env;
  std::vector<json> events;
  std::vector<std::string> logs;
  std::vector<Progress> progress;
  int done_calls = 0;
  std::size_t read_rate_pauses = 0;  // ChildSession::read_rate_pauses() at the end

  std::size_t count(const std::string& event) const {
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [&](const json& e) { return e["event"] == event; }));
  }
  const json* first(const std::string& event) const {
    for (const auto& e : events)
      if (e["event"] == event) return &e;
    return nullptr;
  }
};

struct Spec {
  ChildScript script;
  InProcessRuntime::Options runtime;
  BudgetOverrides limits;
  std::string replay = "{\"content\":\"done\"}\n";
  std::chrono::milliseconds handshake{10'000};
  std::chrono::milliseconds exit_grace{2'000};
  std::optional<std::chrono::milliseconds> cancel_after;
  std::function<void(ChildSession&)> after_done;  // runs on the loop once the envelope is out
  std::string preset = "explore";
  Approver approver;
  std::function<std::function<void()>()> wait_recorded;  // SessionConfig::wait_recorded
  std::size_t read_rate = SessionConfig{}.read_rate;     // SessionConfig::read_rate, read_burst
  std::size_t read_burst = SessionConfig{}.read_burst;
};

// The session of the run in progress, for a script that acts on it (a cancel at a chosen moment),
// and its loop, for a script that acts later (a line sent in pieces with pauses between them).
ChildSession* g_session = nullptr;
boost::asio::io_context* g_io = nullptr;

Result run(const Spec& s, std::shared_ptr<InProcessRuntime>* runtime_out = nullptr) {
  test::TempDir ws;
  test::TempDir scripts;
  const std::string script = scripts.write("script.jsonl", s.replay);
  boost::asio::io_context io;
  auto runtime = std::make_shared<InProcessRuntime>(s.script, s.runtime);
  if (runtime_out) *runtime_out = runtime;
  SessionConfig cfg;
  cfg.id = new_child_id();
  auto preset = std::make_shared<Preset>(load_preset(s.preset, test::policy_dir()));
  cfg.budgets = tighten(preset->budgets, s.limits, "the preset " + s.preset);
  cfg.approver = s.approver;
  cfg.wait_recorded = s.wait_recorded;
  cfg.preset = preset;
  cfg.brief = "test brief";
  cfg.description = "test";
  cfg.workspace = std::filesystem::canonical(ws.path());
  cfg.child_executable = "/nonexistent/in-process";  // never executed: the runtime runs a script
  cfg.handshake_timeout = s.handshake;
  cfg.exit_grace = s.exit_grace;
  cfg.read_rate = s.read_rate;
  cfg.read_burst = s.read_burst;
  cfg.runtime = runtime;
  Result out;
  cfg.on_event = [&](const json& e) { out.events.push_back(e); };
  cfg.on_log = [&](const std::string& l) { out.logs.push_back(l); };
  cfg.on_progress = [&](const Progress& p) { out.progress.push_back(p); };
  auto session = ChildSession::create(io, cfg, make_provider("replay:" + script, io));
  g_session = session.get();
  g_io = &io;
  session->start([&](const proto::Envelope& e) {
    out.env = e;
    ++out.done_calls;
    if (s.after_done) boost::asio::post(io, [&] { s.after_done(*session); });
  });
  boost::asio::steady_timer cancel_timer(io);
  if (s.cancel_after) {
    cancel_timer.expires_after(*s.cancel_after);
    cancel_timer.async_wait([&](boost::system::error_code ec) {
      if (!ec) session->cancel("test cancel");
    });
  }
  io.run_for(std::chrono::seconds(30));
  REQUIRE_MESSAGE(out.done_calls == 1, "the session did not finish exactly once");
  out.read_rate_pauses = session->read_rate_pauses();
  CHECK(runtime->alive() == 0);  // no child outlives its session
  g_session = nullptr;
  g_io = nullptr;
  session.reset();
  return out;
}

// hello; each model turn asked for in turn; `turns` turns, then final. A wrap_up is answered with a
// final at once unless `ignore_wrap_up`.
ChildScript turns_then_final(int turns, bool ignore_wrap_up = false) {
  return [turns, ignore_wrap_up](std::shared_ptr<ScriptedChild> c) {
    c->send(proto::Hello{{1}, "script/1"});
    auto asked = std::make_shared<int>(0);
    auto silent = std::make_shared<bool>(false);  // ignores wrap_up: never says anything again
    std::weak_ptr<ScriptedChild> weak = c;
    c->on_message([weak, asked, silent, turns, ignore_wrap_up](const proto::SupervisorMessage& m) {
      auto child = weak.lock();
      if (!child || *silent) return;
      const bool welcome = std::holds_alternative<proto::Welcome>(m);
      const bool answer =
          std::holds_alternative<proto::ModelResponse>(m) || std::holds_alternative<proto::ModelError>(m);
      if (std::holds_alternative<proto::WrapUp>(m)) {
        if (ignore_wrap_up) {
          *silent = true;
          return;
        }
        child->send(proto::Final{"wrapped up", "what I had", json::object()});
        child->exit(0);
        return;
      }
      if (!welcome && !answer) return;
      if (*asked < turns) {
        ++*asked;
        child->send(proto::ModelRequest{"m" + std::to_string(*asked),
                                        json::array({{{"role", "user"}, {"content", "go"}}}), json::array(),
                                        std::nullopt});
        return;
      }
      child->send(proto::Final{"all done", "the answer", json::object()});
      child->exit(0);
    });
  };
}

ChildScript hello_then(std::function<void(ScriptedChild&)> then) {
  return [then](std::shared_ptr<ScriptedChild> c) {
    c->send(proto::Hello{{1}, "script/1"});
    ScriptedChild* raw = c.get();
    c->on_message([raw, then](const proto::SupervisorMessage& m) {
      if (std::holds_alternative<proto::Welcome>(m)) then(*raw);
    });
  };
}

}  // namespace

TEST_CASE("in-process runtime: a scripted child completes, and every sandbox layer is reported missing") {
  Spec s;
  s.script = turns_then_final(1);
  auto r = run(s);
  CHECK(r.env.status == Status::completed);
  CHECK(r.env.summary.text == "all done");
  CHECK(r.env.answer.text == "the answer");
  CHECK(r.env.steps == 1);
  CHECK(r.env.exit.code == 0);
  CHECK(r.env.sandbox_applied.empty());
  CHECK(r.env.sandbox_missing.size() == 22);
  const json* started = r.first("started");
  REQUIRE(started);
  CHECK((*started)["runtime"] == "in_process");
  CHECK((*started)["runtime_id"].get<std::string>().rfind("in-process-", 0) == 0);
  CHECK_FALSE(started->contains("pid"));  // not a process of this host
  CHECK((*r.first("spawn"))["runtime"] == "in_process");
}

TEST_CASE("step budget: wrap_up sent when the steps are used, the final turn reports") {
  Spec s;
  s.limits.max_steps = 2;
  s.script = turns_then_final(1000);
  auto r = run(s);
  CHECK(r.env.status == Status::budget_exhausted);
  CHECK(r.env.budget == "steps");
  CHECK(r.env.summary.text == "wrapped up");
  CHECK(r.env.steps <= 2 + 1);  // the budget, and the wrap-up turn it reserves
  CHECK(r.count("budget") == 1);
}

TEST_CASE("wrap_up ignored: the child is killed after the grace and the envelope says so") {
  Spec s;
  s.limits.max_steps = 1;
  s.limits.wrap_up_grace_ms = 200;
  s.script = turns_then_final(1000, /*ignore_wrap_up=*/true);
  auto r = run(s);
  CHECK(r.env.status == Status::budget_exhausted);
  CAPTURE(r.env.reason);
  CHECK(r.env.reason.find("did not wrap up within 200 ms and was killed") != std::string::npos);
  CHECK(r.env.exit.signal == SIGKILL);
  CHECK(r.count("kill") == 1);
}

TEST_CASE("wall-clock budget: wrap_up with timeout, then the final turn") {
  Spec s;
  s.limits.timeout_ms = 300;
  s.script = [](std::shared_ptr<ScriptedChild> c) {
    c->send(proto::Hello{{1}, "script/1"});
    ScriptedChild* raw = c.get();
    c->on_message([raw](const proto::SupervisorMessage& m) {
      if (std::holds_alternative<proto::WrapUp>(m)) {
        CHECK(std::get<proto::WrapUp>(m).reason == "timeout");
        raw->send(proto::Final{"late", "timed out", json::object()});
        raw->exit(0);
      }
    });
  };
  auto r = run(s);
  CHECK(r.env.status == Status::timeout);
  CHECK(r.env.budget == "time");
  CHECK(r.env.reason.find("wrapped up with a final answer") != std::string::npos);
  CHECK(r.env.summary.text == "late");
}

TEST_CASE("protocol errors end the child with a reason naming the problem") {
  struct Case {
    const char* line;
    const char* reason;
  };
  for (const Case& c : {Case{"not json at all\n", "protocol error"}, Case{"{\"type\":\"teleport\"}\n", "teleport"},
                        Case{"{\"type\":\"log\",\"message\":\"\xC3\x28\"}\n", "UTF-8"}}) {
    CAPTURE(c.line);
    Spec s;
    const std::string line = c.line;
    s.script = hello_then([line](ScriptedChild& child) { child.send_raw(line); });
    auto r = run(s);
    CHECK(r.env.status == Status::protocol_error);
    CHECK(r.env.reason.find(c.reason) != std::string::npos);
    CHECK(r.env.exit.signal == SIGKILL);
  }
  SUBCASE("a message before hello") {
    Spec s;
    s.script = [](std::shared_ptr<ScriptedChild> c) { c->send(proto::Final{"x", "y", json::object()}); };
    auto r = run(s);
    CHECK(r.env.status == Status::protocol_error);
    CHECK(r.env.reason.find("expected hello first, got final") != std::string::npos);
  }
  SUBCASE("no hello at all") {
    Spec s;
    s.handshake = std::chrono::milliseconds(100);
    s.script = [](std::shared_ptr<ScriptedChild>) {};
    auto r = run(s);
    CHECK(r.env.status == Status::protocol_error);
    CHECK(r.env.reason.find("no hello within 100 ms") != std::string::npos);
  }
  SUBCASE("a second final") {
    Spec s;
    s.script = hello_then([](ScriptedChild& child) {
      child.send(proto::Final{"one", "1", json::object()});
      child.send(proto::Final{"two", "2", json::object()});
    });
    auto r = run(s);
    // The first final ended the session's reading: the envelope is the first answer's.
    CHECK(r.env.summary.text == "one");
  }
}

TEST_CASE("a child that exits without its final answer fails with its exit status") {
  Spec s;
  s.script = hello_then([](ScriptedChild& child) { child.exit(3); });
  auto r = run(s);
  CHECK(r.env.status == Status::failed);
  CHECK(r.env.reason == "the child exited with code 3 before sending a final answer");
  CHECK(r.env.exit.code == 3);
}

TEST_CASE("a child that closes its stdout but lives on is ended") {
  Spec s;
  s.exit_grace = std::chrono::milliseconds(100);
  s.script = hello_then([](ScriptedChild& child) { child.close_stdout(); });
  auto r = run(s);
  CHECK(r.env.status == Status::protocol_error);
  CHECK(r.env.reason.find("closed its stdout but kept running") != std::string::npos);
}

TEST_CASE("cancel kills the child and the envelope says cancelled") {
  Spec s;
  s.script = hello_then([](ScriptedChild&) {});
  s.cancel_after = std::chrono::milliseconds(50);
  auto r = run(s);
  CHECK(r.env.status == Status::cancelled);
  CHECK(r.env.reason == "cancelled: test cancel");
  CHECK(r.env.exit.signal == SIGKILL);
}

TEST_CASE("runtime: a start that fails ends the child failed, naming the runtime's error") {
  Spec s;
  s.script = turns_then_final(1);
  s.runtime.fail_start = "no node has the resources";
  std::shared_ptr<InProcessRuntime> rt;
  auto r = run(s, &rt);
  CHECK(r.env.status == Status::failed);
  CHECK(r.env.reason == "could not start the child: no node has the resources");
  CHECK(r.count("started") == 0);
  CHECK_FALSE(r.env.exit.code);
}

TEST_CASE("runtime: a queued child reports queued, then runs") {
  Spec s;
  s.script = turns_then_final(1);
  s.runtime.queued_for = std::chrono::milliseconds(100);
  auto r = run(s);
  CHECK(r.env.status == Status::completed);
  const json* q = r.first("runtime_state");
  REQUIRE(q);
  CHECK((*q)["state"] == "queued");
  CHECK(std::any_of(r.progress.begin(), r.progress.end(),
                    [](const Progress& p) { return p.state == ChildState::queued; }));
}

TEST_CASE("runtime: a child cancelled while queued never starts") {
  Spec s;
  s.script = turns_then_final(1);
  s.runtime.queued_for = std::chrono::seconds(20);
  s.cancel_after = std::chrono::milliseconds(50);
  std::shared_ptr<InProcessRuntime> rt;
  auto r = run(s, &rt);
  CHECK(r.env.status == Status::cancelled);
  CHECK(rt->started() == 0);
  CHECK(r.count("started") == 0);
}

TEST_CASE("runtime: a child its runtime loses fails, saying so") {
  Spec s;
  s.script = hello_then([](ScriptedChild&) {});
  s.runtime.lose_after = std::chrono::milliseconds(50);
  auto r = run(s);
  CHECK(r.env.status == Status::failed);
  CHECK(r.env.reason.find("the child was lost by its runtime (in_process): the node went away") != std::string::npos);
  CHECK_FALSE(r.env.exit.code);
  CHECK_FALSE(r.env.exit.signal);
}

TEST_CASE("nothing after the end changes the envelope") {
  Spec s;
  s.script = turns_then_final(1);
  s.after_done = [](ChildSession& session) {
    CHECK(session.done());
    session.cancel("too late");
  };
  auto r = run(s);
  CHECK(r.done_calls == 1);
  CHECK(r.env.status == Status::completed);
  CHECK(r.count("cancel") == 0);
}

TEST_CASE("two hundred children on one loop, no fork: each ends with its own envelope") {
  boost::asio::io_context io;
  auto runtime = std::make_shared<InProcessRuntime>(turns_then_final(2));
  test::TempDir ws, scripts;
  const std::string script = scripts.write("script.jsonl", "{\"content\":\"ok\",\"repeat\":\"forever\"}\n");
  auto preset = std::make_shared<Preset>(load_preset("explore", test::policy_dir()));
  std::vector<std::shared_ptr<ChildSession>> sessions;
  std::map<std::string, proto::Envelope> done;
  for (int i = 0; i < 200; ++i) {
    SessionConfig cfg;
    cfg.id = new_child_id();
    cfg.budgets = preset->budgets;
    cfg.preset = preset;
    cfg.brief = "b";
    cfg.workspace = std::filesystem::canonical(ws.path());
    cfg.child_executable = "/nonexistent/in-process";
    cfg.runtime = runtime;
    auto sess = ChildSession::create(io, cfg, make_provider("replay:" + script, io));
    sess->start([&done, id = cfg.id](const proto::Envelope& e) { done[id] = e; });
    sessions.push_back(sess);
  }
  io.run_for(std::chrono::seconds(60));
  REQUIRE(done.size() == 200);
  for (const auto& [id, e] : done) {
    CHECK(e.id == id);
    CHECK(e.status == Status::completed);
    CHECK(e.steps == 2);
  }
  CHECK(runtime->started() == 200);
  CHECK(runtime->alive() == 0);
}

TEST_CASE("a request already sent when the parent cancels runs nothing; the same request without the cancel runs") {
  for (const bool cancel : {true, false}) {
    CAPTURE(cancel);
    Spec s;
    s.script = [cancel](std::shared_ptr<ScriptedChild> c) {
      c->send(proto::Hello{{1}, "script/1"});
      ScriptedChild* raw = c.get();
      c->on_message([raw, cancel](const proto::SupervisorMessage& m) {
        if (std::holds_alternative<proto::Welcome>(m)) {
          // The request is in the pipe (a pipe takes a short line at once) before the cancel.
          raw->send(proto::ToolRequest{"t1", "grep", json{{"pattern", "x"}}});
          if (cancel) g_session->cancel("the parent changed its mind");
        } else if (std::holds_alternative<proto::ToolDecision>(m)) {
          raw->send(proto::ToolDone{"t1", true, 1, {}});
          raw->send(proto::Final{"ran", "ran", json::object()});
          raw->exit(0);
        }
      });
    };
    auto r = run(s);
    if (cancel) {
      CHECK(r.env.status == Status::cancelled);
      CHECK(r.env.tool_calls == 0);
      CHECK(r.env.tools_denied == 1);
    } else {
      CHECK(r.env.status == Status::completed);
      CHECK(r.env.tool_calls == 1);
      CHECK(r.env.tools_denied == 0);
    }
  }
}

// hello; at the welcome, `deliver` sends in one string a grep request for `pattern` (t1), a small
// one (t2) and a log line; once both are decided (recorded in `decided`), both are done and a final
// ends the child.
ChildScript two_greps_then_final(std::string pattern, std::shared_ptr<std::vector<std::string>> decided,
                                 std::function<void(const std::weak_ptr<ScriptedChild>&, std::string)> deliver) {
  return [pattern, decided, deliver](std::shared_ptr<ScriptedChild> c) {
    c->send(proto::Hello{{1}, "script/1"});
    std::weak_ptr<ScriptedChild> weak = c;
    c->on_message([weak, pattern, decided, deliver](const proto::SupervisorMessage& m) {
      auto child = weak.lock();
      if (!child) return;
      if (std::holds_alternative<proto::Welcome>(m)) {
        deliver(weak, proto::encode_line(proto::ToolRequest{"t1", "grep", json{{"pattern", pattern}}}) +
                          proto::encode_line(proto::ToolRequest{"t2", "grep", json{{"pattern", "small"}}}) +
                          proto::encode_line(proto::Log{"info", "after the long line"}));
      } else if (const auto* d = std::get_if<proto::ToolDecision>(&m)) {
        decided->push_back(d->id + (d->allow ? ":allow" : ":deny"));
        if (decided->size() < 2) return;
        child->send(proto::ToolDone{"t1", true, 1, {}});
        child->send(proto::ToolDone{"t2", true, 1, {}});
        child->send(proto::Final{"both ran", "both ran", json::object()});
        child->exit(0);
      }
    });
  };
}

// After two_greps_then_final: the first decision is t1's, its pattern whole as the child sent it,
// and the log line sent after both requests reached the log.
void check_long_grep_whole(const Result& r, const std::string& pattern) {
  const json* first = r.first("tool_decision");
  REQUIRE(first);
  CHECK((*first)["id"] == "t1");
  CHECK((*first)["args"]["pattern"].get<std::string>() == pattern);
  bool logged = false;
  for (const auto& l : r.logs) logged = logged || l.find("after the long line") != std::string::npos;
  CHECK(logged);
}

TEST_CASE("a line of over 64 KiB is decoded off the loop, in order with the lines sent after it") {
  // The long line and two short ones in one write: the short ones wait for the long one's decoding.
  auto decided = std::make_shared<std::vector<std::string>>();
  Spec s;
  s.script = two_greps_then_final(std::string(200 * 1024, 'b'), decided,
                                  [](const std::weak_ptr<ScriptedChild>& weak, std::string bytes) {
                                    if (auto child = weak.lock()) child->send_raw(std::move(bytes));
                                  });
  auto r = run(s);
  CHECK(r.env.status == Status::completed);
  CHECK(r.env.tool_calls == 2);
  CHECK(*decided == std::vector<std::string>{"t1:allow", "t2:allow"});
  std::vector<std::string> order;
  for (const auto& e : r.events)
    if (e["event"] == "tool_decision") order.push_back(e["id"]);
  CHECK(order == std::vector<std::string>{"t1", "t2"});
  check_long_grep_whole(r, std::string(200 * 1024, 'b'));
}

TEST_CASE("a child that exits right after a long line and its final loses neither") {
  // Twin: the same with a short line. Both must complete with the final's answer.
  for (const std::size_t size : {std::size_t{100}, std::size_t{300 * 1024}}) {
    CAPTURE(size);
    Spec s;
    s.script = hello_then([size](ScriptedChild& child) {
      child.send_raw(proto::encode_line(proto::Log{"info", std::string(size, 'l')}) +
                     proto::encode_line(proto::Final{"said it all", "the last word", json::object()}));
      child.exit(0);
    });
    auto r = run(s);
    CHECK(r.env.status == Status::completed);
    CHECK(r.env.answer.text == "the last word");
  }
}

// Sends `bytes` to the session in pieces of `piece` bytes, `pause` apart, then runs `then`.
void send_in_pieces(std::weak_ptr<ScriptedChild> weak, std::shared_ptr<std::string> bytes, std::size_t piece,
                    std::chrono::milliseconds pause, std::function<void(ScriptedChild&)> then) {
  auto child = weak.lock();
  if (!child || child->ended()) return;
  if (bytes->empty()) return then(*child);
  const std::size_t n = std::min(piece, bytes->size());
  child->send_raw(bytes->substr(0, n));
  bytes->erase(0, n);
  auto timer = std::make_shared<boost::asio::steady_timer>(*g_io, pause);
  timer->async_wait([timer, weak, bytes, piece, pause, then](boost::system::error_code ec) {
    if (!ec) send_in_pieces(weak, bytes, piece, pause, then);
  });
}

std::string varied(std::size_t size) {  // no two neighbouring 64 KiB blocks alike: a lost or doubled piece shows
  std::string s;
  s.reserve(size);
  for (std::size_t i = 0; s.size() < size; ++i) s += std::to_string(i) + ",";
  s.resize(size);
  return s;
}

TEST_CASE("a long line the child writes in pieces, with pauses, arrives whole and before the lines after it") {
  // The session gathers a long line across reads and waits for the pipe between pieces (the line
  // is decoded on a worker once whole); the short lines in the last piece come after it, in order.
  // Twin: the same line in one write.
  const std::string pattern = varied(300 * 1024);
  for (const std::size_t piece : {std::size_t{40 * 1024}, std::size_t{7 * 1024}, std::size_t{1 << 20}}) {
    CAPTURE(piece);
    auto decided = std::make_shared<std::vector<std::string>>();
    Spec s;
    s.script =
        two_greps_then_final(pattern, decided, [piece](const std::weak_ptr<ScriptedChild>& weak, std::string bytes) {
          send_in_pieces(weak, std::make_shared<std::string>(std::move(bytes)), piece, std::chrono::milliseconds(20),
                         [](ScriptedChild&) {});
        });
    auto r = run(s);
    CHECK(r.env.status == Status::completed);
    CHECK(*decided == std::vector<std::string>{"t1:allow", "t2:allow"});
    check_long_grep_whole(r, pattern);
  }
}

TEST_CASE("long lines faster than the read rate are taken more slowly, in order and whole; no rate, no pause") {
  // Four tool requests of 100 KiB at 1 MiB/s after a 64 KiB burst: the session stops reading the
  // child between them. The twin without a rate never pauses. Both see every request, in order.
  for (const std::size_t rate : {std::size_t{1} << 20, std::size_t{0}}) {
    CAPTURE(rate);
    auto decided = std::make_shared<std::vector<std::string>>();
    Spec s;
    s.read_rate = rate;
    s.read_burst = 64 * 1024;
    const std::string pattern = varied(100 * 1024);
    s.script = hello_then([pattern, decided](ScriptedChild& child) {
      std::string lines;
      for (int i = 1; i <= 4; ++i)
        lines += proto::encode_line(proto::ToolRequest{"t" + std::to_string(i), "grep", json{{"pattern", pattern}}});
      child.send_raw(lines);
      child.on_message([&child, decided](const proto::SupervisorMessage& m) {
        if (const auto* d = std::get_if<proto::ToolDecision>(&m)) {
          decided->push_back(d->id + (d->allow ? ":allow" : ":deny"));
          child.send(proto::ToolDone{d->id, true, 1, {}});
          if (decided->size() < 4) return;
          child.send(proto::Final{"all ran", "all four", json::object()});
          child.exit(0);
        }
      });
    });
    auto r = run(s);
    CHECK(r.env.status == Status::completed);
    CHECK(*decided == std::vector<std::string>{"t1:allow", "t2:allow", "t3:allow", "t4:allow"});
    std::size_t whole = 0;
    for (const auto& e : r.events)
      if (e["event"] == "tool_decision" && e["args"]["pattern"] == pattern) ++whole;
    CHECK(whole == 4);
    if (rate)
      CHECK(r.read_rate_pauses >= 2);
    else
      CHECK(r.read_rate_pauses == 0);
  }
}

TEST_CASE("short log lines count against the read rate; short tool requests do not") {
  // 300 log lines of 1 KiB at 64 KiB/s after a 16 KiB burst: paused (nothing paces log lines).
  // The twin: 150 short tool requests, each answered before the next, are never paused.
  for (const bool logs : {true, false}) {
    CAPTURE(logs);
    Spec s;
    s.read_rate = 64 * 1024;
    s.read_burst = 16 * 1024;
    s.script = hello_then([logs](ScriptedChild& child) {
      if (logs) {
        std::string lines;
        for (int i = 0; i < 300; ++i) lines += proto::encode_line(proto::Log{"info", std::string(1024, 'l')});
        child.send_raw(lines + proto::encode_line(proto::Final{"logged", "logged", json::object()}));
        child.on_message([&child](const proto::SupervisorMessage&) {});
        return;
      }
      auto n = std::make_shared<int>(0);
      child.send(proto::ToolRequest{"t0", "grep", json{{"pattern", std::string(1000, 'p')}}});
      child.on_message([&child, n](const proto::SupervisorMessage& m) {
        const auto* d = std::get_if<proto::ToolDecision>(&m);
        if (!d) return;
        child.send(proto::ToolDone{d->id, true, 1, {}});
        if (++*n < 150) {  // under explore's tool-call budget
          child.send(proto::ToolRequest{"t" + std::to_string(*n), "grep", json{{"pattern", std::string(1000, 'p')}}});
          return;
        }
        child.send(proto::Final{"asked", "asked", json::object()});
      });
    });
    s.exit_grace = std::chrono::milliseconds(100);  // the child never exits on its own: killed after its final
    auto r = run(s);
    INFO(r.env.reason);
    CHECK(r.env.status == Status::completed);
    if (logs)
      CHECK(r.read_rate_pauses >= 2);
    else
      CHECK(r.read_rate_pauses == 0);
  }
}

TEST_CASE("blank lines on stdout count against the read rate; on stderr against the log cap") {
  // 64 KiB of blank stdout lines (charged 64 bytes each: 4 MiB) at 16 MiB/s after a 64 KiB burst:
  // paused. 2 MiB of blank stderr lines: the log cap (1 MiB, prefixes included) stops them
  // reaching the parent. The twin: the same child without the blank lines is never paused and
  // logs nothing.
  for (const bool blanks : {true, false}) {
    CAPTURE(blanks);
    Spec s;
    s.read_rate = 16 << 20;
    s.read_burst = 64 * 1024;
    s.script = hello_then([blanks](ScriptedChild& child) {
      if (blanks) {
        child.send_raw(std::string(64 * 1024, '\n'));
        child.log(std::string((2 << 20) - 1, '\n'));
      }
      child.send(proto::Final{"blank", "blank", json::object()});
      child.exit(0);
    });
    auto r = run(s);
    CHECK(r.env.status == Status::completed);
    std::size_t logged = 0;
    for (const auto& l : r.logs) logged += l.size();
    if (blanks) {
      CHECK(r.read_rate_pauses >= 1);
      CHECK(logged <= (1u << 20) + 200);  // the cap, one prefixed line past it, and the notice
      CHECK(r.logs.back().find("more than 1 MiB of log") != std::string::npos);
    } else {
      CHECK(r.read_rate_pauses == 0);
      CHECK(r.logs.empty());
    }
  }
}

TEST_CASE("model requests that start a model call do not count against the read rate; ones refused at once do") {
  // Both children send long model requests (100 KiB) at 512 KiB/s after a 64 KiB burst. One has a
  // step budget of 3 and sends three: the model answers each, and it is never paused. The other has
  // a step budget of 1 and sends six: after its one step and its wrap-up turn, each is refused at
  // once (budget_exhausted) and counts, so it is paused.
  for (const int steps : {3, 1}) {
    CAPTURE(steps);
    Spec s;
    s.read_rate = 512 * 1024;
    s.read_burst = 64 * 1024;
    s.limits.max_steps = steps;
    s.replay = std::string("{\"content\":\"one\"}\n{\"content\":\"two\"}\n{\"content\":\"three\"}\n");
    const std::string filler = varied(100 * 1024);
    const int requests = steps == 3 ? 3 : 6;  // three model calls; or one, the wrap-up turn, four refused
    s.script = hello_then([filler, requests](ScriptedChild& child) {
      auto asked = std::make_shared<int>(0);
      auto ask = [&child, asked, filler] {
        ++*asked;
        child.send(proto::ModelRequest{"m" + std::to_string(*asked),
                                       json::array({{{"role", "user"}, {"content", filler}}}), json::array(),
                                       std::nullopt});
      };
      ask();
      child.on_message([&child, asked, ask, requests](const proto::SupervisorMessage& m) {
        const bool answer =
            std::holds_alternative<proto::ModelResponse>(m) || std::holds_alternative<proto::ModelError>(m);
        if (!answer) return;
        if (*asked < requests) return ask();
        child.send(proto::Final{"asked", "asked them all", json::object()});
        child.exit(0);
      });
    });
    auto r = run(s);
    CHECK(r.env.answer.text == "asked them all");
    CHECK(r.count("model_request") == (steps == 3 ? 3u : 2u));  // the calls made
    if (steps == 3)
      CHECK(r.read_rate_pauses == 0);
    else
      CHECK(r.read_rate_pauses >= 2);
  }
}

TEST_CASE("a child that exits while its reading is paused by the rate loses nothing: its pipe is read at once") {
  // At 1 KiB/s the pause after a 100 KiB line would outlast the test. The child waits for the
  // decision on the request it sent after that line (so the pause has begun), then sends its
  // tool_done and final and exits: its exit ends the pause, and what is in its pipe is read
  // before the drain timer's 200 ms. Twin: the same child with no rate.
  for (const std::size_t rate : {std::size_t{1024}, std::size_t{0}}) {
    CAPTURE(rate);
    Spec s;
    s.read_rate = rate;
    s.read_burst = 1024;
    s.script = hello_then([](ScriptedChild& child) {
      child.send_raw(proto::encode_line(proto::Log{"info", varied(100 * 1024)}) +
                     proto::encode_line(proto::ToolRequest{"t1", "grep", json{{"pattern", "x"}}}));
      child.on_message([&child](const proto::SupervisorMessage& m) {
        if (!std::holds_alternative<proto::ToolDecision>(m)) return;
        child.send(proto::ToolDone{"t1", true, 1, {}});
        child.send(proto::Final{"said it all", "the last word", json::object()});
        child.exit(0);
      });
    });
    auto r = run(s);
    CHECK(r.env.status == Status::completed);
    CHECK(r.env.answer.text == "the last word");
    CHECK(r.count("tool_done") == 1);
    CHECK(r.read_rate_pauses == (rate ? 1u : 0u));
  }
}

TEST_CASE("a child that stops inside a long line is ended by its deadline, as one inside a short line is") {
  // No newline ever comes: the session holds the line so far and waits for the pipe, so the
  // deadline still ends the child (timeout) and the session finishes.
  for (const std::size_t size : {std::size_t{100}, std::size_t{200 * 1024}}) {
    CAPTURE(size);
    Spec s;
    s.limits.timeout_ms = 300;
    s.limits.wrap_up_grace_ms = 100;
    s.script = hello_then([size](ScriptedChild& child) { child.send_raw(std::string(size, 'x')); });
    auto r = run(s);
    CHECK(r.env.status == Status::timeout);
  }
}

TEST_CASE("a long line cut by the end of the child's output, or over the line cap, is a protocol error naming it") {
  // In pieces, so the end and the cap are found after reads that each left the line unfinished.
  SUBCASE("the output ends inside the line") {
    Spec s;
    s.script = [](std::shared_ptr<ScriptedChild> c) {
      c->send(proto::Hello{{1}, "script/1"});
      std::weak_ptr<ScriptedChild> weak = c;
      c->on_message([weak](const proto::SupervisorMessage& m) {
        if (!std::holds_alternative<proto::Welcome>(m)) return;
        send_in_pieces(weak, std::make_shared<std::string>(100 * 1024, 'x'), 40 * 1024, std::chrono::milliseconds(10),
                       [](ScriptedChild& child) {
                         child.close_stdout();
                         child.exit(0);
                       });
      });
    };
    auto r = run(s);
    CHECK(r.env.status == Status::protocol_error);
    CHECK(r.env.reason.find("ended inside a line of 102400 bytes") != std::string::npos);
  }
  SUBCASE("the line passes the cap") {
    const std::size_t size = proto::kDefaultMaxLine + 300 * 1024;
    Spec s;
    s.script = [size](std::shared_ptr<ScriptedChild> c) {
      c->send(proto::Hello{{1}, "script/1"});
      std::weak_ptr<ScriptedChild> weak = c;
      c->on_message([weak, size](const proto::SupervisorMessage& m) {
        if (!std::holds_alternative<proto::Welcome>(m)) return;
        send_in_pieces(weak, std::make_shared<std::string>(std::string(size, 'x') + "\n"), 256 * 1024,
                       std::chrono::milliseconds(10), [](ScriptedChild&) {});
      });
    };
    auto r = run(s);
    CHECK(r.env.status == Status::protocol_error);
    CHECK(r.env.reason.find("line_too_long (a line of at least " + std::to_string(size)) != std::string::npos);
  }
}

TEST_CASE("a long line that is not a message ends the child with a protocol error naming it, as a short one does") {
  for (const std::size_t size : {std::size_t{10}, std::size_t{100 * 1024}}) {
    CAPTURE(size);
    Spec s;
    s.script = hello_then([size](ScriptedChild& child) {
      child.send_raw("{\"type\":\"tool_request\",\"id\":\"t1\",\"tool\":\"grep\",\"args\":\"" + std::string(size, 'x') +
                     "\"}\n");
    });
    auto r = run(s);
    CHECK(r.env.status == Status::protocol_error);
    CHECK(r.env.reason.find("protocol error: ") == 0);
    CHECK(r.env.reason.find("args") != std::string::npos);
  }
}

// docs/transcripts.md: the version with a question is on disk before the parent is asked, and the one
// with its answer before the child is told. The session waits for both on a worker
// (SessionConfig::wait_recorded), so the loop goes on meanwhile: here its timer fires while the first
// wait holds, and only then is the parent asked.
TEST_CASE("an ask waits for its record off the loop: the parent is asked, and the child told, only once recorded") {
  std::atomic<bool> recorded{false};
  std::atomic<int> waits{0};
  std::vector<std::string> order;  // on the loop
  Spec s;
  s.preset = "worker";  // run_command is "ask"
  s.wait_recorded = [&] {
    return std::function<void()>([&] {
      ++waits;
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!recorded && std::chrono::steady_clock::now() < limit)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  };
  s.approver = [&](const ApprovalRequest& r, ApprovalReply reply) {
    order.push_back("asked " + r.tool);
    reply(true, "yes");
  };
  s.script = [&](std::shared_ptr<ScriptedChild> c) {
    c->send(proto::Hello{{1}, "script/1"});
    std::weak_ptr<ScriptedChild> weak = c;
    c->on_message([weak, &order, &recorded](const proto::SupervisorMessage& m) {
      auto child = weak.lock();
      if (!child) return;
      if (std::holds_alternative<proto::Welcome>(m)) {
        child->send(proto::ToolRequest{"t1", "run_command", {{"command", "true"}}});
        // The loop is free while the question's record is written: this timer fires first.
        auto t = std::make_shared<boost::asio::steady_timer>(*g_io, std::chrono::milliseconds(50));
        t->async_wait([t, &order, &recorded](boost::system::error_code) {
          order.push_back("tick");
          recorded = true;  // the write is done: the waits return
        });
      } else if (const auto* d = std::get_if<proto::ToolDecision>(&m)) {
        order.push_back(d->allow ? "told allow" : "told deny");
        if (d->allow) child->send(proto::ToolDone{d->id, true, 0, {}});
        child->send(proto::Final{"done", "a", json::object()});
        child->exit(0);
      }
    });
  };
  Result r = run(s);
  CHECK(r.env.status == Status::completed);
  CHECK(waits.load() >= 2);  // the question, then the answer
  CHECK(order == std::vector<std::string>{"tick", "asked run_command", "told allow"});
}
