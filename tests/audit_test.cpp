// Audit log: which events become lines and what each names, scrubbing, O_APPEND from concurrent
// writers, and the `audit` command's queries.
#include "cli/cli.hpp"
#include "records/audit.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "records/transcript.hpp"
#include "test_util.hpp"

using namespace supervisor;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<json> lines_of(const fs::path& p) {
  std::vector<json> out;
  std::ifstream in(p);
  std::string l;
  while (std::getline(in, l)) out.push_back(json::parse(l, nullptr, false));
  return out;
}

// A child's session events, as ChildSession emits them.
std::vector<json> session_events(const std::string& child, const std::string& tool, bool with_approval) {
  std::vector<json> ev = {
      {{"event", "spawn"},
       {"child", child},
       {"preset", "worker"},
       {"policy_digest", "d"},
       {"description", "fix it"},
       {"workspace", "/w"},
       {"model", "replay:x"}},
      {{"event", "started"}, {"child", child}, {"pid", 1}},
      {{"event", "model_request"}, {"child", child}, {"id", "m1"}},
      {{"event", "model_response"}, {"child", child}, {"id", "m1"}},
      {{"event", "tool_decision"},
       {"child", child},
       {"id", "t1"},
       {"tool", tool},
       {"args", {{"command", "make test"}}},
       {"decision", with_approval ? "ask" : "allow"},
       {"reason", "tools.allow"}},
  };
  if (with_approval)
    ev.push_back(
        {{"event", "approval"}, {"child", child}, {"id", "t1"}, {"tool", tool}, {"allow", true}, {"reason", "ok"}});
  ev.push_back({{"event", "tool_done"}, {"child", child}, {"id", "t1"}, {"tool", tool}, {"ok", true}, {"bytes", 5}});
  ev.push_back({{"event", "tool_decision"},
                {"child", child},
                {"id", "t2"},
                {"tool", "write_file"},
                {"args", {{"path", "x"}}},
                {"decision", "deny"},
                {"reason", "tools.deny"}});
  ev.push_back(
      {{"event", "budget"}, {"child", child}, {"budget", "steps"}, {"status", "budget_exhausted"}, {"reason", "r"}});
  ev.push_back({{"event", "kill"}, {"child", child}, {"reason", "wrap-up grace expired"}});
  ev.push_back({{"event", "exit"}, {"child", child}, {"signal", 9}});
  ev.push_back({{"event", "envelope"},
                {"child", child},
                {"envelope",
                 {{"id", child},
                  {"status", "budget_exhausted"},
                  {"steps", 3},
                  {"tool_calls", 1},
                  {"answer", "long answer"},
                  {"transcript", "/t/subagent-" + child + ".json"}}}});
  return ev;
}

// Runs cmd_audit in this process with stdout captured.
std::pair<int, std::string> audit_cmd(std::vector<std::string> args) {
  test::TempDir d;
  const std::string out = (d.path() / "out").string();
  std::fflush(stdout);
  int saved = ::dup(1);
  int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, 1);
  ::close(fd);
  int rc = cli::cmd_audit(cli::Args(std::move(args)));
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  return {rc, test::slurp(out)};
}

}  // namespace

TEST_CASE(
    "one line per spawn, tool decision, approval, budget, kill and envelope; each names child, preset and parent") {
  test::TempDir d;
  const fs::path file = d.path() / "logs" / "audit.jsonl";
  AuditLog log(AuditOptions{file}, std::make_shared<const Scrubber>());
  for (const auto& e : session_events("c0ffee000001", "run_command", true))
    CHECK(log.record(e, AuditContext{"c0ffee000001", "worker", "parent-7"}) == "");
  CHECK((::access(file.c_str(), F_OK) == 0));
  struct stat st {};
  ::stat(file.c_str(), &st);
  CHECK((st.st_mode & 0777) == 0600);
  auto lines = lines_of(file);
  std::vector<std::string> kinds;
  for (const auto& l : lines) {
    REQUIRE_FALSE(l.is_discarded());
    kinds.push_back(l["event"]);
    CHECK(l["child"] == "c0ffee000001");
    CHECK(l["preset"] == "worker");
    CHECK(l["parent"] == "parent-7");
    const std::string time = l["time"];
    CHECK(time.size() == 24);
    CHECK(time.back() == 'Z');
    CHECK(time[10] == 'T');
  }
  // started, model_*, tool_done and exit are transcript-only.
  CHECK(kinds ==
        std::vector<std::string>{"spawn", "tool_decision", "approval", "tool_decision", "budget", "kill", "envelope"});
  CHECK(lines[1]["tool"] == "run_command");
  CHECK(lines[1]["args"]["command"] == "make test");
  CHECK(lines[1]["decision"] == "ask");
  CHECK(lines[2]["allow"] == true);
  CHECK(lines[6]["status"] == "budget_exhausted");
  CHECK(lines[6]["transcript"] == "/t/subagent-c0ffee000001.json");
  CHECK_FALSE(lines[6].contains("answer"));  // the audit log is an index, not a second transcript
}

