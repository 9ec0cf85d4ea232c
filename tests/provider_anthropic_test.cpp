// Anthropic Messages provider against the loopback fake server, speaking the real wire format.
#include "models/providers.hpp"

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
  mc.messages =
      json::array({{{"role", "system"}, {"content", "You are careful."}}, {{"role", "user"}, {"content", text}}});
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
  REQUIRE(b["system"].is_array());  // a block, so it can carry a cache breakpoint
  CHECK(b["system"][0]["text"] == "You are careful.");
  CHECK(b["system"][0]["cache_control"] == json{{"type", "ephemeral"}});
  CHECK(b["max_tokens"] == 8192);  // the call's 10000, bounded by max_output_tokens
  CHECK(b["thinking"] == json{{"type", "enabled"}, {"budget_tokens", 3000}});
  CHECK(b["tools"][0]["input_schema"]["type"] == "object");
  CHECK(b["messages"].size() == 1);
  CHECK(b["messages"][0]["role"] == "user");

  // The next turn: the tool result goes back in a user turn, after the assistant's tool_use, and the
  // signed thinking block is put back in front of it.
  mc.messages.push_back({{"role", "assistant"},
                         {"content", r.content},
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
  CHECK(m[1]["content"][0] ==
        json{{"type", "thinking"}, {"thinking", "I should list the dir."}, {"signature", "SIG123"}});
  CHECK(m[1]["content"][1] == json{{"type", "text"}, {"text", "Let me look."}});
  CHECK(m[1]["content"][2]["type"] == "tool_use");
  CHECK(m[1]["content"][2]["input"] == json{{"path", "."}});
  CHECK(m[2]["role"] == "user");
  CHECK(m[2]["content"][0] == json{{"type", "tool_result"},
                                   {"tool_use_id", "toolu_01"},
                                   {"content", "a\nb\n"},
                                   {"cache_control", {{"type", "ephemeral"}}}});
  CHECK(seen[1]["body"].contains("thinking"));
}

TEST_CASE("anthropic: a tool-use turn whose thinking blocks are unknown is continued without thinking") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("text", "nt")), kKey);
  auto mc = user_call();
  mc.max_tokens = 8000;
  mc.max_thinking_tokens = 2000;
  mc.messages.push_back({{"role", "assistant"},
                         {"content", ""},
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

namespace {
// A history of `turns` read_file turns as the reference child keeps it (ids as the loop scenario gives).
json loop_history(std::size_t turns) {
  json m = json::array({{{"role", "system"}, {"content", "You are careful. " + std::string(6000, 's')}},
                        {{"role", "user"}, {"content", "explore"}}});
  for (std::size_t k = 0; k < turns; ++k) {
    const std::string id = "toolu_" + std::to_string(k);
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

TEST_CASE("anthropic: thinking tokens come from usage, not from the (summarized) thinking text") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("loop:5:4:600", "tt")), kKey);
  supervisor::ModelCall mc;
  mc.messages = loop_history(0);
  mc.tools = kReadFile;
  mc.max_tokens = 8000;
  mc.max_thinking_tokens = 3000;
  auto r = call(io, *p, mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.usage.reasoning_tokens == 600);  // usage.output_tokens_details.thinking_tokens; the text is 10 bytes
  CHECK(r.request["thinking_budget_tokens"] == 3000);

  // A server that reports no thinking count: the thinking is what output_tokens leaves after the
  // visible output, so it is not the 6 tokens the visible thinking text suggests.
  auto q = supervisor::make_anthropic_provider(io, config(srv.scenario("tools", "td")), kKey);
  mc = user_call();
  mc.max_tokens = 8000;
  mc.max_thinking_tokens = 3000;
  r = call(io, *q, mc);
  REQUIRE(r.ok);
  CHECK(r.usage.output_tokens == 42);
  CHECK(r.usage.reasoning_tokens > 20);
  CHECK(r.usage.reasoning_tokens <= 42);
}

TEST_CASE("anthropic: each call's budget_tokens is what is left; under 1024 none, and nothing is rewritten") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("loop:10:4:600", "tb")), kKey);
  json history = loop_history(0);
  std::vector<std::uint64_t> left = {3000, 2400, 700};
  json prev_assistant;
  for (std::size_t i = 0; i < left.size(); ++i) {
    supervisor::ModelCall mc;
    mc.messages = history;
    mc.tools = kReadFile;
    mc.max_tokens = 8000;
    mc.max_thinking_tokens = left[i];
    p->cancel();
    auto r = call(io, *p, mc);
    REQUIRE_MESSAGE(r.ok, r.error_message);
    REQUIRE(r.tool_calls.size() == 1);
    if (left[i] < 1024) CHECK(r.request["thinking_off"].get<std::string>().find("minimum") != std::string::npos);
    history.push_back(
        {{"role", "assistant"},
         {"content", r.content},
         {"tool_calls",
          {{{"id", r.tool_calls[0].id}, {"name", "read_file"}, {"arguments", r.tool_calls[0].arguments}}}}});
    history.push_back(
        {{"role", "tool"}, {"tool_call_id", r.tool_calls[0].id}, {"name", "read_file"}, {"content", "text"}});
  }
  json seen = inspect(io, srv, "tb");
  REQUIRE(seen.size() == 3);
  CHECK(seen[0]["body"]["thinking"]["budget_tokens"] == 3000);
  CHECK(seen[1]["body"]["thinking"]["budget_tokens"] == 2400);
  CHECK_FALSE(seen[2]["body"].contains("thinking"));  // 700 left: under the minimum
  // The earlier turns' signed thinking blocks are still there, unchanged, with thinking off.
  const json& m = seen[2]["body"]["messages"];
  CHECK(m[1]["content"][0] == json{{"type", "thinking"}, {"thinking", "Next file."}, {"signature", "SIG0"}});
  CHECK(m[3]["content"][0] == json{{"type", "thinking"}, {"thinking", "Next file."}, {"signature", "SIG1"}});
}

