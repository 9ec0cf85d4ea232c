// End-to-end tests of one child session: a real sandboxed child process, the real protocol, budgets
// enforced by the supervisor. The reference child runs replay scripts; tests/programs/fake_child
// misbehaves on purpose.
#include "session/session.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "session/budgets.hpp"
#include "test_util.hpp"

using namespace supervisor;
using nlohmann::json;
using protocol::Status;

namespace {

struct Outcome {
  protocol::Envelope env;
  std::vector<json> events;
  std::vector<std::string> logs;

  std::size_t count(const std::string& event) const {
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [&](const json& e) { return e["event"] == event; }));
  }
};

struct Spec {
  std::string replay;  // JSONL script for the reference child
  std::string fake;    // fake_child mode instead of the reference child
  std::vector<std::string> fake_args;
  BudgetOverrides limits;
  std::size_t max_line = protocol::kDefaultMaxLine;
  std::chrono::milliseconds handshake{10'000};
  std::optional<std::chrono::milliseconds> cancel_after;
  Approver approver;
  std::string brief = "test brief";
};

Outcome run(const Spec& s) {
  test::TempDir ws;
  ws.write("README.md", "# demo\nhello world\n");
  ws.write("src/main.c", "int main(void) { return 0; }\n");
  test::TempDir scripts;
  std::string script = scripts.write("script.jsonl", s.replay.empty() ? "{\"content\":\"done\"}\n" : s.replay);

  boost::asio::io_context io;
  SessionConfig cfg;
  cfg.id = new_child_id();
  auto preset = std::make_shared<Preset>(load_preset("explore", test::policy_dir()));
  cfg.budgets = tighten(preset->budgets, s.limits, "the preset explore");
  cfg.preset = preset;
  cfg.brief = s.brief;
  cfg.description = "test";
  cfg.workspace = std::filesystem::canonical(ws.path());
  if (s.fake.empty()) {
    cfg.child_executable = test::bin("subagent-child");
  } else {
    cfg.child_executable = test::program("fake_child");
    cfg.child_args.push_back(s.fake);
    cfg.child_args.insert(cfg.child_args.end(), s.fake_args.begin(), s.fake_args.end());
  }
  cfg.max_line = s.max_line;
  cfg.handshake_timeout = s.handshake;
  cfg.approver = s.approver;
  Outcome out;
  cfg.on_event = [&](const json& e) { out.events.push_back(e); };
  cfg.on_log = [&](const std::string& l) { out.logs.push_back(l); };
  auto session = ChildSession::create(io, cfg, make_provider("replay:" + script, io));
  bool done = false;
  session->start([&](const protocol::Envelope& e) {
    out.env = e;
    done = true;
  });
  boost::asio::steady_timer cancel_timer(io);
  if (s.cancel_after) {
    cancel_timer.expires_after(*s.cancel_after);
    cancel_timer.async_wait([&](boost::system::error_code ec) {
      if (!ec) session->cancel("test cancel");
    });
  }
  io.run_for(std::chrono::seconds(60));
  REQUIRE_MESSAGE(done, "the session did not finish");
  return out;
}

const char* kForeverListDir =
    R"({"content":"looking","tool_calls":[{"name":"list_dir","arguments":{}}],"usage":{"input_tokens":100,"output_tokens":10},"repeat":"forever"})"
    "\n";

}  // namespace

TEST_CASE("a replayed explore child completes and its tools really run") {
  Spec s;
  s.replay =
      R"({"content":"grep","tool_calls":[{"name":"grep","arguments":{"pattern":"hello"}},{"name":"read_file","arguments":{"path":"src/main.c"}}]})"
      "\n"
      R"({"content":"## Summary\nFound it.\n## Evidence\n- README.md:2 — hello world"})"
      "\n";
  auto o = run(s);
  CHECK(o.env.status == Status::completed);
  CHECK(o.env.summary.text == "Found it.");
  CHECK(o.env.answer.text.find("README.md:2") != std::string::npos);
  CHECK(o.env.answer.text.find("## Remaining risks") != std::string::npos);
  CHECK(o.env.steps == 2);
  CHECK(o.env.tool_calls == 2);
  CHECK(o.env.tools_used.at("grep") == 1);
  CHECK(o.env.exit.code == 0);
  CHECK(o.count("tool_done") == 2);
  for (const auto& e : o.events)
    if (e["event"] == "tool_done") {
      CHECK(e["ok"] == true);
      CHECK(e["bytes"].get<int>() > 0);
    }
  CHECK(o.env.usage.input_tokens > 0);  // estimated: the script gives no usage
  CHECK(std::find(o.env.sandbox_applied.begin(), o.env.sandbox_applied.end(), "seccomp") !=
        o.env.sandbox_applied.end());
}

