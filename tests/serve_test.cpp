// `subagent-supervisor serve` driven the way a parent agent drives it: JSON lines on its stdin and
// stdout, as protocol/README.md ("Control protocol") specifies.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

using nlohmann::json;

namespace {

class Serve {
 public:
  Serve(const std::vector<std::string>& extra) {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // the supervisor must not hold its own stdin open
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<std::string> argv = {test::bin("subagent-supervisor").string(), "serve", "--no-transcript",
                                       "--state-dir", state.path().string(), "--lock-dir", (state.path() / "locks").string()};
      argv.insert(argv.end(), extra.begin(), extra.end());
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Serve() {
    if (to_ >= 0) ::close(to_);
    if (pid_ > 0) {  // never kill(-1): that is every process we may signal
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(from_);
  }
  void send(const json& j) {
    std::string s = j.dump() + "\n";
    REQUIRE(::write(to_, s.data(), s.size()) == static_cast<ssize_t>(s.size()));
  }
  void send_raw(const std::string& s) { REQUIRE(::write(to_, s.data(), s.size()) == static_cast<ssize_t>(s.size())); }
  void close_input() {
    ::close(to_);
    to_ = -1;
  }
  // Next message matching `pred` (others are kept for later), or null after 30 s.
  json next(const std::function<bool(const json&)>& pred) {
    for (auto it = seen_.begin(); it != seen_.end(); ++it)
      if (pred(*it)) {
        json j = *it;
        seen_.erase(it);
        return j;
      }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        json j = json::parse(buf_.substr(0, nl));
        buf_.erase(0, nl + 1);
        if (pred(j)) return j;
        seen_.push_back(j);
        continue;
      }
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char b[65536];
      ssize_t n = ::read(from_, b, sizeof b);
      if (n <= 0) break;
      buf_.append(b, static_cast<std::size_t>(n));
    }
    return nullptr;
  }
  json reply(const json& id) {
    return next([&](const json& j) { return j.contains("id") && j["id"] == id; });
  }
  int wait_exit() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  test::TempDir state;

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buf_;
  std::vector<json> seen_;
};

std::string script(test::TempDir& d, const std::string& name, const std::string& body) {
  return "replay:" + d.write(name, body + "\n");
}

}  // namespace

TEST_CASE("serve: hello, sync and background spawns, list, output, cancel, end of input") {
  test::TempDir ws, scripts;
  ws.write("a.txt", "hello\n");
  const auto child = test::private_child(scripts);
  Serve s({"--workspace", ws.path().string(), "--child", child.string(), "--model",
           script(scripts, "q", R"({"content":"## Summary\nquick"})")});
  s.send({{"type", "spawn"}, {"id", 0}, {"preset", "explore"}, {"brief", "x"}});
  CHECK(s.reply(0)["message"].get<std::string>().find("send hello first") != std::string::npos);

  s.send({{"type", "hello"}, {"id", 1}, {"protocol", 1}, {"parent", "test-parent"},
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

  const std::string slow = script(scripts, "slow",
                                  R"({"content":"working","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":1000,"repeat":"forever"})");
  s.send({{"type", "spawn"}, {"id", 3}, {"preset", "explore"}, {"brief", "bg"}, {"background", true}, {"model", slow}});
  json spawned = s.reply(3);
  REQUIRE(spawned["type"] == "spawned");
  std::string bg = spawned["child_id"];
  s.send({{"type", "spawn"}, {"id", 4}, {"preset", "explore"}, {"brief", "bg2"}, {"background", true}, {"model", slow}});
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
  const std::string ask = script(scripts, "ask",
                                 R"({"tool_calls":[{"name":"run_command","arguments":{"command":"echo hi > out.txt"}}]})"
                                 "\n"
                                 R"({"content":"done"})");
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

TEST_CASE("serve: without an approver, an ask is denied at once") {
  test::TempDir ws, scripts;
  const std::string ask = script(scripts, "ask",
                                 R"({"tool_calls":[{"name":"run_command","arguments":{"command":"echo hi > out.txt"}}]})"
                                 "\n"
                                 R"({"content":"done"})");
  Serve s({"--workspace", ws.path().string(), "--model", ask, "--approval-timeout", "60s"});
  s.send({{"type", "hello"}, {"id", 1}});
  s.reply(1);
  auto t0 = std::chrono::steady_clock::now();
  s.send({{"type", "spawn"}, {"id", 2}, {"preset", "worker"}, {"brief", "write"}});
  json result = s.reply(2);
  CHECK(result["envelope"]["status"] == "completed");
  CHECK(result["envelope"]["tools_denied"] == 1);
  CHECK_FALSE(std::filesystem::exists(ws.path() / "out.txt"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}
