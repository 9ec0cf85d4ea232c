// End to end: `subagent-supervisor run --model NAME` with a model config, against the loopback fake servers.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "net/http.hpp"
#include "fake_model_server.hpp"
#include "test_util.hpp"

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using test::FakeServer;
using test::run_until;

// Runs `subagent-supervisor run` with the model config pointing at the fake server. `provider` and
// `top` are merged into the provider's entry and into the config itself.
test::RunResult run_with(const FakeServer& srv, const std::string& type, const std::string& scenario,
                         const std::string& token, std::vector<std::string> extra = {},
                         const json& provider = json::object(), const json& top = json::object()) {
  test::TempDir dir;
  json cfg = {{"providers",
               {{"fake",
                 {{"type", type},
                  {"base_url", srv.scenario(scenario, token) + (type == "openai" ? "/v1" : "")},
                  {"model", "fake-model"},
                  {"api_key_env", "SUBAGENT_E2E_KEY"},
                  {"stall_timeout_seconds", 5}}}}}};
  cfg["providers"]["fake"].update(provider);
  cfg.update(top);
  std::string path = dir.write("models.json", cfg.dump());
  ::setenv("SUBAGENT_MODEL_CONFIG", path.c_str(), 1);
  ::setenv("SUBAGENT_E2E_KEY", "sk-e2e-SECRET-789", 1);
  std::vector<std::string> a = {test::bin("subagent-supervisor").string(),
                                "run",
                                "--preset",
                                "explore",
                                "--workspace",
                                SUBAGENT_SOURCE_DIR,
                                "--brief",
                                "list the workspace",
                                "--model",
                                "fake",
                                "--quiet"};
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
    // The first call's reservation: its whole request (system prompt, brief, tool specs) at the worst
    // case of a token a byte. A budget 600 tokens above it leaves the call 600 output tokens.
    std::uint64_t first = 0;
    {
      auto r = run_with(srv, type, "budget", "e2e-budget-free-" + type, {"--max-steps", "1"});
      json env = json::parse(r.out, nullptr, false);
      REQUIRE_MESSAGE(!env.is_discarded(), r.out << r.err);
      json t = json::parse(std::ifstream(env["transcript"].get<std::string>()), nullptr, false);
      for (const auto& e : t["events"])
        if (e["event"] == "model_request") {
          first = e["estimated_input_tokens"].get<std::uint64_t>();
          break;
        }
      REQUIRE(first > 1000);
    }
    const std::uint64_t budget = first + 600;
    auto r = run_with(srv, type, "budget", "e2e-budget-" + type, {"--max-tokens", std::to_string(budget)});
    json env = json::parse(r.out, nullptr, false);
    REQUIRE_MESSAGE(!env.is_discarded(), r.out << r.err);
    // The server streams 1000 one-token deltas whatever max_tokens says; the supervisor cuts the call
    // at what the budget leaves once the input is reserved, so the total never passes it.
    const auto out = env["usage"]["output_tokens"].get<std::uint64_t>();
    json t = json::parse(std::ifstream(env["transcript"].get<std::string>()), nullptr, false);
    for (const auto& e : t["events"])
      if (e["event"] == "model_response") {
        CHECK(e["usage"]["output_tokens"] == 600);  // the first call, cut at what the budget left
        CHECK(e["finish_reason"] == "budget");
        break;
      }
    CHECK(env["usage"]["input_tokens"].get<std::uint64_t>() + out <= budget);
    // A cut turn is never an answer: the envelope says so.
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "tokens");
  }
}

TEST_CASE("a model spec whose key variable is unset is refused before anything starts") {
  test::TempDir dir;
  json cfg = {{"providers",
               {{"fake",
                 {{"type", "openai"},
                  {"base_url", "http://127.0.0.1:9/v1"},
                  {"model", "m"},
                  {"api_key_env", "SUBAGENT_E2E_UNSET_KEY"}}}}}};
  ::setenv("SUBAGENT_MODEL_CONFIG", dir.write("models.json", cfg.dump()).c_str(), 1);
  ::unsetenv("SUBAGENT_E2E_UNSET_KEY");
  auto r = test::run({test::bin("subagent-supervisor").string(), "run", "--preset", "explore", "--workspace",
                      SUBAGENT_SOURCE_DIR, "--brief", "x", "--model", "fake"});
  ::unsetenv("SUBAGENT_MODEL_CONFIG");
  CHECK(r.code != 0);
  CHECK(r.err.find("SUBAGENT_E2E_UNSET_KEY") != std::string::npos);
}