TEST_CASE("a tool the preset denies reaches the model as a denial naming the rule") {
  Spec s;
  s.replay = R"({"tool_calls":[{"name":"write_file","arguments":{"path":"x","content":"y"}}]})"
             "\n"
             R"({"content":"could not write"})"
             "\n";
  auto o = run(s);
  CHECK(o.env.status == Status::completed);
  CHECK(o.env.tools_denied == 1);
  CHECK(o.env.tool_calls == 0);
  bool found = false;
  for (const auto& e : o.events)
    if (e["event"] == "tool_decision" && e["tool"] == "write_file") {
      CHECK(e["decision"] == "deny");
      CHECK(e["reason"].get<std::string>().find("tools.deny") != std::string::npos);
      found = true;
    }
  CHECK(found);
}

TEST_CASE("step budget: wrap_up honoured, the child reports in its final turn") {
  Spec s;
  s.replay = kForeverListDir;
  s.limits.max_steps = 3;
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.budget == "steps");
  CHECK(o.env.steps == 4);  // three turns and the wrap-up turn
  CHECK(o.env.tool_calls == 3);
  CHECK(o.env.exit.code == 0);
  CHECK_FALSE(o.env.answer.text.empty());
  CHECK(o.env.reason.find("wrapped up") != std::string::npos);
}

TEST_CASE("tool-call budget") {
  Spec s;
  s.replay =
      R"({"tool_calls":[{"name":"list_dir","arguments":{}},{"name":"glob","arguments":{"pattern":"*"}}],"repeat":"forever"})"
      "\n";
  s.limits.max_tool_calls = 5;
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.budget == "tool_calls");
  CHECK(o.env.tool_calls == 5);
  CHECK(o.env.tools_denied >= 1);
  CHECK(o.env.exit.code == 0);
}

TEST_CASE("token budget: calls stop before the budget could be passed, reserving each call's input") {
  Spec s;
  s.replay = kForeverListDir;  // 110 tokens a turn
  s.limits.max_steps = 12;
  auto free = run(s);
  std::uint64_t first = 0;  // the first call's reservation: its whole request at a token a byte
  for (const auto& e : free.events)
    if (e["event"] == "model_request") {
      first = e["estimated_input_tokens"].get<std::uint64_t>();
      break;
    }
  REQUIRE(first > 1000);
  s.limits.max_steps = 100;
  s.limits.max_tokens = first + 2000;
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.budget == "tokens");
  CHECK(o.env.usage.total() <= first + 2000);
  CHECK(o.env.steps >= 3);  // twin of the next case: the same script gets turns while they fit
  CHECK(o.env.exit.code == 0);
  CHECK_FALSE(o.env.answer.text.empty());
  CHECK(o.env.reason.find("the next call could need") != std::string::npos);
  // Every call that started had room for its worst-case input: max_tokens = budget left - that.
  for (const auto& e : o.events)
    if (e["event"] == "model_request") CHECK(e["max_tokens"].get<std::uint64_t>() >= kMinOutputTokens);
  // No wrap-up turn fit after the refusal: the child reported with what it had, marked partial.
  CHECK(o.env.answer_partial);
}

TEST_CASE("token budget: a call whose input alone cannot fit is never started") {
  Spec s;
  s.replay = kForeverListDir;
  s.limits.max_tokens = 300;  // less than the system prompt and the brief
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.budget == "tokens");
  CHECK(o.env.usage.total() == 0);
  CHECK(o.env.steps == 0);
  CHECK(o.count("model_response") == 0);
}

