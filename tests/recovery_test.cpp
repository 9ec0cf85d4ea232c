// Crash recovery (issue 33 item 5): a supervisor killed with SIGKILL while a child is queued, running
// or having its patch collected leaves a registry (scheduling/recovery.hpp); the next start of a
// command on the same state directory (here `recover` and `run`) marks the transcripts abandoned with
// an audit line, removes and unregisters the worktree and the cgroups. The twin: a live supervisor's
// registry is left alone while another command starts, and its child completes.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "serve_driver.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kCli = test::bin("subagent-supervisor").string();

// The one registry under `state` (a serve process makes one), or empty.
fs::path registry(const fs::path& state) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state / "supervisors", ec))
    if (e.path().filename().string()[0] != '.') return e.path();
  return {};
}

json record(const fs::path& reg, const std::string& child) {
  std::ifstream in(reg / "children" / (child + ".json"));
  json j = json::parse(in, nullptr, false);
  return j.is_object() ? j : json::object();
}

// Waits until the child's record says `phase`; false after `limit`.
bool wait_phase(const fs::path& state, const std::string& child, const std::string& phase,
                std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    const fs::path reg = registry(state);
    if (!reg.empty() && record(reg, child).value("phase", "") == phase) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  json j = json::parse(in, nullptr, false);
  return j.is_object() ? j : json::object();
}

std::vector<json> audit_lines(const fs::path& file, const std::string& event) {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

// The per-launch cgroups of supervisor `pid` ("<pid>-<n>" under a subagent-sandbox directory of
// each hierarchy, below this process's own cgroup there or at the hierarchy's root).
std::vector<fs::path> cgroups_of(pid_t pid) {
  std::vector<fs::path> out;
  const std::string prefix = std::to_string(pid) + "-";
  std::vector<fs::path> parents = {"/sys/fs/cgroup/subagent-sandbox"};
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = line.substr(a + 1, b - a - 1), own = line.substr(b + 1);
    if (ctrls.rfind("name=", 0) == 0) continue;
    for (const fs::path& dir : {fs::path("/sys/fs/cgroup") / ctrls, fs::path("/sys/fs/cgroup")}) {
      parents.push_back(dir / "subagent-sandbox");
      parents.push_back((dir / own.substr(1)) / "subagent-sandbox");
    }
  }
  std::error_code ec;
  for (const fs::path& parent : parents)
    for (const auto& e : fs::directory_iterator(parent, ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0 &&
          std::find(out.begin(), out.end(), e.path()) == out.end())
        out.push_back(e.path());
  return out;
}

test::RunResult git(const fs::path& dir, const std::string& args) {
  return test::run({"/bin/sh", "-c", "git -c user.name=t -c user.email=t@t " + args}, "", dir);
}

}  // namespace