namespace {
json envelope_of(const test::RunResult& r) {
  json env = json::parse(r.out, nullptr, false);
  REQUIRE_MESSAGE(env.is_object(), "stdout: " << r.out << "\nstderr: " << r.err);
  return env;
}
std::uint64_t u(const json& env, const char* field) { return env["usage"][field].get<std::uint64_t>(); }
json transcript_of(const json& env) {
  REQUIRE(env["transcript"].is_string());
  std::ifstream in(env["transcript"].get<std::string>());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}
std::vector<json> events(const json& transcript, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : transcript["events"])
    if (e["event"] == name) out.push_back(e);
  return out;
}
}  // namespace

TEST_CASE("reservation: with the input growing every step, usage never passes the token budget") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    // Twin: with room, a shorter run of the same session reaches its answer and needs far more than 60,000.
    auto big = envelope_of(run_with(srv, type, "loop:20:4:0", "res-big-" + type, {"--child-arg", "--no-trim"}));
    CHECK(big["status"] == "completed");
    CHECK(u(big, "input_tokens") + u(big, "output_tokens") > 120'000);

    // The server counts 4 bytes a token, less dense than the estimate's 3: the estimate errs high
    // and the budget holds exactly.
    auto env = envelope_of(
        run_with(srv, type, "loop:40:4:0", "res-" + type, {"--max-tokens", "60000", "--child-arg", "--no-trim"}));
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "tokens");
    CHECK(env["answer_partial"] == true);  // the wrap-up turn's worst case did not fit either
    CHECK(u(env, "input_tokens") + u(env, "output_tokens") <= 60000);
    CHECK(env["steps"].get<int>() >= 5);

    // The densest server (a token a byte of the whole request): the reservation is that worst case,
    // so it holds as well.
    env = envelope_of(
        run_with(srv, type, "loop:40:1:0", "dense-" + type, {"--max-tokens", "60000", "--child-arg", "--no-trim"}));
    CHECK(env["status"] == "budget_exhausted");
    CHECK(u(env, "input_tokens") + u(env, "output_tokens") <= 60000);
  }
}

namespace {
// What the first `n` calls of a transcript used (input + output tokens), and the input of call n+1.
std::pair<std::uint64_t, std::uint64_t> used_before(const json& env, std::size_t n) {
  auto responses = events(transcript_of(env), "model_response");
  REQUIRE(responses.size() > n);
  std::uint64_t before = 0;
  for (std::size_t i = 0; i < n; ++i)
    before += responses[i]["usage"]["input_tokens"].get<std::uint64_t>() +
              responses[i]["usage"]["output_tokens"].get<std::uint64_t>();
  return {before, responses[n]["usage"]["input_tokens"].get<std::uint64_t>()};
}
}  // namespace