TEST_CASE("anthropic: signed thinking blocks of every turn are kept (no drop after 32 tool turns)") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("loop:40:4:100", "many")), kKey);
  json history = loop_history(0);
  history[0]["content"] = "short";
  for (int i = 0; i < 36; ++i) {
    supervisor::ModelCall mc;
    mc.messages = history;
    mc.tools = kReadFile;
    mc.max_tokens = 8000;
    mc.max_thinking_tokens = 100'000;
    p->cancel();
    auto r = call(io, *p, mc);
    REQUIRE_MESSAGE(r.ok, r.error_message);
    REQUIRE(r.tool_calls.size() == 1);
    history.push_back(
        {{"role", "assistant"},
         {"content", r.content},
         {"tool_calls",
          {{{"id", r.tool_calls[0].id}, {"name", "read_file"}, {"arguments", r.tool_calls[0].arguments}}}}});
    history.push_back(
        {{"role", "tool"}, {"tool_call_id", r.tool_calls[0].id}, {"name", "read_file"}, {"content", "x"}});
  }
  json seen = inspect(io, srv, "many");
  REQUIRE(seen.size() == 36);
  const json& last = seen.back()["body"];
  CHECK(last.contains("thinking"));
  CHECK(last["messages"][1]["content"][0]["signature"] == "SIG0");  // the oldest turn's block
  CHECK(last["messages"][69]["content"][0]["signature"] == "SIG34");
}