TEST_CASE("SIGKILL with one child running and one queued: recover marks both abandoned, audits them, frees all") {
  test::TempDir ws, scripts;
  ws.write("a.txt", "x\n");
  const std::string slow = test::replay(
      scripts, "slow",
      R"({"content":"working","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":500,"repeat":"forever"})");
  test::Serve s(
      test::Serve::Options{{"--workspace", ws.path().string(), "--model", slow, "--max-concurrent", "1"}, true});
  s.hello();
  s.send({{"type", "spawn"}, {"id", 1}, {"preset", "explore"}, {"brief", "run"}, {"background", true}});
  const std::string running = s.reply(1)["child_id"];
  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "explore"}, {"brief", "wait"}, {"background", true}});
  const std::string queued = s.reply(2)["child_id"];
  const fs::path state = s.state.path();
  REQUIRE(wait_phase(state, running, "running"));
  REQUIRE(wait_phase(state, queued, "queued"));
  const fs::path transcript = s.transcript_dir() / ("subagent-" + running + ".json");
  const fs::path audit = s.transcript_dir() / "audit.jsonl";
  // The child has taken a step (its transcript is on disk, "running").
  for (int i = 0; i < 600 && read_json(transcript).value("status", "") != "running"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(read_json(transcript)["status"] == "running");
  const pid_t pid = s.pid();
  // Its per-launch cgroups, once the child is launched in them (the transcript is opened before).
  auto cgroups_before = cgroups_of(pid);
  for (int i = 0; i < 300 && cgroups_before.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cgroups_before = cgroups_of(pid);
  }

  const int status = s.kill_and_reap(SIGKILL);
  REQUIRE(WIFSIGNALED(status));
  // Before recovery: the transcript says running forever, the audit log has no end for the child.
  CHECK(read_json(transcript)["status"] == "running");
  CHECK(audit_lines(audit, "abandoned").empty());
  CHECK_FALSE(registry(state).empty());

  auto r = test::run({kCli, "recover", "--state-dir", state.string()});
  INFO(r.out);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("1 dead supervisor, 2 children settled") != std::string::npos);
  json t = read_json(transcript);
  CHECK(t["status"] == "abandoned");
  CHECK(t["abandoned"]["phase"] == "running");
  const std::string reason = t["abandoned"]["reason"];
  CHECK(reason.find("pid " + std::to_string(pid)) != std::string::npos);
  CHECK(reason.find("SIGKILL") != std::string::npos);
  CHECK(reason.find("subagent-supervisor recover") != std::string::npos);
  auto lines = audit_lines(audit, "abandoned");
  REQUIRE(lines.size() == 2);
  std::map<std::string, json> by_child;
  for (const auto& l : lines) by_child[l["child"]] = l;
  CHECK(by_child[running]["phase"] == "running");
  CHECK(by_child[running]["preset"] == "explore");
  CHECK(by_child[running]["transcript"] == transcript.string());
  CHECK(by_child[queued]["phase"] == "queued");
  CHECK(by_child[queued]["status"] == "abandoned");
  // The queued child never had a transcript: none is made up.
  CHECK_FALSE(fs::exists(s.transcript_dir() / ("subagent-" + queued + ".json")));
  CHECK(registry(state).empty());
  CHECK(cgroups_of(pid).empty());
  if (cgroups_before.empty())
    MESSAGE("no per-launch cgroup was made on this host: the cgroup check proves nothing");
  else
    MESSAGE(cgroups_before.size() << " per-launch cgroups before recovery, none after");
  // The audit command reads the new lines (abandoned is an audited event).
  auto q = test::run({kCli, "audit", "--file", audit.string(), "--event", "abandoned", "--json"});
  CHECK(q.code == 0);
  CHECK(q.out.find(running) != std::string::npos);

  // Settled once: a second recovery finds nothing and writes nothing.
  r = test::run({kCli, "recover", "--state-dir", state.string()});
  CHECK(r.code == 0);
  CHECK(r.out.find("0 dead supervisors, 0 children settled") != std::string::npos);
  CHECK(audit_lines(audit, "abandoned").size() == 2);
}