TEST_CASE("cut turn: finish_reason length is budget_exhausted; the wrap-up turn answers") {
  Spec s;
  s.replay =
      R"({"content":"Searching.","tool_calls":[{"name":"grep","arguments":{"pattern":"x"}}],"finish_reason":"length","usage":{"input_tokens":100,"output_tokens":50}})"
      "\n"
      R"({"content":"## Summary\nDone after the cut.","usage":{"input_tokens":120,"output_tokens":20}})"
      "\n";
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.budget == "tokens");
  CHECK(o.env.answer.text.find("Done after the cut.") != std::string::npos);
  CHECK_FALSE(o.env.answer_partial);
  CHECK(o.env.tool_calls == 0);  // the cut turn's tool call was dropped
  CHECK(o.env.steps == 2);
  CHECK(o.count("budget") == 1);
}

TEST_CASE("cut turn: every turn cut gives the fragment, marked partial, never completed") {
  Spec s;
  s.replay =
      R"({"content":"Searching.","finish_reason":"length","usage":{"input_tokens":100,"output_tokens":50},"repeat":"forever"})"
      "\n";
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.answer_partial);
  CHECK(o.env.answer.text.find("Searching.") != std::string::npos);
  // Twin: the same script without the cut is a completed answer.
  s.replay =
      R"({"content":"Searching.","finish_reason":"stop","usage":{"input_tokens":100,"output_tokens":50},"repeat":"forever"})"
      "\n";
  o = run(s);
  CHECK(o.env.status == Status::completed);
  CHECK_FALSE(o.env.answer_partial);
}

TEST_CASE("wall-clock timeout: wrap_up, then the final turn") {
  Spec s;
  s.replay = R"({"content":"slow","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":100,"repeat":"forever"})"
             "\n";
  s.limits.timeout_ms = 700;
  auto o = run(s);
  CHECK(o.env.status == Status::timeout);
  CHECK(o.env.budget == "time");
  CHECK(o.env.exit.code == 0);
  CHECK(o.env.duration_ms >= 700);
  CHECK(o.env.duration_ms < 5000);
}

TEST_CASE("wrap_up ignored: the child is killed after the grace period and the envelope says so") {
  Spec s;
  s.fake = "ignore_wrap_up";
  s.replay = kForeverListDir;
  s.limits.max_steps = 2;
  s.limits.wrap_up_grace_ms = 300;
  auto o = run(s);
  CHECK(o.env.status == Status::budget_exhausted);
  CHECK(o.env.budget == "steps");
  CHECK(o.env.exit.signal == SIGKILL);
  CHECK(o.env.reason.find("did not wrap up within 300 ms and was killed") != std::string::npos);
  CHECK(o.env.answer.text.empty());
  CHECK(o.count("kill") == 1);
}

TEST_CASE("envelope caps: answer and summary cut on a UTF-8 boundary") {
  Spec s;
  s.fake = "big_final";
  s.fake_args = {"60000"};
  auto o = run(s);
  CHECK(o.env.status == Status::completed);
  CHECK(o.env.answer.truncated);
  CHECK(o.env.answer.original_bytes == 60000);
  CHECK(o.env.answer.text.size() == 48000);  // exactly 16000 whole 3-byte characters
  CHECK(protocol::is_valid_utf8(o.env.answer.text));
  CHECK(o.env.summary.truncated);
  CHECK(o.env.summary.text.size() == 1998);  // 2000 would split a character
  CHECK(protocol::is_valid_utf8(o.env.summary.text));

  s.limits.answer_bytes = 47999;
  o = run(s);
  CHECK(o.env.answer.text.size() == 47997);
  CHECK(protocol::is_valid_utf8(o.env.answer.text));
}

TEST_CASE("answers at the cap are not cut") {
  Spec s;
  s.fake = "big_final";
  s.fake_args = {"1998"};
  auto o = run(s);
  CHECK_FALSE(o.env.summary.truncated);
  CHECK(o.env.summary.text.size() == 1998);
}

