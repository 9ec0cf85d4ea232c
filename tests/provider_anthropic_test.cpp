// Anthropic Messages provider against the loopback fake server, speaking the real wire format.
#include "supervisor/providers.hpp"

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

json inspect(boost::asio::io_context& io, const FakeServer& srv, const std::string& token) {
  supervisor::http::Request rq;
  rq.url = srv.base() + "/inspect/" + token;
  std::optional<supervisor::http::Response> resp;
  supervisor::http::Client::of(io).start(rq, [&](supervisor::http::Response r) { resp = std::move(r); });
  REQUIRE(run_until(io, [&] { return resp.has_value(); }));
  return json::parse(resp->body);
}

const std::string kKey = "sk-ant-test-SECRET-456";

supervisor::ProviderConfig config(const std::string& base_url) {
  supervisor::ProviderConfig c;
  c.name = "fake";
  c.type = "anthropic";
  c.base_url = base_url;
  c.model = "claude-fake";
  c.max_output_tokens = 8192;
  c.stall_timeout = 1s;
  c.retry_base_delay = 50ms;
  c.retry_max_delay = 200ms;
  return c;
}

struct Turn {
  std::optional<supervisor::ModelReply> reply;
};

supervisor::ModelReply call(boost::asio::io_context& io, supervisor::ModelProvider& p, supervisor::ModelCall mc) {
  std::optional<supervisor::ModelReply> reply;
  int calls = 0;
  p.start(mc, [&](supervisor::ModelReply r) {
    ++calls;
    reply = std::move(r);
  });
  REQUIRE(run_until(io, [&] { return reply.has_value(); }));
  io.poll();
  CHECK(calls == 1);
  CHECK(reply->error_message.find(kKey) == std::string::npos);
  return *reply;
}

supervisor::ModelCall user_call(const std::string& text = "hi") {
  supervisor::ModelCall mc;
  mc.messages = json::array({{{"role", "system"}, {"content", "You are careful."}}, {{"role", "user"}, {"content", text}}});
  return mc;
}

}  // namespace

TEST_CASE("anthropic: thinking, text and a tool_use streamed; usage and stop reason mapped") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("tools", "a1")), kKey);
  auto mc = user_call();
  mc.tools = json::array({{{"name", "list_dir"}, {"description", "list"}, {"input_schema", {{"type", "object"}}}}});
  mc.max_tokens = 10000;
  mc.max_thinking_tokens = 3000;
  auto r = call(io, *p, mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "Let me look.");
  CHECK(r.finish_reason == "tool_calls");
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].id == "toolu_01");
  CHECK(r.tool_calls[0].name == "list_dir");
  CHECK(r.tool_calls[0].arguments == json{{"path", "."}});
  CHECK(r.usage.input_tokens == 250);  // input + cache reads
  CHECK(r.usage.output_tokens == 42);
  CHECK(r.usage.reasoning_tokens >= 1);  // the thinking deltas, counted
  CHECK(r.usage.reasoning_tokens <= r.usage.output_tokens);

  json seen = inspect(io, srv, "a1");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0]["path"] == "/s/tools/a1/v1/messages");
  CHECK(seen[0]["headers"]["x-api-key"] == kKey);
  CHECK(seen[0]["headers"]["anthropic-version"] == "2023-06-01");
  const json& b = seen[0]["body"];
  CHECK(b["system"] == "You are careful.");
  CHECK(b["max_tokens"] == 8192);  // the call's 10000, bounded by max_output_tokens
  CHECK(b["thinking"] == json{{"type", "enabled"}, {"budget_tokens", 3000}});
  CHECK(b["tools"][0]["input_schema"]["type"] == "object");
  CHECK(b["messages"].size() == 1);
  CHECK(b["messages"][0]["role"] == "user");

  // The next turn: the tool result goes back in a user turn, after the assistant's tool_use, and the
  // signed thinking block is put back in front of it.
  mc.messages.push_back({{"role", "assistant"}, {"content", r.content},
                         {"tool_calls", {{{"id", "toolu_01"}, {"name", "list_dir"}, {"arguments", {{"path", "."}}}}}}});
  mc.messages.push_back({{"role", "tool"}, {"tool_call_id", "toolu_01"}, {"name", "list_dir"}, {"content", "a\nb\n"}});
  p->cancel();
  auto r2 = call(io, *p, mc);
  REQUIRE_MESSAGE(r2.ok, r2.error_message);
  seen = inspect(io, srv, "a1");
  REQUIRE(seen.size() == 2);
  const json& m = seen[1]["body"]["messages"];
  REQUIRE(m.size() == 3);
  CHECK(m[1]["role"] == "assistant");
  CHECK(m[1]["content"][0] == json{{"type", "thinking"}, {"thinking", "I should list the dir."}, {"signature", "SIG123"}});
  CHECK(m[1]["content"][1] == json{{"type", "text"}, {"text", "Let me look."}});
  CHECK(m[1]["content"][2]["type"] == "tool_use");
  CHECK(m[1]["content"][2]["input"] == json{{"path", "."}});
  CHECK(m[2]["role"] == "user");
  CHECK(m[2]["content"][0] == json{{"type", "tool_result"}, {"tool_use_id", "toolu_01"}, {"content", "a\nb\n"}});
  CHECK(seen[1]["body"].contains("thinking"));
}

