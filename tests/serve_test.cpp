// `subagent-supervisor serve` driven the way a parent agent drives it: JSON lines on its stdin and
// stdout, as protocol/README.md ("Control protocol") specifies.
#include <algorithm>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "serve_driver.hpp"
#include "test_util.hpp"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The shared driver (tests/serve_driver.hpp) with this file's defaults: no transcripts.
struct Serve : test::Serve {
  explicit Serve(std::vector<std::string> args) : test::Serve(Options{std::move(args)}) {}
};

// A model that asks to run one command writing out.txt (the worker preset marks run_command "ask"),
// then answers "done".
std::string asks_to_write(const test::TempDir& scripts) {
  return test::replay(scripts, "ask",
                      R"({"tool_calls":[{"name":"run_command","arguments":{"command":"echo hi > out.txt"}}]})"
                      "\n"
                      R"({"content":"done"})");
}

}  // namespace

TEST_CASE("serve: hello, sync and background spawns, list, output, cancel, end of input") {
  test::TempDir ws, scripts;
  ws.write("a.txt", "hello\n");
  const auto child = test::private_child(scripts);
  Serve s({"--workspace", ws.path().string(), "--child", child.string(), "--model",
           test::replay(scripts, "q", R"({"content":"## Summary\nquick"})")});
  s.send({{"type", "spawn"}, {"id", 0}, {"preset", "explore"}, {"brief", "x"}});
  CHECK(s.reply(0)["message"].get<std::string>().find("send hello first") != std::string::npos);

  s.send({{"type", "hello"},
          {"id", 1},
          {"protocol", 1},
          {"parent", "test-parent"},
          {"scope", {{"presets", {"explore", "worker"}}, {"budgets", {{"max_steps", 50}}}}}});
  json hello = s.reply(1);
  REQUIRE(hello["type"] == "hello");
  CHECK(hello["protocol"] == 1);
  CHECK(hello["capabilities"]["max_concurrent"] == 8);
  CHECK(hello["capabilities"]["max_per_turn"] == 24);

  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "explore"}, {"brief", "look"}, {"description", "sync one"}});
  json result = s.reply(2);
  REQUIRE(result["type"] == "result");
  CHECK(result["envelope"]["status"] == "completed");
  CHECK(result["envelope"]["summary"] == "quick");
  CHECK(result["envelope"]["description"] == "sync one");

  const std::string slow = test::replay(
      scripts, "slow",
      R"({"content":"working","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":1000,"repeat":"forever"})");
  s.send({{"type", "spawn"}, {"id", 3}, {"preset", "explore"}, {"brief", "bg"}, {"background", true}, {"model", slow}});
  json spawned = s.reply(3);
  REQUIRE(spawned["type"] == "spawned");
  std::string bg = spawned["child_id"];
  s.send(
      {{"type", "spawn"}, {"id", 4}, {"preset", "explore"}, {"brief", "bg2"}, {"background", true}, {"model", slow}});
  std::string bg2 = s.reply(4)["child_id"];

  s.send({{"type", "list"}, {"id", 5}});
  json list = s.reply(5);
  REQUIRE(list["children"].size() == 3);
  CHECK(list["children"][0]["state"] == "done");
  CHECK(list["children"][1]["state"] == "running");
  CHECK(list["children"][1]["budget_use"]["max_steps"] == 50);  // inherited from the parent's scope

  s.send({{"type", "output"}, {"id", 6}, {"child_id", bg}});
  json out = s.reply(6);
  CHECK(out["state"] == "running");
  CHECK(out["envelope"].is_null());

  s.send({{"type", "cancel"}, {"id", 7}, {"child_id", bg}});
  CHECK(s.reply(7)["type"] == "cancelling");
  json done = s.next([&](const json& j) { return j["type"] == "child_done" && j["child_id"] == bg; });
  REQUIRE(done.is_object());
  CHECK(done["envelope"]["status"] == "cancelled");
  s.send({{"type", "output"}, {"id", 8}, {"child_id", bg}});
  CHECK(s.reply(8)["envelope"]["status"] == "cancelled");

  // Scope: refused by name, and nothing starts.
  s.send({{"type", "spawn"}, {"id", 9}, {"preset", "research"}, {"brief", "x"}});
  json err = s.reply(9);
  CHECK(err["type"] == "error");
  CHECK(err["code"] == "scope");
  CHECK(err["message"].get<std::string>().find("'research' is outside the parent's scope") != std::string::npos);
  s.send({{"type", "spawn"}, {"id", 10}, {"preset", "explore"}, {"brief", "x"}, {"limits", {{"max_steps", 80}}}});
  CHECK(s.reply(10)["message"].get<std::string>().find("limits.max_steps 80 exceeds the parent's scope max_steps 50") !=
        std::string::npos);

  // Garbage from the parent gets an error and the supervisor keeps going.
  s.send_raw("this is not json\n");
  CHECK(s.next([](const json& j) { return j["type"] == "error" && j["id"].is_null(); })["message"] == "not valid JSON");
  s.send({{"type", "teleport"}, {"id", 11}});
  CHECK(s.reply(11)["code"] == "bad_request");

  // End of input: the running child is cancelled and its envelope reported; clean exit.
  s.close_input();
  json last = s.next([&](const json& j) { return j["type"] == "child_done" && j["child_id"] == bg2; });
  REQUIRE(last.is_object());
  CHECK(last["envelope"]["status"] == "cancelled");
  CHECK(s.wait_exit() == 0);
  CHECK(test::processes_named(child.filename().string()) == 0);
}