TEST_CASE("a child that crashes or exits early fails with its exit status") {
  Spec crash;
  crash.fake = "crash";
  auto o = run(crash);
  CHECK(o.env.status == Status::failed);
  CHECK(o.env.exit.signal == SIGSEGV);
  CHECK(o.env.reason.find("killed by signal SIGSEGV") != std::string::npos);

  Spec early;
  early.fake = "exit_early";
  o = run(early);
  CHECK(o.env.status == Status::failed);
  CHECK(o.env.exit.code == 3);
  CHECK(o.env.reason.find("exited with code 3") != std::string::npos);
}

TEST_CASE("protocol errors end only that child, with a reason naming the problem") {
  struct Case {
    const char* mode;
    std::vector<std::string> args;
    const char* expect;
  } cases[] = {
      {"huge_line", {"100000"}, "line_too_long"},
      {"invalid_utf8", {}, "not valid UTF-8"},
      {"unknown_type", {}, "unknown message type 'teleport'"},
      {"not_json", {}, "not valid JSON"},
      {"cut_line", {}, "truncated"},
      {"bad_version", {}, "no common protocol version"},
      {"no_hello", {}, "no hello within 300 ms"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.mode);
    Spec s;
    s.fake = c.mode;
    s.fake_args = c.args;
    s.max_line = 65536;
    s.handshake = std::chrono::milliseconds(300);
    auto o = run(s);
    CHECK(o.env.status == Status::protocol_error);
    CHECK_MESSAGE(o.env.reason.find(c.expect) != std::string::npos, o.env.reason);
  }
}

TEST_CASE("model_request events carry each message the model was sent once, in order, and tool results") {
  Spec s;
  s.replay = R"({"content":"grep","tool_calls":[{"name":"grep","arguments":{"pattern":"hello"}}]})"
             "\n"
             R"({"content":"## Summary\nFound it."})"
             "\n";
  auto o = run(s);
  REQUIRE(o.env.status == Status::completed);
  std::vector<json> requests, responses;
  for (const auto& e : o.events) {
    if (e["event"] == "model_request") requests.push_back(e);
    if (e["event"] == "model_response") responses.push_back(e);
  }
  REQUIRE(requests.size() == 2);
  REQUIRE(responses.size() == 2);
  CHECK(requests[0]["messages_from"] == 0);
  REQUIRE(requests[0]["new_messages"].size() == 2);
  CHECK(requests[0]["new_messages"][0]["role"] == "system");
  CHECK(requests[0]["new_messages"][1]["content"].get<std::string>().find("test brief") != std::string::npos);
  CHECK(requests[0]["tool_names"] == json::array({"read_file", "list_dir", "glob", "grep"}));
  // The second request resends the history; only the assistant turn and the tool result are new.
  CHECK(requests[1]["messages"] == 4);
  CHECK(requests[1]["messages_from"] == 2);
  REQUIRE(requests[1]["new_messages"].size() == 2);
  CHECK(requests[1]["new_messages"][0]["role"] == "assistant");
  CHECK(requests[1]["new_messages"][0]["tool_calls"][0]["name"] == "grep");
  CHECK(requests[1]["new_messages"][1]["role"] == "tool");
  CHECK(requests[1]["new_messages"][1]["content"].get<std::string>().find("README.md:2: hello world") !=
        std::string::npos);
  CHECK(responses[1]["content"].get<std::string>().find("Found it.") != std::string::npos);
}

TEST_CASE("spec checks: unique ids, enums, tool_done.bytes, and tool_result_bytes on what reaches the model") {
  struct Case {
    const char* mode;
    const char* expect;
  } cases[] = {
      {"reuse_id", "model_request id 'm1' was already used in this session"},
      {"tool_done_lies", "says bytes 200000, more than tool_result_bytes 16000 allows"},
      {"bad_role", "field 'messages[0].role' must be one of system, user, assistant, tool (got 'developer')"},
      {"bad_level", "field 'level' must be one of debug, info, warn, error (got 'loud')"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.mode);
    Spec s;
    s.fake = c.mode;
    auto o = run(s);
    CHECK(o.env.status == Status::protocol_error);
    CHECK_MESSAGE(o.env.reason.find(c.expect) != std::string::npos, o.env.reason);
  }
  // The 200 KB tool message is cut to the preset's 16,000 bytes before the model sees it; the
  // session goes on (twin: the good child's short messages are never cut).
  Spec s;
  s.fake = "big_tool_message";
  auto o = run(s);
  CHECK_MESSAGE(o.env.status == Status::completed, o.env.reason);
  REQUIRE(o.count("tool_results_cut") == 1);
  Spec good;
  good.fake = "good";
  auto g = run(good);
  CHECK(g.env.status == Status::completed);
  CHECK(g.count("tool_results_cut") == 0);
}