TEST_CASE("token budget: exact against a worst-case server, the wrap-up turn included") {
  FakeServer srv;
  // The server counts prose at 4 bytes a token but tool results at a token a byte (dense data), and
  // its answering turns take every output token max_tokens allows. Each case gives the call under test
  // 1,500 tokens past its real input: a reservation that falls short lets the call pass the budget.
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    const std::vector<std::string> no_trim = {"--child-arg", "--no-trim"};
    // A regular call. Twin: without a budget the session answers at its 4th call with all 8,192 tokens
    // the provider allows (cut, so a wrap-up turn follows).
    auto free = envelope_of(run_with(srv, type, "loop:3:4:0:fill+dense", "exact-free-" + type, no_trim));
    CHECK(free["steps"] == 5);
    auto [before, input] = used_before(free, 3);
    std::uint64_t budget = before + input + 1500;
    auto env = envelope_of(run_with(srv, type, "loop:3:4:0:fill+dense", "exact-" + type,
                                    {"--max-tokens", std::to_string(budget), "--child-arg", "--no-trim"}));
    CAPTURE(budget);
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "tokens");
    CHECK(u(env, "input_tokens") + u(env, "output_tokens") <= budget);
    auto responses = events(transcript_of(env), "model_response");
    REQUIRE(responses.size() == 4);  // the 4th call ran, cut at what was left; no wrap-up turn fit after it
    CHECK(responses[3]["usage"]["output_tokens"].get<std::uint64_t>() > 1000);
    CHECK(env["answer_partial"] == true);

    // The wrap-up turn (issue 33: it was given on an estimate that fell short, and passed the budget).
    // The step budget starts the wrap-up at the 4th request, which becomes the wrap-up turn.
    const std::vector<std::string> steps = {"--max-steps", "3", "--child-arg", "--no-trim"};
    free = envelope_of(run_with(srv, type, "loop:40:4:0:fill+dense", "wrap-free-" + type, steps));
    std::tie(before, input) = used_before(free, 3);
    budget = before + input + 1500;
    auto args = steps;
    args.insert(args.end(), {"--max-tokens", std::to_string(budget)});
    env = envelope_of(run_with(srv, type, "loop:40:4:0:fill+dense", "wrap-" + type, args));
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "steps");
    CHECK(u(env, "input_tokens") + u(env, "output_tokens") <= budget);
    auto requests = events(transcript_of(env), "model_request");
    REQUIRE(requests.size() == 4);
    CHECK(requests[3]["wrap_up_turn"] == true);  // given: its worst case fit
    CHECK(requests[3]["max_tokens"].get<std::uint64_t>() >= 256);

    // A token budget that stops the session between tool calls: the wrap-up turn's worst case does not
    // fit either, so none is given. The child reports with what it has, marked partial; the total
    // stays within the budget and the envelope and transcript are whole.
    args = no_trim;
    args.insert(args.end(), {"--max-tokens", "20000"});
    env = envelope_of(run_with(srv, type, "loop:40:4:0:fill+dense", "nowrap-" + type, args));
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "tokens");
    CHECK(env["reason"].get<std::string>().find("token budget exhausted") != std::string::npos);
    CHECK(u(env, "input_tokens") + u(env, "output_tokens") <= 20000);
    CHECK(env["answer_partial"] == true);
    CHECK(env["exit"]["code"] == 0);  // the child sent its final and exited: no kill
    auto t = transcript_of(env);
    for (const auto& e : events(t, "model_request")) CHECK(e["wrap_up_turn"] == false);
    CHECK(events(t, "final").size() == 1);
    CHECK(t["envelope"]["answer_partial"] == true);
  }
}

TEST_CASE("cost budget: exact against a worst-case server") {
  FakeServer srv;
  const json prices = {
      {"prices", {{"fake-model", {{"input", 3.0}, {"cached_input", 3.0}, {"cache_write", 3.0}, {"output", 15.0}}}}}};
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    // Twin: the same session without a cost budget spends far more than the cap below.
    auto free = envelope_of(run_with(srv, type, "loop:3:4:0:fill+dense", "cost-free-" + type,
                                     {"--child-arg", "--no-trim"}, json::object(), prices));
    REQUIRE(free["cost_usd"].is_number());
    auto responses = events(transcript_of(free), "model_response");
    REQUIRE(responses.size() == 5);
    double before = 0;
    for (int i = 0; i < 3; ++i) before += responses[i]["cost_usd"].get<double>();
    const double last_input =
        static_cast<double>(responses[3]["usage"]["input_tokens"].get<std::uint64_t>()) * 3.0 / 1e6;
    // The 4th call is left its input and 1,500 output tokens' worth.
    const double cap = before + last_input + 1500 * 15.0 / 1e6;
    CHECK(free["cost_usd"].get<double>() > cap);
    char cap_text[64];
    std::snprintf(cap_text, sizeof cap_text, "%.12f", cap);
    auto env = envelope_of(run_with(srv, type, "loop:3:4:0:fill+dense", "cost-exact-" + type,
                                    {"--max-cost-usd", cap_text, "--child-arg", "--no-trim"}, json::object(), prices));
    CAPTURE(cap);
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "cost");  // the turn was cut at the cap the cost budget set
    CHECK(env["steps"] == 4);
    CHECK(env["cost_usd"].get<double>() <= std::stod(cap_text));
    responses = events(transcript_of(env), "model_response");
    REQUIRE(responses.size() == 4);
    CHECK(responses[3]["usage"]["output_tokens"].get<std::uint64_t>() > 1000);
  }
}