TEST_CASE("serve: approvals go to the parent labelled with the child, and its answer decides") {
  test::TempDir ws, scripts;
  ws.write("a.txt", "hello\n");
  const std::string ask = asks_to_write(scripts);
  Serve s({"--workspace", ws.path().string(), "--model", ask});
  s.send({{"type", "hello"}, {"id", 1}, {"approvals", true}});
  REQUIRE(s.reply(1)["capabilities"]["approvals"] == true);
  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "worker"}, {"brief", "write"}, {"description", "writer"}});
  json req = s.next([](const json& j) { return j["type"] == "approval_request"; });
  REQUIRE(req.is_object());
  CHECK(req["tool"] == "run_command");
  CHECK(req["preset"] == "worker");
  CHECK(req["description"] == "writer");
  CHECK(req["args"]["command"] == "echo hi > out.txt");
  s.send({{"type", "approval"}, {"approval_id", req["approval_id"]}, {"allow", true}});
  json result = s.reply(2);
  CHECK(result["envelope"]["status"] == "completed");
  CHECK(result["envelope"]["tools_used"]["run_command"] == 1);
  CHECK(std::filesystem::exists(ws.path() / "out.txt"));
}

// docs/transcripts.md: the transcript is written behind, off the loop, yet the version holding a
// question is on disk before the parent is asked. Through the real program; a fast disk makes this
// pass even without the wait, so the order itself is pinned by session_logic_test ("an ask waits for
// its record off the loop"), with a wait the test holds.
TEST_CASE("serve: the transcript on disk holds the question when the parent is asked; the answer is recorded") {
  test::TempDir ws, scripts;
  const std::string ask = asks_to_write(scripts);
  test::Serve s(test::Serve::Options({"--workspace", ws.path().string(), "--model", ask}, /*transcripts=*/true));
  s.send({{"type", "hello"}, {"id", 1}, {"approvals", true}});
  REQUIRE(s.reply(1)["capabilities"]["approvals"] == true);
  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "worker"}, {"brief", "write"}, {"description", "writer"}});
  json req = s.next([](const json& j) { return j["type"] == "approval_request"; });
  REQUIRE(req.is_object());
  const std::string child = req["child_id"];
  const fs::path file = s.transcript_dir() / ("subagent-" + child + ".json");
  auto decisions = [&](const std::string& event, const std::string& field) {
    std::vector<json> out;
    json doc = json::parse(test::slurp(file));
    for (const json& e : doc["events"])
      if (e.value("event", "") == event) out.push_back(e.value(field, json()));
    return out;
  };
  // At this moment, before any answer: the file already holds the "ask".
  auto asked = decisions("tool_decision", "decision");
  CHECK(std::find(asked.begin(), asked.end(), json("ask")) != asked.end());
  CHECK(decisions("approval", "allow").empty());
  s.send({{"type", "approval"}, {"approval_id", req["approval_id"]}, {"allow", true}});
  json result = s.reply(2);
  CHECK(result["envelope"]["status"] == "completed");
  CHECK(fs::exists(ws.path() / "out.txt"));
  auto answered = decisions("approval", "allow");
  REQUIRE(answered.size() == 1);
  CHECK(answered[0] == true);
}

