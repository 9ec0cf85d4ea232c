// OpenAI-compatible provider against the loopback fake server, speaking the real wire format.
#include "models/providers.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
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

json inspect(boost::asio::io_context& io, const FakeServer& srv, const std::string& token) {
  supervisor::http::Request rq;
  rq.url = srv.base() + "/inspect/" + token;
  std::optional<supervisor::http::Response> resp;
  supervisor::http::Client::of(io).start(rq, [&](supervisor::http::Response r) { resp = std::move(r); });
  REQUIRE(run_until(io, [&] { return resp.has_value(); }));
  return json::parse(resp->body);
}

const std::string kKey = "sk-test-SECRET-123";

supervisor::ProviderConfig config(const std::string& base_url) {
  supervisor::ProviderConfig c;
  c.name = "fake";
  c.type = "openai";
  c.base_url = base_url + "/v1";
  c.model = "fake-model";
  c.max_output_tokens = 4096;
  c.stall_timeout = 1s;
  c.retry_base_delay = 50ms;
  c.retry_max_delay = 200ms;
  c.max_response_bytes = 1u << 20;
  return c;
}

struct Outcome {
  std::optional<supervisor::ModelReply> reply;
  int calls = 0;
};

supervisor::ModelReply call(boost::asio::io_context& io, supervisor::ProviderConfig cfg, supervisor::ModelCall mc = {},
                            std::chrono::milliseconds limit = 20s) {
  auto p = supervisor::make_openai_provider(io, std::move(cfg), kKey);
  if (mc.messages.empty()) mc.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  Outcome o;
  p->start(mc, [&](supervisor::ModelReply r) {
    ++o.calls;
    o.reply = std::move(r);
  });
  REQUIRE(run_until(
      io, [&] { return o.reply.has_value(); }, limit));
  for (int i = 0; i < 5; ++i) io.poll();  // a second `done` would show here
  CHECK(o.calls == 1);
  CHECK(o.reply->error_message.find(kKey) == std::string::npos);
  return *o.reply;
}

}  // namespace

TEST_CASE("openai: a streamed turn with reasoning, text and two tool calls split across deltas") {
  FakeServer srv;
  boost::asio::io_context io;
  supervisor::ModelCall mc;
  mc.messages =
      json::array({{{"role", "system"}, {"content", "be brief"}},
                   {{"role", "user"}, {"content", "look"}},
                   {{"role", "assistant"},
                    {"content", ""},
                    {"tool_calls", {{{"id", "call_0"}, {"name", "read_file"}, {"arguments", {{"path", "a"}}}}}}},
                   {{"role", "tool"}, {"tool_call_id", "call_0"}, {"name", "read_file"}, {"content", "text of a"}}});
  mc.tools = json::array({{{"name", "list_dir"}, {"description", "list"}, {"input_schema", {{"type", "object"}}}}});
  mc.max_tokens = 300;
  auto r = call(io, config(srv.scenario("tools", "t1")), mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "Looking.");
  CHECK(r.finish_reason == "tool_calls");
  REQUIRE(r.tool_calls.size() == 2);
  CHECK(r.tool_calls[0].id == "call_a");
  CHECK(r.tool_calls[0].name == "list_dir");
  CHECK(r.tool_calls[0].arguments == json{{"path", "src"}});
  CHECK(r.tool_calls[1].id == "call_b");
  CHECK(r.tool_calls[1].arguments == json{{"pattern", "x"}});
  CHECK(r.usage.input_tokens == 120);
  CHECK(r.usage.output_tokens == 30);
  CHECK(r.usage.reasoning_tokens == 4);
  CHECK_FALSE(r.usage_estimated);

  // What went over the wire.
  json seen = inspect(io, srv, "t1");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0]["path"] == "/s/tools/t1/v1/chat/completions");
  CHECK(seen[0]["headers"]["authorization"] == "Bearer " + kKey);
  const json& b = seen[0]["body"];
  CHECK(b["model"] == "fake-model");
  CHECK(b["stream"] == true);
  CHECK(b["stream_options"]["include_usage"] == true);
  CHECK(b["max_tokens"] == 300);
  CHECK(b["tools"][0]["type"] == "function");
  CHECK(b["tools"][0]["function"]["name"] == "list_dir");
  CHECK(b["tools"][0]["function"]["parameters"]["type"] == "object");
  CHECK(b["messages"][0] == json{{"role", "system"}, {"content", "be brief"}});
  CHECK(b["messages"][2]["content"].is_null());
  CHECK(b["messages"][2]["tool_calls"][0]["function"]["arguments"] == "{\"path\":\"a\"}");
  CHECK(b["messages"][3] == json{{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "text of a"}});
}

