// End to end: `subagent-supervisor run --model NAME` with a model config, against the loopback fake servers.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "supervisor/http.hpp"
#include "fake_model_server.hpp"
#include "test_util.hpp"

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using test::FakeServer;
using test::run_until;


// Runs `subagent-supervisor run` with the model config pointing at the fake server.
test::RunResult run_with(const FakeServer& srv, const std::string& type, const std::string& scenario,
                         const std::string& token, std::vector<std::string> extra = {}) {
  test::TempDir dir;
  json cfg = {{"providers",
               {{"fake",
                 {{"type", type},
                  {"base_url", srv.scenario(scenario, token) + (type == "openai" ? "/v1" : "")},
                  {"model", "fake-model"},
                  {"api_key_env", "SUBAGENT_E2E_KEY"},
                  {"stall_timeout_seconds", 5}}}}}};
  std::string path = dir.write("models.json", cfg.dump());
  ::setenv("SUBAGENT_MODEL_CONFIG", path.c_str(), 1);
  ::setenv("SUBAGENT_E2E_KEY", "sk-e2e-SECRET-789", 1);
  std::vector<std::string> a = {test::bin("subagent-supervisor").string(), "run", "--preset", "explore", "--workspace",
                                SUBAGENT_SOURCE_DIR, "--brief", "list the workspace", "--model", "fake", "--quiet"};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = test::run(a);
  ::unsetenv("SUBAGENT_MODEL_CONFIG");
  ::unsetenv("SUBAGENT_E2E_KEY");
  return r;
}

}  // namespace

TEST_CASE("the agent loop runs unchanged against the fake OpenAI-compatible and Anthropic servers") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    auto r = run_with(srv, type, "agent", "e2e-" + type);
    REQUIRE_MESSAGE(r.code == 0, r.err);
    json env = json::parse(r.out);
    CHECK(env["status"] == "completed");
    CHECK(env["tools_used"]["list_dir"] == 1);
    CHECK(env["steps"] == 2);
    CHECK(env["answer"].get<std::string>().find("The workspace was listed.") != std::string::npos);
    CHECK(env["usage"]["input_tokens"].get<std::uint64_t>() > 0);
    CHECK(env["usage"]["output_tokens"].get<std::uint64_t>() > 0);
    if (type == "anthropic") CHECK(env["usage"]["reasoning_tokens"].get<std::uint64_t>() > 0);
    // The key stays in the supervisor.
    CHECK(r.out.find("sk-e2e-SECRET-789") == std::string::npos);
    CHECK(r.err.find("sk-e2e-SECRET-789") == std::string::npos);
  }
}

TEST_CASE("a token budget holds inside one streaming call") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    auto r = run_with(srv, type, "budget", "e2e-budget-" + type, {"--max-tokens", "600"});
    json env = json::parse(r.out, nullptr, false);
    REQUIRE_MESSAGE(!env.is_discarded(), r.out << r.err);
    // The server streams 1000 one-token deltas whatever max_tokens says; the supervisor cuts the call
    // at the 600 the budget leaves, so output never passes it.
    const auto out = env["usage"]["output_tokens"].get<std::uint64_t>();
    CHECK(out <= 600);
    CHECK(out >= 500);
    // The child may take the cut turn as its answer (completed) or ask again and be told the budget is spent.
    CHECK((env["status"] == "completed" || (env["status"] == "budget_exhausted" && env["budget"] == "tokens")));
  }
}

TEST_CASE("a model spec whose key variable is unset is refused before anything starts") {
  test::TempDir dir;
  json cfg = {{"providers", {{"fake", {{"type", "openai"}, {"base_url", "http://127.0.0.1:9/v1"}, {"model", "m"},
                                        {"api_key_env", "SUBAGENT_E2E_UNSET_KEY"}}}}}};
  ::setenv("SUBAGENT_MODEL_CONFIG", dir.write("models.json", cfg.dump()).c_str(), 1);
  ::unsetenv("SUBAGENT_E2E_UNSET_KEY");
  auto r = test::run({test::bin("subagent-supervisor").string(), "run", "--preset", "explore", "--workspace",
                      SUBAGENT_SOURCE_DIR, "--brief", "x", "--model", "fake"});
  ::unsetenv("SUBAGENT_MODEL_CONFIG");
  CHECK(r.code != 0);
  CHECK(r.err.find("SUBAGENT_E2E_UNSET_KEY") != std::string::npos);
}