TEST_CASE("anthropic: cache breakpoints on tools, system and the growing history; cache use read from usage") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = config(srv.scenario("loop:10:4:0", "cache"));
  cfg.thinking = false;
  auto p = supervisor::make_anthropic_provider(io, cfg, kKey);
  std::vector<supervisor::ModelReply> replies;
  for (std::size_t turns = 0; turns < 3; ++turns) {
    supervisor::ModelCall mc;
    mc.messages = loop_history(turns);
    mc.tools = kReadFile;
    mc.max_tokens = 4000;
    p->cancel();
    replies.push_back(call(io, *p, mc));
    REQUIRE_MESSAGE(replies.back().ok, replies.back().error_message);
  }
  json seen = inspect(io, srv, "cache");
  REQUIRE(seen.size() == 3);
  for (const auto& req : seen) {
    const json& b = req["body"];
    CHECK_FALSE(b["tools"].back().contains("cache_control"));  // the system's breakpoint covers the tools
    CHECK(b["system"][0]["cache_control"] == json{{"type", "ephemeral"}});
    std::size_t marks = 1;
    for (const auto& m : b["messages"])
      for (const auto& blk : m["content"]) marks += blk.contains("cache_control");
    CHECK(marks <= 4);  // the API's limit
    CHECK(b["messages"].back()["content"].back().contains("cache_control"));
  }
  // First call writes the prefix; later ones read it back and write only what was added.
  CHECK(replies[0].usage.cache_write_input_tokens > 1024);
  CHECK(replies[0].usage.cache_read_input_tokens == 0);
  CHECK(replies[1].usage.cache_read_input_tokens >= replies[0].usage.cache_write_input_tokens);
  CHECK(replies[2].usage.cache_read_input_tokens > replies[1].usage.cache_read_input_tokens);
  CHECK(replies[2].usage.cache_write_input_tokens < replies[0].usage.cache_write_input_tokens);
  CHECK(replies[2].usage.input_tokens >=
        replies[2].usage.cache_read_input_tokens + replies[2].usage.cache_write_input_tokens);

  // prompt_caching off: no breakpoints at all.
  cfg = config(srv.scenario("loop:10:4:0", "nocache"));
  cfg.prompt_caching = false;
  cfg.thinking = false;
  auto q = supervisor::make_anthropic_provider(io, cfg, kKey);
  supervisor::ModelCall mc;
  mc.messages = loop_history(1);
  mc.tools = kReadFile;
  mc.max_tokens = 4000;
  REQUIRE(call(io, *q, mc).ok);
  CHECK(inspect(io, srv, "nocache")[0]["body"].dump().find("cache_control") == std::string::npos);
}

TEST_CASE("anthropic: after the history changes in the middle (a trim), the unchanged part is read back") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = config(srv.scenario("loop:20:4:0", "anchor"));
  cfg.thinking = false;
  auto p = supervisor::make_anthropic_provider(io, cfg, kKey);
  auto stub = [](json h, std::size_t upto) {  // what the child's trimming does to turns before `upto`
    for (std::size_t k = 0; k < upto; ++k) h[3 + 2 * k]["content"] = "[trimmed " + std::to_string(k) + "]";
    return h;
  };
  std::vector<json> requests = {loop_history(4), loop_history(5), stub(loop_history(6), 2), stub(loop_history(7), 2),
                                stub(loop_history(8), 4)};
  std::vector<supervisor::ModelReply> replies;
  for (const auto& h : requests) {
    supervisor::ModelCall mc;
    mc.messages = h;
    mc.tools = kReadFile;
    mc.max_tokens = 4000;
    p->cancel();
    replies.push_back(call(io, *p, mc));
    REQUIRE_MESSAGE(replies.back().ok, replies.back().error_message);
  }
  json seen = inspect(io, srv, "anchor");
  for (const auto& r : seen) {
    std::size_t marks = 0;
    for (const auto& m : r["body"]["messages"])
      for (const auto& blk : m["content"]) marks += blk.contains("cache_control");
    CHECK(marks <= 3);  // with the system's: at most four
  }
  // After the first trim (request 2) the next request reads back all that request 2 wrote.
  CHECK(replies[3].usage.cache_read_input_tokens + 100 >= replies[2].usage.input_tokens);
  // The second trim changes the history from turn 2 on: the anchor left by the first trim (the last
  // message before it, marked from request 2 on) is read back: more than the system prompt.
  // (message 11, the last assistant message, with a breakpoint left: see the next test.)
  CHECK(replies[2].request["cache_breakpoints"] == json::array({"system", "message 1", "message 11", "message 12"}));
  CHECK(replies[4].request["cache_breakpoints"][1] == "message 1");
  CHECK(replies[4].usage.cache_read_input_tokens > replies[2].usage.cache_read_input_tokens);
}