TEST_CASE("audit lines are scrubbed, and long arguments are cut after scrubbing") {
  test::TempDir d;
  AuditOptions o{d.path() / "audit.jsonl"};
  o.max_string_bytes = 64;
  AuditLog log(o, std::make_shared<const Scrubber>());
  json e = {{"event", "tool_decision"},
            {"tool", "run_command"},
            {"args",
             {{"command", "curl -H 'Authorization: Bearer q8Zr4Lm2Nx6Vb0Tc9Yh3Wd7Ke5Fs1Pj' x"},
              {"env", "OPENAI_API_KEY=sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa"},
              {"long", std::string(50, 'a') + " ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R" + std::string(100, 'z')}}},
            {"decision", "allow"}};
  REQUIRE(log.record(e, {"c1", "worker", "p"}) == "");
  std::string text = test::slurp(o.file);
  CHECK(text.find("q8Zr4Lm2Nx6Vb0Tc") == std::string::npos);
  CHECK(text.find("Tq3vX9bK2mLr8sYw") == std::string::npos);
  CHECK(text.find("1a2B3c4D5e6F") == std::string::npos);
  CHECK(text.find("ghp_") == std::string::npos);
  CHECK(text.find("[REDACTED:authorization]") != std::string::npos);
  CHECK(text.find("[cut: ") != std::string::npos);
  // Twin: a harmless command is recorded as it was.
  json plain = {{"event", "tool_decision"},
                {"tool", "run_command"},
                {"args", {{"command", "make -j4 test"}}},
                {"decision", "allow"}};
  REQUIRE(log.record(plain, {"c1", "worker", "p"}) == "");
  CHECK(lines_of(o.file).back()["args"]["command"] == "make -j4 test");
}