TEST_CASE("the streamed output cap holds to the token, whatever the server reports") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    for (std::string scenario : {"overrun", "overrun-big"}) {
      CAPTURE(type);
      CAPTURE(scenario);
      // The server streams exactly max_tokens deltas, then reports 80 output tokens more than
      // max_tokens ("overrun-big": and then 20 MiB of padding, past the response size limit).
      auto env = envelope_of(run_with(srv, type, scenario, scenario + "-" + type));
      auto t = transcript_of(env);
      auto requests = events(t, "model_request");
      auto responses = events(t, "model_response");
      REQUIRE(!responses.empty());
      REQUIRE(requests.size() == responses.size());
      std::uint64_t allowed = 0;
      for (std::size_t i = 0; i < responses.size(); ++i) {
        // The call's cap: what the budget left, at most the provider's max_output_tokens (8,192).
        const auto cap = std::min<std::uint64_t>(requests[i]["max_tokens"].get<std::uint64_t>(), 8192);
        const auto out = responses[i]["usage"]["output_tokens"].get<std::uint64_t>();
        CHECK(out <= cap);
        CHECK(out == cap);  // what was delivered: all max_tokens of it
        CHECK(responses[i]["request"]["output_tokens_reported"] == cap + 80);
        allowed += cap;
      }
      CHECK(responses[0]["usage"]["output_tokens"] == 8192);  // the provider's max_output_tokens
      CHECK(u(env, "output_tokens") <= allowed);
    }
  }
}

TEST_CASE("cut turns: finish_reason length is never completed; the wrap-up turn answers when budget remains") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    auto env = envelope_of(run_with(srv, type, "length", "cut-" + type));
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["budget"] == "tokens");
    CHECK(env["answer"].get<std::string>().find("Wrapped up after the cut.") != std::string::npos);
    CHECK(env["answer_partial"] == false);
    CHECK(env["tools_used"].empty());  // the cut grep call was dropped, never run
    CHECK(env["steps"] == 2);

    // Every turn cut: the fragment comes back marked partial, never as a completed answer.
    env = envelope_of(run_with(srv, type, "length-always", "cut-all-" + type));
    CHECK(env["status"] == "budget_exhausted");
    CHECK(env["answer_partial"] == true);
    CHECK(env["answer"].get<std::string>().find("Searching.") != std::string::npos);
  }
}

TEST_CASE("thinking: counted from usage; each call gets what is left; the wrap-up turn included") {
  FakeServer srv;
  // Anthropic: 600 thinking tokens per call served, 10 bytes of it visible.
  auto env = envelope_of(run_with(srv, "anthropic", "loop:8:4:600", "think-a", {"--max-thinking-tokens", "3000"}));
  CHECK(env["status"] == "completed");
  CHECK(u(env, "reasoning_tokens") == 2400);  // 600, 600, 600, 600, then 600 left: under 1024, none
  auto t = transcript_of(env);
  auto responses = events(t, "model_response");
  REQUIRE(responses.size() == 9);
  CHECK(responses[0]["request"]["thinking_budget_tokens"] == 3000);
  CHECK(responses[1]["request"]["thinking_budget_tokens"] == 2400);
  CHECK(responses[3]["request"]["thinking_budget_tokens"] == 1200);
  CHECK(responses[4]["request"]["thinking_budget_tokens"] == 0);
  CHECK(responses[4]["request"]["thinking_off"].get<std::string>().find("1024") != std::string::npos);

  // OpenAI: reasoning_effort from what is left; the thinking budget holds within its bound.
  env = envelope_of(run_with(srv, "openai", "loop:12:4:2000", "think-o", {"--max-thinking-tokens", "6000"},
                             {{"reasoning_effort", "high"}, {"max_tokens_field", "max_completion_tokens"}}));
  CHECK(env["status"] == "budget_exhausted");
  CHECK(env["budget"] == "thinking_tokens");
  CHECK(u(env, "reasoning_tokens") <= 6000 + 2 * 4096);
  t = transcript_of(env);
  responses = events(t, "model_response");
  REQUIRE(responses.size() >= 3);
  CHECK(responses[0]["request"]["reasoning_effort"] == "medium");  // 6000 left
  CHECK(responses[1]["request"]["reasoning_effort"] == "low");     // 4000 left
  auto requests = events(t, "model_request");
  CHECK(requests.back()["wrap_up_turn"] == true);
  CHECK(requests.back()["thinking_tokens_left"].get<std::uint64_t>() <= 6000);
}