TEST_CASE("serve: without an approver, an ask is denied at once") {
  test::TempDir ws, scripts;
  const std::string ask = asks_to_write(scripts);
  Serve s({"--workspace", ws.path().string(), "--model", ask, "--approval-timeout", "60s"});
  s.send({{"type", "hello"}, {"id", 1}});
  s.reply(1);
  auto t0 = std::chrono::steady_clock::now();
  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "worker"}, {"brief", "write"}});
  json result = s.reply(2);
  CHECK(result["envelope"]["status"] == "completed");
  CHECK(result["envelope"]["tools_denied"] == 1);
  REQUIRE(result["envelope"]["denials"].size() == 1);
  CHECK(result["envelope"]["denials"][0]["tool"] == "run_command");
  CHECK(result["envelope"]["denials"][0]["rule"] == "ask: no approver");
  CHECK(result["envelope"]["denials_omitted"] == 0);
  CHECK_FALSE(std::filesystem::exists(ws.path() / "out.txt"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}

// protocol/README.md, "Example session": the session file run as printed there.
TEST_CASE("serve --drain runs the example session from a file; without --drain end of input cancels") {
  const std::string session = test::slurp(test::source("examples/serve-session.jsonl"));
  const std::string sup = test::bin("subagent-supervisor").string();
  auto parse_lines = [](const std::string& out) {
    std::vector<json> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) lines.push_back(json::parse(l));
    return lines;
  };
  auto find = [](const std::vector<json>& lines, const std::string& type, const json& id) {
    for (const json& l : lines)
      if (l.value("type", "") == type && (id.is_null() || l.value("id", json()) == id)) return l;
    return json();
  };
  auto r =
      test::run({sup, "serve", "--drain", "--model", "replay:examples/explore-demo.jsonl", "--no-transcript"}, session);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  auto lines = parse_lines(r.out);
  CHECK(find(lines, "hello", 1)["protocol"] == 1);
  CHECK(find(lines, "spawned", 2)["state"] == "running");
  CHECK(find(lines, "result", 3)["envelope"]["status"] == "completed");
  CHECK(find(lines, "child_done", nullptr)["envelope"]["status"] == "completed");
  CHECK(find(lines, "list", 4)["children"].size() == 2);

  // The twin: the same file without --drain; end of input cancels the background child.
  auto cut = test::run({sup, "serve", "--model", "replay:examples/explore-demo.jsonl", "--no-transcript"}, session);
  CHECK(cut.code == 0);
  auto cut_lines = parse_lines(cut.out);
  bool cancelled = false;
  for (const json& l : cut_lines)
    if ((l.value("type", "") == "child_done" || l.value("type", "") == "result") &&
        l["envelope"]["status"] == "cancelled")
      cancelled = true;
  CHECK(cancelled);
}

TEST_CASE("serve: a bad --approval-timeout is a bad command line naming the flag") {
  auto r = test::run({test::bin("subagent-supervisor").string(), "serve", "--approval-timeout", "5x"});
  CHECK(r.code == 64);
  CHECK(r.err.find("--approval-timeout: ") != std::string::npos);
  auto ok = test::run({test::bin("subagent-supervisor").string(), "serve", "--approval-timeout", "5s"}, "");
  CHECK(ok.code == 0);  // the twin: a good value, and an empty session
}
