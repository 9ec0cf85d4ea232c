// The exit-status table (cli/cli.hpp kExitStatusTable, README "Exit status"), one test per
// row, through the real CLI.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.hpp"

using nlohmann::json;

namespace {

const std::string kSup = test::bin("subagent-supervisor").string();

std::vector<std::string> run_args(std::vector<std::string> extra, const std::string& script = "") {
  std::vector<std::string> a = {
      kSup,
      "run",
      "--preset",
      "explore",
      "--workspace",
      SUBAGENT_SOURCE_DIR,
      "--brief",
      "look around",
      "--no-transcript",
      "--model",
      "replay:" + (script.empty() ? test::source("examples/explore-demo.jsonl").string() : script)};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> fake(const std::string& mode) {
  return {"--child", test::program("fake_child").string(), "--child-arg", mode};
}

std::vector<std::string> sandboxed(const std::string& ws, std::vector<std::string> cmd) {
  std::vector<std::string> a = {kSup, "sandbox", "--preset", "explore", "--workspace", ws, "--"};
  a.insert(a.end(), cmd.begin(), cmd.end());
  return a;
}

}  // namespace

TEST_CASE("every command's --help prints the one table") {
  for (const auto& cmd :
       std::vector<std::vector<std::string>>{{kSup, "--help"}, {kSup, "run", "--help"}, {kSup, "sandbox", "--help"}}) {
    auto r = test::run(cmd);
    CHECK(r.code == 0);
    for (const char* row : {"Exit status (the same for every command)", "  64   bad command line", "  125  nothing",
                            "  126  sandbox", "  127  sandbox", "128+N"})
      CHECK_MESSAGE(r.out.find(row) != std::string::npos, cmd.back() << ": " << row);
  }
}

TEST_CASE("0: the child completed") {
  auto r = test::run(run_args({}));
  CHECK(r.code == 0);
  CHECK(json::parse(r.out)["status"] == "completed");
}

TEST_CASE("1: the command ran and reports a problem (policy check of a broken file)") {
  test::TempDir d;
  const std::string bad = d.write("explore.json", "{\"schema\": 1, \"preset\": \"explore\"");
  CHECK(test::run({kSup, "policy", "check", bad}).code == 1);
  CHECK(test::run({kSup, "policy", "check", test::source("policies/explore.json").string()}).code == 0);
}

TEST_CASE("2, 3, 5, 6: the envelope's status") {
  test::TempDir d;
  const std::string forever =
      d.write("f.jsonl", R"({"tool_calls":[{"name":"list_dir","arguments":{}}],"repeat":"forever"})"
                         "\n");
  auto budget = test::run(run_args({"--max-steps", "2"}, forever));
  CHECK(budget.code == 2);
  CHECK(json::parse(budget.out)["status"] == "budget_exhausted");
  auto with_hang = fake("hang");
  with_hang.insert(with_hang.end(), {"--timeout", "1s", "--wrap-up-grace", "200ms"});
  auto timeout = test::run(run_args(with_hang));
  CHECK(timeout.code == 3);
  CHECK(json::parse(timeout.out)["status"] == "timeout");
  auto failed = test::run(run_args(fake("crash")));
  CHECK(failed.code == 5);
  CHECK(json::parse(failed.out)["status"] == "failed");
  auto broke = test::run(run_args(fake("not_json")));
  CHECK(broke.code == 6);
  CHECK(json::parse(broke.out)["status"] == "protocol_error");
}

TEST_CASE("4: cancelled by SIGTERM") {
  test::TempDir d;
  const std::string out = (d.path() / "out").string();
  auto args = run_args(fake("hang"));
  const std::string name = "exit4-" + std::to_string(::getpid());
  args.insert(args.end(), {"--child-arg", name});  // the hanging child names itself (PR_SET_NAME)
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), n = ::open("/dev/null", O_RDWR);
    ::dup2(n, 0);
    ::dup2(o, 1);
    ::dup2(n, 2);
    test::exec_in("", args);
  }
  // Signal once the child runs (the supervisor's handlers are in place long before it spawns one).
  for (int i = 0; i < 3000 && test::processes_named(name) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(test::processes_named(name) > 0);
  ::kill(pid, SIGTERM);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 4);
  CHECK(json::parse(test::slurp(out))["status"] == "cancelled");
}