TEST_CASE("a child the supervisor kills mid-line is reported for the supervisor's reason, not protocol_error") {
  // Twin: the same half line from a child that exits by itself is the child's protocol error.
  {
    Spec s;
    s.fake = "cut_line";
    CHECK(run(s).env.status == Status::protocol_error);
  }
  {  // timeout: wrap_up is ignored, the grace expires, the kill cuts the half-written line
    Spec s;
    s.fake = "half_line_hang";
    s.limits.timeout_ms = 400;
    s.limits.wrap_up_grace_ms = 200;
    auto o = run(s);
    CHECK_MESSAGE(o.env.status == Status::timeout, o.env.reason);
    CHECK(o.env.budget == "time");
    CHECK(o.env.reason.find("was killed") != std::string::npos);
    CHECK(o.count("after_kill") == 1);
  }
  {  // cancel
    Spec s;
    s.fake = "half_line_hang";
    s.cancel_after = std::chrono::milliseconds(300);
    auto o = run(s);
    CHECK_MESSAGE(o.env.status == Status::cancelled, o.env.reason);
  }
}

TEST_CASE("a flood of valid lines is read in bounded memory and the child still completes") {
  Spec s;
  s.fake = "flood";
  s.fake_args = {"200000"};  // ~24 MB of log lines
  auto o = run(s);
  CHECK(o.env.status == Status::completed);
}

TEST_CASE("a welcome larger than the pipe reaches the child whole: what the pipe does not take waits for the loop") {
  // The welcome is written at once while nothing is queued (session_io.cpp); a 256 KiB brief is four
  // times a pipe's 64 KiB, so most of it goes out through the queued, asynchronous write. Twin: the
  // default short brief, which one direct write takes.
  Spec big;
  big.brief = std::string(256 * 1024, 'b') + " END-OF-BRIEF";
  Spec small;
  for (const Spec* s : {&big, &small}) {
    auto o = run(*s);
    REQUIRE(o.env.status == Status::completed);
    const json* first = nullptr;
    for (const auto& e : o.events)
      if (e["event"] == "model_request" && !first) first = &e;
    REQUIRE(first);
    const std::string sent = (*first)["new_messages"][1]["content"].get<std::string>();
    CHECK(sent.find(s->brief) != std::string::npos);
  }
}

TEST_CASE("stderr lines reach the log prefixed with the child id") {
  Spec s;
  s.fake = "stderr_lines";
  auto o = run(s);
  CHECK(o.env.status == Status::completed);
  REQUIRE(o.logs.size() >= 2);
  CHECK(o.logs[0] == "[subagent:" + o.env.id + "] first line");
}

TEST_CASE("cancel kills the child and yields a cancelled envelope") {
  Spec s;
  s.replay =
      R"({"content":"slow","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":5000,"repeat":"forever"})"
      "\n";
  s.cancel_after = std::chrono::milliseconds(300);
  auto o = run(s);
  CHECK(o.env.status == Status::cancelled);
  CHECK(o.env.exit.signal == SIGKILL);
  CHECK(o.env.duration_ms < 2000);
}

TEST_CASE("a grandchild that setsid()s away dies with the child") {
  const std::string name = "fc" + std::to_string(::getpid() % 100000);
  Spec s;
  s.fake = "grandchild";
  s.fake_args = {name};
  auto o = run(s);
  CHECK(o.env.status == Status::failed);  // it exits without a final answer
  // Twin: hostile_children_test's "twin: the same /proc scan sees a grandchild that really outlives
  // its parent" runs this mode unsupervised and finds the grandchild alive with the same scan.
  CHECK(test::processes_named(name) == 0);
}