TEST_CASE("anthropic: a child that stubs each result once seen: it is sent once, uncached, and not written") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = config(srv.scenario("loop:20:4:0", "seen"));
  cfg.thinking = false;
  auto p = supervisor::make_anthropic_provider(io, cfg, kKey);
  auto stub = [](json h, std::size_t upto) {
    for (std::size_t k = 0; k < upto; ++k) h[3 + 2 * k]["content"] = "[trimmed " + std::to_string(k) + "]";
    return h;
  };
  // A first trim (everything but the newest result), then, on every request, the result the previous
  // request ended with becomes a stub: the reference child's default trimming.
  std::vector<json> requests = {loop_history(4), stub(loop_history(5), 4)};
  for (std::size_t t = 6; t <= 9; ++t) requests.push_back(stub(loop_history(t), t - 1));
  std::vector<supervisor::ModelReply> replies;
  for (const auto& h : requests) {
    supervisor::ModelCall mc;
    mc.messages = h;
    mc.tools = kReadFile;
    mc.max_tokens = 4000;
    p->cancel();
    replies.push_back(call(io, *p, mc));
    REQUIRE_MESSAGE(replies.back().ok, replies.back().error_message);
  }
  json seen = inspect(io, srv, "seen");
  REQUIRE(seen.size() == requests.size());
  auto marked = [](const json& m) { return m["content"].back().contains("cache_control"); };
  // The first trim changed the history further back: its end is written, and its last assistant
  // message too (the breakpoint the next request reads back).
  const json& first = seen[1]["body"]["messages"];
  CHECK(marked(first.back()));
  CHECK(marked(first[first.size() - 2]));
  for (std::size_t r = 2; r < requests.size(); ++r) {
    CAPTURE(r);
    const json& msgs = seen[r]["body"]["messages"];
    std::size_t marks = 0;
    for (const auto& m : msgs)
      for (const auto& blk : m["content"]) marks += blk.contains("cache_control");
    CHECK(marks <= 3);                     // with the system's: at most four
    CHECK_FALSE(marked(msgs.back()));      // the new result: not written
    CHECK(marked(msgs[msgs.size() - 2]));  // the last assistant message: written
    const auto& u = replies[r].usage;
    const auto& before = replies[r - 1].usage;
    // Everything the previous request read or wrote is read back (after the first trim: all but the
    // result it wrote, now a stub); the new result (3,000 bytes, 750 tokens, in its user message) is
    // the only uncached input.
    if (r == 2)
      CHECK(u.cache_read_input_tokens + 800 >= before.cache_read_input_tokens + before.cache_write_input_tokens);
    else
      CHECK(u.cache_read_input_tokens + 2 >= before.cache_read_input_tokens + before.cache_write_input_tokens);
    const auto uncached = u.input_tokens - u.cache_read_input_tokens - u.cache_write_input_tokens;
    CHECK(uncached >= 750);
    CHECK(uncached < 800);
    CHECK(u.cache_write_input_tokens < 100);  // the stub and the new assistant message
  }
}

TEST_CASE("anthropic: a turn ended by max_tokens is reported as length, its cut tool call dropped") {
  FakeServer srv;
  boost::asio::io_context io;
  auto p = supervisor::make_anthropic_provider(io, config(srv.scenario("length-always", "len")), kKey);
  auto mc = user_call();
  mc.tools = kReadFile;
  auto r = call(io, *p, mc);
  REQUIRE_MESSAGE(r.ok, r.error_message);
  CHECK(r.finish_reason == "length");
  CHECK(r.content == "Searching.");
  CHECK(r.tool_calls.empty());
}

TEST_CASE("anthropic: stream errors name the provider and its host") {
  FakeServer srv;
  boost::asio::io_context io;
  for (std::string scenario : {"truncated", "stall"}) {
    CAPTURE(scenario);
    auto p = supervisor::make_anthropic_provider(io, config(srv.scenario(scenario, "w" + scenario)), kKey);
    auto r = call(io, *p, user_call());
    CHECK_FALSE(r.ok);
    CHECK(r.error_message.rfind("fake (http://127.0.0.1:", 0) == 0);
  }
}