TEST_CASE("anthropic: a tool-use turn whose thinking blocks are unknown is continued without thinking") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("text", "nt")), kKey);
  auto mc = user_call();
  mc.max_tokens = 8000;
  mc.max_thinking_tokens = 2000;
  mc.messages.push_back({{"role", "assistant"}, {"content", ""},
                         {"tool_calls", {{{"id", "call.1"}, {"name", "grep"}, {"arguments", {{"pattern", "x"}}}}}}});
  mc.messages.push_back({{"role", "tool"}, {"tool_call_id", "call.1"}, {"content", "nothing"}});
  auto r = call(io, *p, mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "Here is the answer.");
  CHECK(r.finish_reason == "stop");
  json b = inspect(io, srv, "nt")[0]["body"];
  CHECK_FALSE(b.contains("thinking"));
  CHECK(b["messages"][1]["content"][0]["id"] == "call_1");  // ids made acceptable, consistently
  CHECK(b["messages"][2]["content"][0]["tool_use_id"] == "call_1");
}

TEST_CASE("anthropic: no thinking when the thinking budget is below Anthropic's 1024 minimum") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("text", "small")), kKey);
  auto mc = user_call();
  mc.max_tokens = 8000;
  mc.max_thinking_tokens = 500;
  REQUIRE(call(io, *p, mc).ok);
  CHECK_FALSE(inspect(io, srv, "small")[0]["body"].contains("thinking"));
}

TEST_CASE("anthropic: a stream past the budget is cut; unknown stop reasons pass through") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("budget", "b")), kKey);
  auto mc = user_call();
  mc.max_tokens = 40;
  auto r = call(io, *p, mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.finish_reason == "budget");
  CHECK(r.usage.output_tokens == 40);
  CHECK(r.usage.input_tokens == 30);
  CHECK(r.content.size() == 40 * 4);

  auto q = supervisor::make_anthropic_provider(io, config(srv.scenario("unknown-finish", "u")), kKey);
  r = call(io, *q, user_call());
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.finish_reason == "brand_new_reason");
  CHECK(r.content == "hm");
}

TEST_CASE("anthropic: 429 Retry-After and a mid-stream overloaded error are retried") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("429", "r")), kKey);
  auto t0 = std::chrono::steady_clock::now();
  auto r = call(io, *p, user_call());
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(std::chrono::steady_clock::now() - t0 >= 1s);
  CHECK(inspect(io, srv, "r").size() == 2);

  auto q = supervisor::make_anthropic_provider(io, config(srv.scenario("stream-error", "se")), kKey);
  r = call(io, *q, user_call());
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.content == "Here is the answer.");
  CHECK(inspect(io, srv, "se").size() == 2);
}

TEST_CASE("anthropic: a stalled stream and a truncated one are errors") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("stall", "s")), kKey);
  auto r = call(io, *p, user_call());
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "provider_error");
  CHECK(r.error_message.find("stalled") != std::string::npos);
  auto q = supervisor::make_anthropic_provider(io, config(srv.scenario("truncated", "t")), kKey);
  r = call(io, *q, user_call());
  CHECK_FALSE(r.ok);
  CHECK(r.error_code == "bad_response");
}