TEST_CASE("openai: max_tokens is the call's cap, bounded by the provider's max_output_tokens") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = config(srv.scenario("text", "cap"));
  cfg.max_output_tokens = 100;
  cfg.max_tokens_field = "max_completion_tokens";
  supervisor::ModelCall mc;
  mc.max_tokens = 5000;
  auto r = call(io, cfg, mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "Hello from the fake model.");
  CHECK(r.finish_reason == "stop");
  json seen = inspect(io, srv, "cap");
  CHECK(seen[0]["body"]["max_completion_tokens"] == 100);
  CHECK_FALSE(seen[0]["body"].contains("max_tokens"));
}

TEST_CASE("openai: a stream that would pass the budget is cut inside the call") {
  FakeServer srv;
  boost::asio::io_context io;
  supervisor::ModelCall mc;
  mc.max_tokens = 50;
  auto r = call(io, config(srv.scenario("budget", "b")), mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.finish_reason == "budget");
  CHECK(r.usage.output_tokens == 50);
  CHECK(r.content.size() == 50 * 4);  // fifty "tok " deltas, not one more
  CHECK(r.usage_estimated);
}

TEST_CASE("openai: 429 with Retry-After is retried after the wait; 500 then success is retried") {
  FakeServer srv;
  boost::asio::io_context io;
  auto t0 = std::chrono::steady_clock::now();
  auto r = call(io, config(srv.scenario("429", "r429")));
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "after the rate limit");
  CHECK(std::chrono::steady_clock::now() - t0 >= 1s);
  CHECK(inspect(io, srv, "r429").size() == 2);

  r = call(io, config(srv.scenario("500", "r500")));
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "after the 500");
  CHECK(inspect(io, srv, "r500").size() == 2);
}

TEST_CASE("openai: retries stop at max_retries, at a too-long Retry-After, and before the deadline") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = config(srv.scenario("always503", "g"));
  cfg.max_retries = 2;
  auto r = call(io, cfg);
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "provider_error");
  CHECK(r.error_message.find("HTTP 503") != std::string::npos);
  CHECK(r.error_message.find("gave up after 3 attempts") != std::string::npos);
  CHECK(inspect(io, srv, "g").size() == 3);

  auto t0 = std::chrono::steady_clock::now();
  r = call(io, config(srv.scenario("retry-after-long", "l")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_message.find("Retry-After 3600 s") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);

  cfg = config(srv.scenario("always503", "d"));
  cfg.retry_base_delay = 2000ms;
  cfg.retry_max_delay = 2000ms;
  supervisor::ModelCall mc;
  mc.deadline = std::chrono::steady_clock::now() + 500ms;
  r = call(io, cfg, mc);
  CHECK_FALSE(r.ok);
  CHECK(r.error_message.find("would pass the child's deadline") != std::string::npos);
  CHECK(inspect(io, srv, "d").size() == 1);
}

TEST_CASE("openai: a connection error is retried, then reported") {
  boost::asio::io_context io;
  // A port nobody listens on (bound, never listening) on loopback.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  auto cfg = config("http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  cfg.max_retries = 2;
  auto r = call(io, cfg);
  ::close(s);
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "provider_error");
  CHECK(r.error_message.find("gave up after 3 attempts") != std::string::npos);
}