TEST_CASE("64: a bad command line, or one naming what does not exist; the valid twin runs") {
  CHECK(test::run({kSup, "run", "--bogus"}).code == 64);
  CHECK(test::run({kSup, "frobnicate"}).code == 64);
  auto preset =
      test::run({kSup, "run", "--preset", "nosuch", "--workspace", ".", "--brief", "b", "--model", "replay:x"});
  CHECK(preset.code == 64);
  CHECK(preset.err.find("unknown preset 'nosuch' (the presets in ") != std::string::npos);
  CHECK(preset.err.find("explore") != std::string::npos);
  auto ws = test::run(
      {kSup, "run", "--preset", "explore", "--workspace", "/nonexistent", "--brief", "b", "--model", "replay:x"});
  CHECK(ws.code == 64);
  CHECK(test::run({kSup, "sandbox", "--preset", "nosuch", "--", "/bin/true"}).code == 64);
  CHECK(test::run({kSup, "sandbox", "--preset", "explore", "--workspace", "/nonexistent", "--", "/bin/true"}).code ==
        64);
  for (const char* flag : {"--max-steps", "--max-tokens", "--summary-bytes", "--answer-bytes"}) {
    auto zero = test::run(run_args({flag, "0"}));
    CHECK_MESSAGE(zero.code == 64, flag);
    CHECK_MESSAGE(zero.err.find(std::string(flag) + " 0: must be at least 1") != std::string::npos, zero.err);
  }
  auto t0 = test::run(run_args({"--timeout", "0"}));
  CHECK(t0.code == 64);
  CHECK(t0.err.find("--timeout 0: must be at least 1ms") != std::string::npos);
  CHECK(test::run(run_args({"--max-steps", "1", "--timeout", "1m"})).code != 64);  // the twin
}

TEST_CASE("125: nothing was started, the child or its sandbox could not be set up") {
  test::TempDir d;
  const std::string not_exec = d.write("child", "#!/bin/sh\n");
  REQUIRE(::chmod(not_exec.c_str(), 0644) == 0);
  auto r = test::run(run_args({"--child", not_exec}));
  CHECK(r.code == 125);
  CHECK(r.out.empty());
  CHECK(r.err.find("is not an executable file") != std::string::npos);
  // A preset that exists but does not load.
  test::TempDir policies;
  policies.write("broken.json", "{\"schema\": 1,");
  auto broken =
      test::run({kSup, "sandbox", "--preset", "broken", "--policy-dir", policies.path().string(), "--", "/bin/true"});
  CHECK(broken.code == 125);
  CHECK(broken.err.find("broken") != std::string::npos);
}

TEST_CASE("126, 127, 128+N and CMD's own status: sandbox") {
  test::TempDir ws;
  REQUIRE(::chmod(ws.path().c_str(), 0755) == 0);
  const std::string text = ws.write("notes.txt", "not a program\n");
  REQUIRE(::chmod(text.c_str(), 0644) == 0);
  auto cannot = test::run(sandboxed(ws.path().string(), {text}));
  CHECK(cannot.code == 126);
  CHECK(cannot.err.find("execve") != std::string::npos);
  CHECK(test::run(sandboxed(ws.path().string(), {"no-such-command-anywhere"})).code == 127);
  // Killed by the kernel: an x32 syscall number makes seccomp kill the process with SIGSYS. (A
  // signal it sends itself would not do: the command is PID 1 of its namespace.)
  CHECK(test::run(sandboxed(ws.path().string(), {test::program("hostile").string(), "x32"})).code == 128 + SIGSYS);
  CHECK(test::run(sandboxed(ws.path().string(), {"/bin/sh", "-c", "exit 7"})).code == 7);
  CHECK(test::run(sandboxed(ws.path().string(), {"/bin/true"})).code == 0);
}