TEST_CASE("SIGKILL while an implementation child's patch is collected: the next run removes and unregisters it") {
  test::TempDir repo, scripts;
  // `make` (allowed without asking) writes 100 MB the patch collection must hash: seconds of git add.
  repo.write("Makefile", "all:\n\thead -c 100000000 /dev/urandom > big.bin\n");
  repo.write("README", "r\n");
  REQUIRE(git(repo.path(), "init -q").code == 0);
  REQUIRE(git(repo.path(), "add -A").code == 0);
  REQUIRE(git(repo.path(), "commit -qm base").code == 0);
  const std::string model =
      test::replay(scripts, "impl",
                   R"({"content":"build","tool_calls":[{"name":"run_command","arguments":{"command":"make"}}]})"
                   "\n"
                   R"({"content":"## Summary\nbuilt"})");
  test::Serve s(test::Serve::Options{{"--workspace", repo.path().string(), "--model", model}, true});
  s.hello();
  s.send({{"type", "spawn"}, {"id", 1}, {"preset", "implementation"}, {"brief", "build"}, {"background", true}});
  const std::string id = s.reply(1)["child_id"];
  const fs::path state = s.state.path();
  REQUIRE(wait_phase(state, id, "finishing", std::chrono::seconds(120)));
  s.kill_and_reap(SIGKILL);
  const fs::path top = state / "worktrees" / id;
  // Left behind: the worktree on disk and in the repository's list, the transcript "running".
  CHECK(fs::exists(top));
  CHECK(git(repo.path(), "worktree list --porcelain").out.find(top.string()) != std::string::npos);
  const fs::path transcript = s.transcript_dir() / ("subagent-" + id + ".json");
  // (The session writes its envelope when the child ends: "finished" without the patch, or still
  // "running" when that write was not done yet.)
  const std::string before = read_json(transcript).value("status", "");
  CHECK((before == "running" || before == "finished"));

  // The next start of a command on this state directory settles it (run here, on another workspace).
  test::TempDir other;
  auto r =
      test::run({kCli, "run", "--preset", "explore", "--workspace", other.path().string(), "--brief", "b", "--model",
                 "replay:" + scripts.write("q", R"({"content":"## Summary\nok"})"
                                                "\n"),
                 "--no-transcript", "--quiet", "--state-dir", state.string()});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("recovered child " + id + " (implementation, finishing) abandoned") != std::string::npos);
  CHECK_FALSE(fs::exists(top));
  const std::string list = git(repo.path(), "worktree list --porcelain").out;
  INFO(list);
  CHECK(list.find(top.string()) == std::string::npos);
  CHECK(list.find("worktree ") == list.rfind("worktree "));  // the main one alone
  CHECK_FALSE(fs::exists(repo.path() / ".git" / "worktrees" / id));
  json t = read_json(transcript);
  CHECK(t["status"] == "abandoned");
  CHECK(t["abandoned"]["phase"] == "finishing");
  // A patch cut off mid-write is gone; a complete one would have its .json beside it.
  CHECK((!fs::exists(state / "patches" / (id + ".patch")) || fs::exists(state / "patches" / (id + ".json"))));
  auto lines = audit_lines(s.transcript_dir() / "audit.jsonl", "abandoned");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["child"] == id);
  CHECK(lines[0]["preset"] == "implementation");
  CHECK(registry(state).empty());
  // The repository itself is untouched: its files and its one commit.
  CHECK(git(repo.path(), "status --porcelain").out.empty());
  CHECK(git(repo.path(), "rev-list --count HEAD").out == "1\n");
}

TEST_CASE("a live supervisor's registry is not touched by a command starting meanwhile; its child completes") {
  test::TempDir ws, scripts;
  const std::string model =
      test::replay(scripts, "m",
                   R"({"content":"looking","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":1500})"
                   "\n"
                   R"({"content":"## Summary\nfine"})");
  test::Serve s(test::Serve::Options{{"--workspace", ws.path().string(), "--model", model}, true});
  s.hello();
  s.send({{"type", "spawn"}, {"id", 1}, {"preset", "explore"}, {"brief", "x"}});
  const fs::path state = s.state.path();
  fs::path reg;
  for (int i = 0; i < 600 && (reg = registry(state)).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE_FALSE(reg.empty());
  std::string id;
  for (int i = 0; i < 600 && id.empty(); ++i) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(reg / "children", ec)) id = e.path().stem().string();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(wait_phase(state, id, "running"));
  auto r = test::run({kCli, "recover", "--state-dir", state.string()});
  CHECK(r.code == 0);
  CHECK(r.out.find("0 dead supervisors, 0 children settled") != std::string::npos);
  CHECK(fs::exists(reg / "children" / (id + ".json")));
  CHECK(fs::exists(reg / "lock"));
  json done = s.reply(1);
  CHECK(done["type"] == "result");
  CHECK(done["envelope"]["status"] == "completed");
  CHECK(read_json(s.transcript_dir() / ("subagent-" + id + ".json"))["status"] == "finished");
  CHECK(audit_lines(s.transcript_dir() / "audit.jsonl", "abandoned").empty());
  // Settled normally: the record is gone at once, the registry with the process.
  CHECK_FALSE(fs::exists(reg / "children" / (id + ".json")));
  s.close_input();
  CHECK(s.wait_exit(std::chrono::seconds(30)) == 0);
  CHECK_FALSE(fs::exists(reg));
}