TEST_CASE("openai: broken streams are errors naming what was wrong") {
  FakeServer srv;
  boost::asio::io_context io;
  auto r = call(io, config(srv.scenario("malformed", "m")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "bad_response");
  CHECK(r.error_message.find("malformed JSON") != std::string::npos);

  r = call(io, config(srv.scenario("truncated", "tr")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "bad_response");
  CHECK(r.error_message.find("truncated") != std::string::npos);

  r = call(io, config(srv.scenario("no-done", "nd")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "bad_response");
  CHECK(r.error_message.find("ended before its final event") != std::string::npos);

  auto t0 = std::chrono::steady_clock::now();
  r = call(io, config(srv.scenario("stall", "st")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "provider_error");
  CHECK(r.error_message.find("stalled") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 8s);

  r = call(io, config(srv.scenario("big", "big")));  // 10 MB against a 1 MiB cap
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "bad_response");
  CHECK(r.error_message.find("larger than 1048576 bytes") != std::string::npos);

  r = call(io, config(srv.scenario("bad-args", "ba")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "bad_response");
  CHECK(r.error_message.find("not a JSON object") != std::string::npos);
}

TEST_CASE("openai: an unknown finish reason is passed through") {
  FakeServer srv;
  boost::asio::io_context io;
  auto r = call(io, config(srv.scenario("unknown-finish", "u")));
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.finish_reason == "brand_new_reason");
}

TEST_CASE("openai: the key never appears in errors or describe(), even when the server echoes it") {
  FakeServer srv;
  boost::asio::io_context io;
  auto r = call(io, config(srv.scenario("401", "k")));
  CHECK_FALSE(r.ok);
  CHECK(r.error_message.find("HTTP 401") != std::string::npos);
  CHECK(r.error_message.find("[key]") != std::string::npos);
  auto p = supervisor::make_openai_provider(io, config(srv.base()), kKey);
  CHECK(p->describe().find(kKey) == std::string::npos);
  CHECK(p->describe().find("fake-model") != std::string::npos);
}

TEST_CASE("openai: cancel() aborts the transfer and done is never called") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_openai_provider(io, config(srv.scenario("stall", "c")), kKey);
  supervisor::ModelCall mc;
  mc.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  bool called = false;
  p->start(mc, [&](supervisor::ModelReply) { called = true; });
  run_until(
      io, [] { return false; }, 300ms);
  CHECK(supervisor::http::Client::of(io).active() == 1);
  p->cancel();
  CHECK(supervisor::http::Client::of(io).active() == 0);
  run_until(
      io, [] { return false; }, 1500ms);
  CHECK_FALSE(called);
  // The provider is reusable after a cancel.
  auto r = call(io, config(srv.scenario("text", "c2")));
  CHECK(r.ok);
}

TEST_CASE("openai: destroying the provider mid-stream is safe") {
  FakeServer srv;
  boost::asio::io_context io;
  bool called = false;
  {
    auto p = supervisor::make_openai_provider(io, config(srv.scenario("stall", "x")), kKey);
    supervisor::ModelCall mc;
    mc.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
    p->start(mc, [&](supervisor::ModelReply) { called = true; });
    run_until(
        io, [] { return false; }, 200ms);
  }
  run_until(
      io, [] { return false; }, 300ms);
  CHECK_FALSE(called);
  CHECK(supervisor::http::Client::of(io).active() == 0);
}

namespace {
json loop_history(std::size_t turns) {
  json m = json::array({{{"role", "system"}, {"content", "You are careful. " + std::string(6000, 's')}},
                        {{"role", "user"}, {"content", "explore"}}});
  for (std::size_t k = 0; k < turns; ++k) {
    const std::string id = "call_" + std::to_string(k);
    m.push_back({{"role", "assistant"},
                 {"content", "Reading the next file."},
                 {"tool_calls", {{{"id", id}, {"name", "read_file"}, {"arguments", {{"path", "f"}}}}}}});
    m.push_back(
        {{"role", "tool"}, {"tool_call_id", id}, {"name", "read_file"}, {"content", std::string(3000, 'a' + k % 26)}});
  }
  return m;
}
const json kReadFile =
    json::array({{{"name", "read_file"}, {"description", "read"}, {"input_schema", {{"type", "object"}}}}});
}  // namespace

TEST_CASE("openai: one prompt_cache_key per child; cached tokens read from prompt_tokens_details") {
  FakeServer srv;
  boost::asio::io_context io;
  std::vector<supervisor::ModelReply> replies;
  for (std::size_t turns = 0; turns < 3; ++turns) {
    supervisor::ModelCall mc;
    mc.child_id = "0123456789ab";
    mc.messages = loop_history(turns);
    mc.tools = kReadFile;
    mc.max_tokens = 2000;
    replies.push_back(call(io, config(srv.scenario("loop:10:4:0", "key")), mc));
    REQUIRE_MESSAGE(replies.back().ok, replies.back().error_message);
  }
  json seen = inspect(io, srv, "key");
  REQUIRE(seen.size() == 3);
  for (const auto& r : seen) CHECK(r["body"]["prompt_cache_key"] == "subagent-0123456789ab");
  CHECK(replies[0].usage.cache_read_input_tokens == 0);
  CHECK(replies[1].usage.cache_read_input_tokens >= 1024);
  CHECK(replies[2].usage.cache_read_input_tokens > replies[1].usage.cache_read_input_tokens);
  CHECK(replies[2].usage.cache_read_input_tokens <= replies[2].usage.input_tokens);
  CHECK(replies[2].usage.cache_write_input_tokens == 0);  // OpenAI reports no writes

  auto cfg = config(srv.scenario("loop:10:4:0", "nokey"));
  cfg.prompt_caching = false;
  supervisor::ModelCall mc;
  mc.child_id = "0123456789ab";
  REQUIRE(call(io, cfg, mc).ok);
  CHECK_FALSE(inspect(io, srv, "nokey")[0]["body"].contains("prompt_cache_key"));
}

TEST_CASE("openai: reasoning_effort follows the thinking budget left, and the output cap bounds one call") {
  CHECK(supervisor::reasoning_effort_for(20000, "high") == "high");
  CHECK(supervisor::reasoning_effort_for(20000, "medium") == "medium");
  CHECK(supervisor::reasoning_effort_for(5000, "high") == "medium");
  CHECK(supervisor::reasoning_effort_for(1000, "high") == "low");
  CHECK(supervisor::reasoning_effort_for(0, "high") == "low");
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = config(srv.scenario("loop:10:4:2000", "effort"));
  cfg.reasoning_effort = "high";
  cfg.max_tokens_field = "max_completion_tokens";
  cfg.max_output_tokens = 16000;
  for (std::uint64_t left : {20000u, 5000u, 100u}) {
    supervisor::ModelCall mc;
    mc.messages = loop_history(0);
    mc.tools = kReadFile;
    mc.max_tokens = 16000;
    mc.max_thinking_tokens = left;
    auto r = call(io, cfg, mc);
    REQUIRE_MESSAGE(r.ok, r.error_message);
    CHECK(r.usage.reasoning_tokens > 0);
    CHECK(r.usage.reasoning_tokens <= left + 4096);
  }
  json seen = inspect(io, srv, "effort");
  REQUIRE(seen.size() == 3);
  CHECK(seen[0]["body"]["reasoning_effort"] == "high");
  CHECK(seen[0]["body"]["max_completion_tokens"] == 16000);
  CHECK(seen[1]["body"]["reasoning_effort"] == "medium");
  CHECK(seen[1]["body"]["max_completion_tokens"] == 5000 + 4096);
  CHECK(seen[2]["body"]["reasoning_effort"] == "low");
  CHECK(seen[2]["body"]["max_completion_tokens"] == 100 + 4096);
  // Without reasoning_effort in the config nothing is sent (models without reasoning reject it).
  supervisor::ModelCall mc;
  mc.max_thinking_tokens = 5000;
  REQUIRE(call(io, config(srv.scenario("text", "noeffort")), mc).ok);
  CHECK_FALSE(inspect(io, srv, "noeffort")[0]["body"].contains("reasoning_effort"));
}

TEST_CASE("openai: a turn ended by the server's length cap is length, its cut tool call dropped") {
  FakeServer srv;
  boost::asio::io_context io;
  supervisor::ModelCall mc;
  mc.tools = kReadFile;
  auto r = call(io, config(srv.scenario("length-always", "len")), mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.finish_reason == "length");
  CHECK(r.content == "Searching.");
  CHECK(r.tool_calls.empty());
}

TEST_CASE("openai: the stall timeout is the supervisor's own timer, within 0.5 s of the setting") {
  FakeServer srv;
  boost::asio::io_context io;
  for (auto setting : {1s, 2s}) {
    auto cfg = config(srv.scenario("stall", "stall" + std::to_string(setting.count())));
    cfg.stall_timeout = setting;
    cfg.max_retries = 0;
    auto t0 = std::chrono::steady_clock::now();
    auto r = call(io, cfg);
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK_FALSE(r.ok);
    CHECK(r.error_message.find("stalled") != std::string::npos);
    // The fake sends its first event at once, then nothing.
    CHECK(took >= setting);
    CHECK(took < setting + 500ms);
  }
}

TEST_CASE("openai: every stream error names the provider and its host") {
  FakeServer srv;
  boost::asio::io_context io;
  for (std::string scenario : {"malformed", "truncated", "no-done", "stall", "bad-args", "big"}) {
    CAPTURE(scenario);
    auto r = call(io, config(srv.scenario(scenario, "where-" + scenario)));
    CHECK_FALSE(r.ok);
    CHECK(r.error_message.rfind("fake (http://127.0.0.1:", 0) == 0);
  }
}