TEST_CASE("an oversized line is shrunk, never split, and events that are not audited write nothing") {
  test::TempDir d;
  AuditOptions o{d.path() / "audit.jsonl"};
  o.max_string_bytes = 1 << 20;
  o.max_line_bytes = 4096;
  AuditLog log(o, std::make_shared<const Scrubber>());
  json e = {{"event", "tool_decision"},
            {"tool", "write_file"},
            {"args", {{"content", std::string(100'000, 'x')}}},
            {"decision", "allow"}};
  REQUIRE(log.record(e, {"c1", "worker", "p"}) == "");
  CHECK(log.record({{"event", "model_request"}}, {"c1", "worker", "p"}) == "");
  auto lines = lines_of(o.file);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["args"]["omitted_bytes"].get<int>() > 100'000);
  CHECK(test::slurp(o.file).size() < 4096);
}

TEST_CASE("concurrent writers append whole lines: nothing interleaves") {
  test::TempDir d;
  const fs::path file = d.path() / "audit.jsonl";
  const int writers = 4, per_writer = 400;
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w) {
    pid_t pid = ::fork();
    if (pid == 0) {
      AuditOptions o{file};
      o.max_string_bytes = 1 << 20;  // whole patterns, so a mixed-up line would show
      AuditLog log(o, std::make_shared<const Scrubber>());
      for (int i = 0; i < per_writer; ++i) {
        json e = {{"event", "tool_decision"},
                  {"tool", "grep"},
                  {"n", i},
                  {"args", {{"pattern", std::string(static_cast<std::size_t>((i * 131 + w * 17) % 6000), 'a' + w)}}}};
        if (!log.record(e, {"writer" + std::to_string(w), "explore", "p"}).empty()) ::_exit(1);
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  auto lines = lines_of(file);
  CHECK(lines.size() == static_cast<std::size_t>(writers * per_writer));
  std::map<std::string, int> next;
  for (const auto& l : lines) {
    REQUIRE_FALSE(l.is_discarded());
    const std::string who = l["child"];
    CHECK(l["n"] == next[who]++);  // each writer's lines whole and in its order
    const std::string p = l["args"]["pattern"];
    CHECK(p == std::string(p.size(), static_cast<char>('a' + (who.back() - '0'))));
  }
}

TEST_CASE("an unwritable audit log is an error string, not an exception") {
  test::TempDir d;
  d.write("file", "x");
  AuditLog log(AuditOptions{d.path() / "file" / "audit.jsonl"}, std::make_shared<const Scrubber>());
  std::string err = log.record({{"event", "kill"}, {"reason", "x"}}, {"c", "p", "q"});
  CHECK(err.find("audit.jsonl") != std::string::npos);
  CHECK_MESSAGE(err.find("is not a directory") != std::string::npos, err);
}

TEST_CASE("audit command: what did child X do, and which children ran commands") {
  test::TempDir d;
  const fs::path file = d.path() / "audit.jsonl";
  {
    AuditLog log(AuditOptions{file}, std::make_shared<const Scrubber>());
    for (const auto& e : session_events("aaaa00000001", "run_command", false))
      log.record(e, {"aaaa00000001", "worker", "alice"});
    for (const auto& e : session_events("bbbb00000002", "grep", false))
      log.record(e, {"bbbb00000002", "explore", "bob"});
    for (const auto& e : session_events("cccc00000003", "run_command", true))
      log.record(e, {"cccc00000003", "worker", "alice"});
  }
  std::ofstream(file, std::ios::app) << "not json\n";

  // What did child aaaa... do (by prefix): every audited event of that child, nothing of the others.
  auto [rc, out] = audit_cmd({"--file", file.string(), "--child", "aaaa"});
  CHECK(rc == 0);
  CHECK(out.find("aaaa00000001") != std::string::npos);
  CHECK(out.find("bbbb") == std::string::npos);
  CHECK(out.find("run_command allow {\"command\":\"make test\"}") != std::string::npos);
  CHECK(out.find("write_file deny") != std::string::npos);
  CHECK(out.find("budget_exhausted") != std::string::npos);
  CHECK(out.find("wrap-up grace expired") != std::string::npos);
  CHECK(out.find("transcript /t/subagent-aaaa00000001.json") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 6);

  // Which children ran commands.
  auto [rc2, kids] = audit_cmd({"--file", file.string(), "--tool", "run_command", "--children"});
  CHECK(rc2 == 0);
  CHECK(kids.find("aaaa00000001  preset worker  parent alice") != std::string::npos);
  CHECK(kids.find("cccc00000003  preset worker  parent alice") != std::string::npos);
  CHECK(kids.find("bbbb") == std::string::npos);
  CHECK(std::count(kids.begin(), kids.end(), '\n') == 2);

  // Only those whose command was allowed outright.
  auto [rc3, allowed] =
      audit_cmd({"--file", file.string(), "--tool", "run_command", "--decision", "allow", "--children"});
  CHECK(rc3 == 0);
  CHECK(allowed.find("aaaa") != std::string::npos);
  CHECK(allowed.find("cccc") == std::string::npos);  // it asked, and then the approval said yes

  // --json passes the lines through for jq.
  auto [rc4, js] = audit_cmd({"--file", file.string(), "--parent", "bob", "--event", "envelope", "--json"});
  CHECK(rc4 == 0);
  json l = json::parse(js);
  CHECK(l["child"] == "bbbb00000002");
  CHECK(l["status"] == "budget_exhausted");

  // Nothing matched, missing file, bad flags.
  CHECK(audit_cmd({"--file", file.string(), "--child", "ffff"}).first == 1);
  CHECK(audit_cmd({"--file", (d.path() / "none.jsonl").string()}).first == 1);
  CHECK(audit_cmd({"--file", file.string(), "--decision", "maybe"}).first == cli::kUsageError);
  CHECK(audit_cmd({"--file", file.string(), "--event", "model_request"}).first == cli::kUsageError);
  CHECK(audit_cmd({"--bogus"}).first == cli::kUsageError);
  auto [rc5, help] = audit_cmd({"--help"});
  CHECK(rc5 == 0);
  CHECK(help.find("which children ran commands") != std::string::npos);
}

TEST_CASE("audit --conversation prints what one child's model was sent and answered, from its transcript") {
  test::TempDir d, ws;
  ws.write("README.md", "# demo\nhello world\n");
  const std::string script =
      d.write("model.jsonl", R"({"content":"grep","tool_calls":[{"name":"grep","arguments":{"pattern":"hello"}}]})"
                             "\n"
                             R"({"content":"## Summary\nFound it in README.md."})"
                             "\n");
  const fs::path tdir = d.path() / "t";
  auto r = test::run({test::bin("subagent-supervisor").string(), "run", "--preset", "explore", "--workspace",
                      ws.path().string(), "--brief", "find hello", "--model", "replay:" + script, "--quiet",
                      "--transcript-dir", tdir.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const std::string id = json::parse(r.out)["id"];

  auto [rc, out] = audit_cmd({"--conversation", id.substr(0, 6), "--transcript-dir", tdir.string()});
  CHECK(rc == 0);
  CHECK(out.find("brief: find hello") != std::string::npos);
  CHECK(out.find("[system] ") != std::string::npos);
  CHECK(out.find("-> tool call") != std::string::npos);
  CHECK(out.find("grep {\"pattern\":\"hello\"}: allow") != std::string::npos);
  CHECK_MESSAGE(out.find("README.md:2: hello world") != std::string::npos, out);  // the tool result, as sent
  CHECK(out.find("=== envelope: completed") != std::string::npos);
  // The system prompt is printed once although the child sent it with both requests.
  auto first = out.find("[system] ");
  CHECK(out.find("[system] ", first + 1) == std::string::npos);

  // --json: the history of the last turn plus the last answer, as neutral chat messages.
  auto [rc2, js] = audit_cmd({"--conversation", id, "--transcript-dir", tdir.string(), "--json"});
  CHECK(rc2 == 0);
  json msgs = json::parse(js);
  REQUIRE(msgs.size() == 5);
  CHECK(msgs[0]["role"] == "system");
  CHECK(msgs[1]["role"] == "user");
  CHECK(msgs[2]["tool_calls"][0]["name"] == "grep");
  CHECK(msgs[3]["role"] == "tool");
  CHECK(msgs[4]["content"].get<std::string>().find("Found it in README.md.") != std::string::npos);

  CHECK(audit_cmd({"--conversation", "ffffff", "--transcript-dir", tdir.string()}).first == 1);
  CHECK(audit_cmd({"--transcript-dir", tdir.string()}).first == cli::kUsageError);
}

TEST_CASE("audit --child: an ambiguous prefix lists the matches, an unknown id and a missing log say so") {
  test::TempDir d;
  const fs::path file = d.path() / "audit.jsonl";
  {
    AuditLog log(AuditOptions{file}, std::make_shared<const Scrubber>());
    for (const auto& e : session_events("1234aaaa0001", "grep", false)) log.record(e, {"1234aaaa0001", "explore", "p"});
    for (const auto& e : session_events("1234bbbb0002", "grep", false)) log.record(e, {"1234bbbb0002", "explore", "p"});
  }
  const std::string sup = test::bin("subagent-supervisor").string();
  auto both = test::run({sup, "audit", "--file", file.string(), "--child", "1234"});
  CHECK(both.code == cli::kUsageError);
  CHECK(both.out.empty());  // nothing of either child: the two are never merged
  CHECK(both.err.find("--child '1234' matches 2 children; give more of the id:") != std::string::npos);
  CHECK(both.err.find("\n  1234aaaa0001") != std::string::npos);
  CHECK(both.err.find("\n  1234bbbb0002") != std::string::npos);
  // The twin: a prefix that names one child shows that child only.
  auto one = test::run({sup, "audit", "--file", file.string(), "--child", "1234a"});
  CHECK(one.code == 0);
  CHECK(one.out.find("1234aaaa0001") != std::string::npos);
  CHECK(one.out.find("1234bbbb0002") == std::string::npos);
  auto unknown = test::run({sup, "audit", "--file", file.string(), "--child", "ffff"});
  CHECK(unknown.code == 1);
  CHECK(unknown.err.find("no child whose id starts with 'ffff' in " + file.string()) != std::string::npos);
  auto none = test::run({sup, "audit", "--tool", "no_such_tool", "--file", file.string()});
  CHECK(none.code == 1);
  CHECK(none.err.find("no event in " + file.string() + " matches") != std::string::npos);
  auto missing = test::run({sup, "audit", "--file", (d.path() / "nothing.jsonl").string()});
  CHECK(missing.code == 1);
  CHECK(missing.err.find("there is no audit log at " + (d.path() / "nothing.jsonl").string()) != std::string::npos);
  // No runs yet at the default place: says so plainly.
  test::TempDir state;
  const std::string env_cmd = "XDG_STATE_HOME=" + state.path().string() + " " + sup + " audit";
  auto fresh = test::run({"/bin/sh", "-c", env_cmd});
  CHECK(fresh.code == 1);
  CHECK(fresh.err.find("no child has run yet: there is no audit log at " + state.path().string()) != std::string::npos);
}