TEST_CASE("prompt caching: cache reads and writes reach the envelope and the transcript") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    auto env = envelope_of(run_with(srv, type, "loop:10:4:0", "cache-" + type));
    CHECK(env["status"] == "completed");
    CHECK(u(env, "cache_read_input_tokens") > 0);
    CHECK(u(env, "cache_read_input_tokens") < u(env, "input_tokens"));
    if (type == "anthropic")
      CHECK(u(env, "cache_write_input_tokens") > 0);
    else
      CHECK(u(env, "cache_write_input_tokens") == 0);
    auto t = transcript_of(env);
    std::uint64_t read = 0;
    for (const auto& e : events(t, "model_response"))
      read += e["usage"]["cache_read_input_tokens"].get<std::uint64_t>();
    CHECK(read == u(env, "cache_read_input_tokens"));
  }
}

TEST_CASE("cost: estimated from the price table; max_cost_usd holds with the same reservation") {
  FakeServer srv;
  const json prices = {
      {"prices", {{"fake-model", {{"input", 3.0}, {"cached_input", 0.3}, {"cache_write", 3.75}, {"output", 15.0}}}}}};
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    auto env = envelope_of(run_with(srv, type, "loop:10:4:0", "cost-" + type, {}, json::object(), prices));
    CHECK(env["status"] == "completed");
    REQUIRE(env["cost_usd"].is_number());
    const double in = static_cast<double>(u(env, "input_tokens") - u(env, "cache_read_input_tokens") -
                                          u(env, "cache_write_input_tokens"));
    const double want = (in * 3.0 + static_cast<double>(u(env, "cache_read_input_tokens")) * 0.3 +
                         static_cast<double>(u(env, "cache_write_input_tokens")) * 3.75 +
                         static_cast<double>(u(env, "output_tokens")) * 15.0) /
                        1e6;
    CHECK(env["cost_usd"].get<double>() == doctest::Approx(want).epsilon(1e-9));
    CHECK(env["cost_usd"].get<double>() > 0.01);

    // The same session under a cost budget a third of its cost: refused before the call that could pass it.
    const double cap = env["cost_usd"].get<double>() / 3;
    auto capped = envelope_of(run_with(srv, type, "loop:10:4:0", "costcap-" + type,
                                       {"--max-cost-usd", std::to_string(cap)}, json::object(), prices));
    CHECK(capped["status"] == "budget_exhausted");
    CHECK(capped["budget"] == "cost");
    CHECK(capped["cost_usd"].get<double>() <= cap);
    CHECK(capped["reason"].get<std::string>().find("cost budget exhausted") != std::string::npos);

    // No price for the model: a cost budget cannot be counted, so the run is refused, saying why.
    auto r = run_with(srv, type, "loop:10:4:0", "costnoprice-" + type, {"--max-cost-usd", "1"});
    auto none = envelope_of(r);
    CHECK(none["status"] == "failed");
    CHECK(none["reason"].get<std::string>().find("has no price") != std::string::npos);
    CHECK(none["cost_usd"].is_null());
  }
}

TEST_CASE("context trimming: fewer input tokens over a long session, the same answer") {
  FakeServer srv;
  for (std::string type : {"openai", "anthropic"}) {
    CAPTURE(type);
    auto full = envelope_of(run_with(srv, type, "loop:30:4:0", "trim-off-" + type, {"--child-arg", "--no-trim"}));
    auto trimmed = envelope_of(run_with(srv, type, "loop:30:4:0", "trim-on-" + type));
    CHECK(full["status"] == "completed");
    CHECK(trimmed["status"] == "completed");
    CHECK(trimmed["answer"] == full["answer"]);
    CHECK(trimmed["steps"] == full["steps"]);
    CHECK(u(trimmed, "input_tokens") * 2 < u(full, "input_tokens"));
    // Trimming keeps the cached prefix most of the time: most input is still read from the cache.
    CHECK(u(trimmed, "cache_read_input_tokens") * 2 > u(trimmed, "input_tokens"));
  }
}
