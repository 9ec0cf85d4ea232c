#include "protocol/messages.hpp"

#include <doctest/doctest.h>

using namespace protocol;

TEST_CASE("child messages round-trip through the codec") {
  ChildMessage msgs[] = {
      Hello{{1, 2}, "x/1"},
      ModelRequest{"m1", json::array({{{"role", "user"}, {"content", "hi"}}}), json::array(), 100},
      ToolRequest{"t1", "grep", {{"pattern", "a"}}},
      ToolDone{"t1", false, 12, "boom"},
      Final{"s", "a", {{"k", 1}}},
      Log{"info", "hello"},
  };
  for (const auto& m : msgs) {
    std::string line = encode_line(m);
    REQUIRE(line.back() == '\n');
    auto d = decode_child_message(line.substr(0, line.size() - 1));
    REQUIRE_MESSAGE(d, d.error);
    CHECK(d.message->index() == m.index());
    CHECK(to_json(*d.message) == to_json(m));
  }
}

TEST_CASE("supervisor messages round-trip through the codec") {
  Welcome w;
  w.child_id = "abc";
  w.task.brief = "b";
  w.task.preset = "explore";
  w.task.workspace = "/w";
  w.task.limits.max_steps = 3;
  w.task.limits.max_thinking_tokens = 5000;
  w.task.limits.wrap_up_grace_ms = 10000;
  {  // welcome carries every limit the child needs, the wrap-up grace and thinking budget included
    json j = to_json(SupervisorMessage{w});
    CHECK(j["task"]["limits"]["wrap_up_grace_ms"] == 10000);
    CHECK(j["task"]["limits"]["max_thinking_tokens"] == 5000);
  }
  SupervisorMessage msgs[] = {
      w,
      ModelResponse{"m1", "text", {ToolCall{"c1", "grep", {{"pattern", "x"}}}}, Usage{1, 2, 3}, "tool_calls"},
      ModelError{"m1", "provider_error", "down"},
      ToolDecision{"t1", true, "allowed"},
      ToolResult{"t2", true, "page"},
      WrapUp{"budget_exhausted", "steps"},
      Cancel{"parent"},
      Error{"protocol_error", "bad"},
  };
  for (const auto& m : msgs) {
    std::string line = encode_line(m);
    auto d = decode_supervisor_message(line.substr(0, line.size() - 1));
    REQUIRE_MESSAGE(d, d.error);
    CHECK(d.message->index() == m.index());
    CHECK(to_json(*d.message) == to_json(m));
    CHECK(std::string(type_name(*d.message)) == to_json(m)["type"].get<std::string>());
  }
}

TEST_CASE("decode errors name what was wrong") {
  auto err = [](std::string_view line) { return decode_child_message(line).error; };
  CHECK(err("not json") == "not valid JSON");
  CHECK(err("[1,2]") == "a message must be a JSON object");
  CHECK(err("{}") == "field 'type' is missing or not a string");
  CHECK(err(R"({"type":"teleport"})") == "unknown message type 'teleport'");
  CHECK(err(R"({"type":"hello"})") == "hello: field 'versions' is missing");
  CHECK(err(R"({"type":"hello","versions":["one"]})") == "hello: field 'versions' must hold integers");
  CHECK(err(R"({"type":"tool_request","id":"t1"})") == "tool_request: field 'tool' is missing");
  CHECK(err(R"({"type":"tool_request","id":7,"tool":"x"})") == "tool_request: field 'id' must be a string");
  CHECK(err(R"({"type":"model_request","id":"m","messages":{}})") ==
        "model_request: field 'messages' must be an array");
  CHECK(err(R"({"type":"model_request","id":"m","messages":[],"max_tokens":-1})") ==
        "model_request: field 'max_tokens' must be a non-negative integer");
  CHECK(err(R"({"type":"final","summary":"s"})") == "final: field 'answer' is missing");
  CHECK(err(R"({"type":"tool_done","id":"t","ok":"yes"})") == "tool_done: field 'ok' must be true or false");
  // Closed vocabularies: log levels and message roles.
  CHECK(err(R"({"type":"log","message":"m","level":"loud"})") ==
        "log: field 'level' must be one of debug, info, warn, error (got 'loud')");
  CHECK(err(R"({"type":"log","message":"m","level":"warn"})").empty());
  CHECK(err(R"({"type":"log","message":"m"})").empty());
  CHECK(err(R"({"type":"model_request","id":"m","messages":[{"role":"user","content":"a"},{"role":"User"}]})") ==
        "model_request: field 'messages[1].role' must be one of system, user, assistant, tool (got 'User')");
  CHECK(err(R"({"type":"model_request","id":"m","messages":[{"content":"a"}]})") ==
        "model_request: field 'messages[0].role' is missing or not a string");
  CHECK(err(R"({"type":"model_request","id":"m","messages":["hi"]})") ==
        "model_request: field 'messages[0]' must be an object {role, content}");
}

TEST_CASE("unknown fields are ignored, so minor versions can add them") {
  auto d = decode_child_message(R"({"type":"log","message":"m","extra":{"x":1}})");
  REQUIRE(d);
  CHECK(std::get<Log>(*d.message).message == "m");
}

TEST_CASE("supervisor-side decode errors: bad decision and malformed tool calls") {
  CHECK(decode_supervisor_message(R"({"type":"tool_decision","id":"t","decision":"maybe"})").error ==
        "tool_decision: field 'decision' must be \"allow\" or \"deny\"");
  CHECK(decode_supervisor_message(R"({"type":"model_response","id":"m","tool_calls":[{"id":"c"}]})")
            .error.find("tool_calls[0]") != std::string::npos);
  CHECK(decode_supervisor_message(R"({"type":"model_response","id":"m","usage":{"input_tokens":"x"}})").error ==
        "model_response: field 'usage.input_tokens' must be a non-negative integer");
}

TEST_CASE("version negotiation picks the highest common version") {
  CHECK(negotiate_version({1}) == 1);
  CHECK(negotiate_version({3, 1, 2}) == 1);
  CHECK_FALSE(negotiate_version({2, 3}).has_value());
  CHECK_FALSE(negotiate_version({}).has_value());
}

TEST_CASE("encoding replaces invalid UTF-8 rather than throwing") {
  std::string line = encode_line(ChildMessage{Log{"info", "bad \xC3\x28 byte"}});
  CHECK(line.find("bad") != std::string::npos);
  CHECK(decode_child_message(line.substr(0, line.size() - 1)));
}
