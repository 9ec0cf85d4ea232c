#include "protocol/messages.hpp"

#include <doctest/doctest.h>

#include "../protocol/plain_lines.hpp"

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

// decode_child_message reads plain tool_request / tool_done lines without a JSON tree; every line it
// reads must come out exactly as the tree decoder reads it, and every line it declines must still get
// the tree decoder's answer (the same error text included).
TEST_CASE("the plain-line shortcut decodes exactly as the tree decoder") {
  const std::string lines[] = {
      // the plain shape children write
      R"({"type":"tool_request","id":"t1","tool":"grep","args":{"pattern":"a","path":"src"}})",
      R"({"type":"tool_request","id":"t1","tool":"grep"})",
      R"({"type":"tool_request","id":"","tool":"","args":{}})",
      R"({"type":"tool_done","id":"t1","ok":true,"bytes":123})",
      R"({"type":"tool_done","id":"t1","ok":false,"bytes":0,"error":"boom"})",
      R"({"type":"tool_done","id":"t1","ok":true})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":9999999999999999999})",  // 19 digits
      R"(  { "type" : "tool_done" , "id":"t1" ,"ok" : true }  )",
      "{\"type\":\"tool_done\",\r\n\t\"id\":\"t1\",\"ok\":true}",
      // member order, nested args with brackets and escapes inside strings
      R"({"args":{"a":[1,{"b":"}]"}],"c":"\"{"},"tool":"x","id":"i","type":"tool_request"})",
      R"({"type":"tool_request","id":"t","tool":"x","args":{"s":"caf\u00e9 \ud83d\ude00"}})",
      // flat arguments of every plain kind, built without the JSON parser
      R"({"type":"tool_request","id":"t","tool":"x","args":{"n":0,"big":18446744073709551615,"t":true,"f":false,"z":null}})",
      R"({"type":"tool_request","id":"t","tool":"x","args":{"k":"v","k2":"v"}})",
      // arguments the shortcut hands to the JSON parser (the line is still read without a tree)
      R"({"type":"tool_request","id":"t","tool":"x","args":{"k":"a","k":"b"}})",           // repeated key
      R"({"type":"tool_request","id":"t","tool":"x","args":{"k":-1,"f":1.5,"e":1E2}})",    // other numbers
      R"({"type":"tool_request","id":"t","tool":"x","args":{"k":18446744073709551616}})",  // past 64 bits
      R"({"type":"tool_request","id":"t","tool":"x","args":{"k":"\u0041\n"}})",            // escapes
      R"({"type":"tool_request","id":"t","tool":"x","args":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}})",
      R"({"type":"tool_request","id":"t","tool":"x","args":{"k":[1,"2",{}],"o":{"p":null}}})",
      // what the shortcut must decline and the tree decides
      R"({"type":"tool_request","id":"t\n1","tool":"grep"})",               // escape in a string
      "{\"type\":\"tool_request\",\"id\":\"caf\xC3\xA9\",\"tool\":\"g\"}",  // non-ASCII
      R"({"type":"tool_request","id":"a","id":"b","tool":"g"})",            // repeated key
      R"({"type":"tool_request","id":"t","tool":"g","extra":1})",           // unknown member
      R"({"type":"tool_request","id":"t","tool":"g","args":null})",         // null
      R"({"type":"tool_request","id":"t","tool":"g","args":[]})",           // args not an object
      R"({"type":"tool_request","id":"t","tool":"g","args":{"k":01}})",     // args not JSON: a leading zero
      R"({"type":"tool_request","id":"t","tool":"g","args":{"k":nul}})",
      R"({"type":"tool_request","id":"t","tool":"g","args":{"a":}})",  // args not JSON
      R"({"type":"tool_request","id":"t","tool":"g","args":{"a":1]})",
      R"({"type":"tool_request","id":7,"tool":"g"})",
      R"({"type":"tool_request","tool":"g"})",
      R"({"type":"tool_done","id":"t","ok":"yes"})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":-1})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":1.5})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":1e3})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":007})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":18446744073709551615})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":18446744073709551616})",
      R"({"type":"tool_done","id":"t","ok":true,"bytes":null,"error":null})",
      R"({"type":"tool_done","id":"t","ok":truex})",
      R"({"type":"tool_done","id":"t","ok":true} x)",
      R"({"type":"tool_done","id":"t","ok":true},)",
      R"({"type":"tool_done","id":"t","ok":true)",
      R"({"type":"tool_done","id":"t","ok":true,})",
      "\xEF\xBB\xBF{\"type\":\"tool_done\",\"id\":\"t\",\"ok\":true}",  // byte-order mark
      R"({"type":"log","message":"m"})",
      R"({"type":"tool_requests","id":"t","tool":"g"})",
      R"({})",
      R"({"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"type":"tool_done"})",
  };
  // The first nineteen are the plain shape: the shortcut reads them (else this test would compare the
  // tree with itself); the rest it must leave to the tree.
  for (std::size_t i = 0; i < std::size(lines); ++i) {
    CAPTURE(lines[i]);
    CHECK(detail::decode_plain_child_line(lines[i]).has_value() == (i < 19));
  }
  for (const auto& line : lines) {
    CAPTURE(line);
    const auto fast = decode_child_message(line);
    const auto tree = decode_child_message_via_tree(line);
    REQUIRE(bool(fast) == bool(tree));
    CHECK(fast.error == tree.error);
    if (fast) {
      CHECK(fast.message->index() == tree.message->index());
      CHECK(to_json(*fast.message) == to_json(*tree.message));
    }
  }
  // Arguments nested past kMaxDepth: the depth bound refuses the line before either decoder parses.
  const std::string deep = R"({"type":"tool_request","id":"t","tool":"g","args":{"a":)" + std::string(kMaxDepth, '[') +
                           "1" + std::string(kMaxDepth, ']') + "}}";
  CHECK(decode_child_message(deep).error == decode_child_message_via_tree(deep).error);
  CHECK(decode_child_message(deep).error.find("nested deeper") != std::string::npos);
}

// encode_line writes a tool_decision without a tree; the bytes must be the tree encoder's.
TEST_CASE("a tool_decision is encoded byte for byte as the tree encoder writes it") {
  std::string every_byte;
  for (int c = 1; c < 0x80; ++c) every_byte.push_back(static_cast<char>(c));
  every_byte.push_back('\0');
  const std::string strings[] = {
      "",
      "t1",
      "quote \" backslash \\ slash /",
      every_byte,
      "caf\xC3\xA9 \xF0\x9F\x98\x80 \xE2\x80\xA8",  // multi-byte UTF-8 and U+2028 pass through
      "bad \xC3\x28 byte",                          // invalid UTF-8: the tree's replacement
      "\xFF",
      "truncated \xE2\x82",
  };
  for (const auto& id : strings)
    for (const auto& reason : strings)
      for (bool allow : {true, false}) {
        const SupervisorMessage m{ToolDecision{id, allow, reason}};
        CAPTURE(id);
        CAPTURE(reason);
        CHECK(encode_line(m) == encode_line(to_json(m)));
      }
}
