// `subagent-supervisor run` as a parent agent uses it: flags, exit codes, one envelope on stdout.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "test_util.hpp"

using nlohmann::json;

namespace {

std::vector<std::string> run_args(std::vector<std::string> extra, const std::string& script) {
  std::vector<std::string> a = {test::bin("subagent-supervisor").string(),
                                "run",
                                "--preset",
                                "explore",
                                "--workspace",
                                SUBAGENT_SOURCE_DIR,
                                "--brief",
                                "look around",
                                "--model",
                                "replay:" + script};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST_CASE("the README demo completes and its cited evidence still holds") {
  auto r = test::run(run_args({"--description", "demo"}, test::source("examples/explore-demo.jsonl").string()));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  json env = json::parse(r.out);
  CHECK(env["status"] == "completed");
  CHECK(env["description"] == "demo");
  CHECK(env["tools_used"]["grep"] == 1);
  CHECK(env["exit"]["code"] == 0);
  // Each "- path:line — what it shows" in the scripted answer must point at a line that says so.
  std::string answer = env["answer"];
  std::regex ref(R"(- ([\w./]+):(\d+) — (.*))");
  int checked = 0;
  for (std::sregex_iterator it(answer.begin(), answer.end(), ref), end; it != end; ++it) {
    std::ifstream in(test::source((*it)[1].str()));
    std::string line;
    for (int n = std::stoi((*it)[2].str()); n > 0 && std::getline(in, line); --n) {
    }
    std::string claim = (*it)[3].str();
    bool ok =
        (claim.find("kDefaultMaxLine") != std::string::npos && line.find("kDefaultMaxLine") != std::string::npos) ||
        (claim.find("size check") != std::string::npos && line.find("> max_line_") != std::string::npos) ||
        (claim.find("line_too_long") != std::string::npos && line.find("line_too_long") != std::string::npos);
    CHECK_MESSAGE(ok, (*it)[0].str() << " -> " << line);
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("a limit above the preset's is refused before anything starts, naming field and values") {
  auto r = test::run(run_args({"--max-steps", "500"}, test::source("examples/explore-demo.jsonl").string()));
  CHECK(r.code == 64);
  CHECK(r.out.empty());
  CHECK(r.err.find("--max-steps 500 exceeds the preset explore's max_steps 100") != std::string::npos);
  r = test::run(run_args({"--timeout", "2h"}, test::source("examples/explore-demo.jsonl").string()));
  CHECK(r.code == 64);
  CHECK(r.err.find("--timeout 7200000ms exceeds") != std::string::npos);
}

TEST_CASE("bad command lines and bad inputs name what was wrong") {
  const std::string sup = test::bin("subagent-supervisor").string();
  auto r = test::run({sup, "run", "--preset", "explore"});
  CHECK(r.code == 64);
  CHECK(r.err.find("--workspace is required") != std::string::npos);
  r = test::run({sup, "run", "--bogus"});
  CHECK(r.code == 64);
  CHECK(r.err.find("unknown option '--bogus'") != std::string::npos);
  r = test::run(run_args({"--max-steps", "lots"}, "x"));
  CHECK(r.code == 64);
  CHECK(r.err.find("--max-steps takes a whole number") != std::string::npos);
  r = test::run(run_args({}, "/nonexistent/script.jsonl"));
  CHECK(r.code == 64);
  CHECK(r.err.find("replay script '/nonexistent/script.jsonl' cannot be read") != std::string::npos);
  r = test::run({sup, "run", "--preset", "nosuch", "--workspace", ".", "--brief", "b", "--model", "replay:x"});
  CHECK(r.code == 64);
  CHECK(r.err.find("unknown preset 'nosuch'") != std::string::npos);
  r = test::run(
      {sup, "run", "--preset", "explore", "--workspace", "/nonexistent", "--brief", "b", "--model", "replay:x"});
  CHECK(r.code == 64);
  CHECK(r.err.find("workspace '/nonexistent'") != std::string::npos);
  r = test::run({sup, "frobnicate"});
  CHECK(r.code == 64);
}

TEST_CASE("--help documents every flag") {
  auto r = test::run({test::bin("subagent-supervisor").string(), "run", "--help"});
  CHECK(r.code == 0);
  for (const char* flag : {"--preset", "--workspace", "--brief", "--description", "--model", "--max-steps",
                           "--max-tool-calls", "--max-tokens", "--timeout", "--child", "--max-line"})
    CHECK_MESSAGE(r.out.find(flag) != std::string::npos, flag);
}

TEST_CASE("the exit status follows the envelope's status") {
  test::TempDir d;
  std::string forever = d.write("f.jsonl", R"({"tool_calls":[{"name":"list_dir","arguments":{}}],"repeat":"forever"})"
                                           "\n");
  auto r = test::run(run_args({"--max-steps", "2"}, forever));
  CHECK(r.code == 2);
  CHECK(json::parse(r.out)["status"] == "budget_exhausted");
  r = test::run(run_args({"--child", test::program("fake_child").string(), "--child-arg", "crash"}, forever));
  CHECK(r.code == 5);
  CHECK(json::parse(r.out)["exit"]["signal"] == "SIGSEGV");
  r = test::run(run_args({"--child", test::program("fake_child").string(), "--child-arg", "huge_line", "--child-arg",
                          "5000", "--max-line", "4096"},
                         forever));
  CHECK(r.code == 6);
  CHECK(json::parse(r.out)["reason"].get<std::string>().find("limit is 4096") != std::string::npos);
}
