// The pure parts of the MCP front end: JSON-RPC classification, version negotiation, tool
// definitions from the real policy files, and tool arguments. The server itself is driven by the
// official SDK in tests/mcp/*.test.mjs.
#include <doctest/doctest.h>

#include "frontends/control.hpp"
#include "policy/decide.hpp"
#include "frontends/mcp.hpp"
#include "test_util.hpp"

using nlohmann::json;
namespace mcp = supervisor::mcp;

namespace {

template <class T>
T as(const mcp::Message& m) {  // by value: the message is usually a temporary
  REQUIRE(std::holds_alternative<T>(m));
  return std::get<T>(m);
}

std::string refusal(const json& args) {
  try {
    mcp::parse_spawn_arguments(args);
  } catch (const supervisor::BadRequest& e) {
    return e.what();
  }
  return "";
}

std::vector<supervisor::Preset> all_presets() {
  std::vector<supervisor::Preset> out;
  for (const auto& n : supervisor::list_presets(test::policy_dir()))
    out.push_back(supervisor::load_preset(n, test::policy_dir()));
  return out;
}

}  // namespace

TEST_CASE("mcp: requests, notifications and responses are told apart") {
  auto r = as<mcp::Request>(mcp::decode_line(R"({"jsonrpc":"2.0","id":7,"method":"tools/list"})"));
  CHECK(r.id == 7);
  CHECK(r.method == "tools/list");
  CHECK(r.params.is_null());
  CHECK(as<mcp::Request>(mcp::decode_line(R"({"jsonrpc":"2.0","id":"a","method":"x","params":{}})")).id == "a");

  auto n = as<mcp::Notification>(
      mcp::decode_line(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}})"));
  CHECK(n.method == "notifications/cancelled");
  CHECK(n.params["requestId"] == 3);

  auto ok = as<mcp::Response>(mcp::decode_line(R"({"jsonrpc":"2.0","id":"approval-1","result":{"action":"accept"}})"));
  CHECK(ok.id == "approval-1");
  CHECK(ok.error.is_null());
  auto err = as<mcp::Response>(mcp::decode_line(R"({"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"no"}})"));
  CHECK(err.error["message"] == "no");
}

TEST_CASE("mcp: what is not JSON-RPC is named, with the id when one can be read") {
  struct Case {
    const char* line;
    int code;
    const char* names;
    json id;
  };
  const Case cases[] = {
      {"not json", mcp::kParseError, "not valid JSON", nullptr},
      {R"({"jsonrpc":"2.0","id":1)", mcp::kParseError, "not valid JSON", nullptr},
      {R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", mcp::kInvalidRequest, "batches", nullptr},
      {R"("just a string")", mcp::kInvalidRequest, "JSON object", nullptr},
      {R"({"id":1,"method":"ping"})", mcp::kInvalidRequest, "jsonrpc", 1},
      {R"({"jsonrpc":"1.0","id":"x","method":"ping"})", mcp::kInvalidRequest, "jsonrpc", "x"},
      {R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})", mcp::kInvalidRequest, "id: must be", nullptr},
      {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", mcp::kInvalidRequest, "id: must be", nullptr},
      {R"({"jsonrpc":"2.0","id":{},"method":"ping"})", mcp::kInvalidRequest, "id: must be", nullptr},
      {R"({"jsonrpc":"2.0","id":1,"method":5})", mcp::kInvalidRequest, "method: must be a string", 1},
      {R"({"jsonrpc":"2.0","id":1,"method":"x","params":[1]})", mcp::kInvalidRequest, "params", 1},
      {R"({"jsonrpc":"2.0","result":{}})", mcp::kInvalidRequest, "method: missing", nullptr},
      {R"({"jsonrpc":"2.0","id":1})", mcp::kInvalidRequest, "exactly one of result and error", nullptr},
      {R"({"jsonrpc":"2.0","id":1,"result":{},"error":{}})", mcp::kInvalidRequest, "exactly one", nullptr},
      {R"({"jsonrpc":"2.0","id":1,"error":"bad"})", mcp::kInvalidRequest, "error: must be an object", nullptr},
  };
  for (const auto& c : cases) {
    CAPTURE(c.line);
    auto inv = as<mcp::Invalid>(mcp::decode_line(c.line));
    CHECK(inv.code == c.code);
    CHECK(inv.message.find(c.names) != std::string::npos);
    CHECK(inv.id == c.id);
  }
}

TEST_CASE("mcp: version negotiation echoes a revision it speaks, else offers the newest") {
  CHECK(mcp::negotiate_version("2025-11-25") == "2025-11-25");
  CHECK(mcp::negotiate_version("2025-06-18") == "2025-06-18");
  CHECK(mcp::negotiate_version("2024-11-05") == "2024-11-05");
  CHECK(mcp::negotiate_version("2031-01-01") == "2025-11-25");
  CHECK(mcp::negotiate_version(json(42)) == "2025-11-25");
}

TEST_CASE("mcp: tool definitions come from the policy files") {
  const auto presets = all_presets();
  REQUIRE(presets.size() >= 5);
  json tools = mcp::tool_definitions(presets);
  std::vector<std::string> names;
  for (const auto& t : tools) names.push_back(t["name"]);
  CHECK(names == std::vector<std::string>{"agent_spawn", "agent_list", "agent_output", "agent_cancel", "agent_apply"});
  const json& spawn = tools[0];
  const std::string desc = spawn["description"];
  for (const auto& p : presets) {
    CAPTURE(p.name);
    CHECK(desc.find("- " + p.name + ": " + p.description) != std::string::npos);
    for (const auto& tool : supervisor::offered_tools(p)) CHECK(desc.find(tool) != std::string::npos);
  }
  CHECK(spawn["inputSchema"]["properties"]["preset"]["enum"].size() == presets.size());
  CHECK(desc.find("the web only through the supervisor's checked web tools") != std::string::npos);  // research

  // Offering fewer presets offers fewer: the enum and the description follow.
  json narrow = mcp::tool_definitions({presets[0]});
  CHECK(narrow[0]["inputSchema"]["properties"]["preset"]["enum"] == json::array({presets[0].name}));
  CHECK(narrow[0]["description"].get<std::string>().find("- " + presets[1].name + ":") == std::string::npos);

  for (const auto& t : tools) {
    CAPTURE(t["name"]);
    CHECK(t["inputSchema"]["type"] == "object");
    CHECK(t["outputSchema"]["type"] == "object");
    CHECK(t["annotations"]["readOnlyHint"].is_boolean());
  }
  // What lets hosts run these without approval: list/output read only, cancel not destructive.
  CHECK(tools[1]["annotations"]["readOnlyHint"] == true);
  CHECK(tools[2]["annotations"]["readOnlyHint"] == true);
  CHECK(tools[3]["name"] == "agent_cancel");
  CHECK(tools[3]["annotations"]["destructiveHint"] == false);
  const json& timeout = spawn["inputSchema"]["properties"]["limits"]["properties"]["timeout"];
  CHECK_FALSE(timeout.contains("type"));
  CHECK(timeout["anyOf"] == json::parse(R"([{"type":"integer","minimum":1},{"type":"string"}])"));
  CHECK(tools[0]["outputSchema"].dump().find("[\"string\",\"null\"]") == std::string::npos);
}

TEST_CASE("mcp: agent_spawn arguments are checked field by field") {
  // Parsed, as on the wire: a non-negative number is an unsigned JSON number then.
  auto a = mcp::parse_spawn_arguments(json::parse(
      R"({"preset":"explore","brief":"find it","description":"find","limits":{"max_steps":5,"timeout":"90s"},"background":true})"));
  CHECK(a.request.preset == "explore");
  CHECK(a.request.brief == "find it");
  CHECK(a.background);
  CHECK(a.request.limits.max_steps == 5u);
  CHECK(a.request.limits.timeout_ms == 90000u);
  CHECK_FALSE(mcp::parse_spawn_arguments({{"preset", "explore"}, {"brief", "b"}, {"description", "d"}}).background);

  CHECK(refusal(json::array()) == "arguments: must be an object");
  CHECK(refusal({{"brief", "b"}, {"description", "d"}}) == "preset: missing");
  CHECK(refusal({{"preset", "explore"}, {"description", "d"}}) == "brief: missing");
  CHECK(refusal({{"preset", "explore"}, {"brief", ""}, {"description", "d"}}) == "brief: must not be empty");
  CHECK(refusal({{"preset", "explore"}, {"brief", "b"}}).find("description: missing") == 0);
  CHECK(refusal({{"preset", "explore"}, {"brief", "b"}, {"description", "d"}, {"type", "spawn"}}) ==
        "type: unknown field");
  CHECK(refusal({{"preset", "explore"}, {"brief", "b"}, {"description", "d"}, {"background", "yes"}}) ==
        "background: must be true or false");
  CHECK(refusal({{"preset", "explore"}, {"brief", "b"}, {"description", "d"}, {"limits", {{"max_steps", -1}}}}) ==
        "limits.max_steps: must be a non-negative integer");
  CHECK(refusal({{"preset", 3}, {"brief", "b"}, {"description", "d"}}) == "preset: must be a string");
}

TEST_CASE("mcp: child ids, waits and empty argument lists") {
  CHECK(mcp::parse_child_id({{"child_id", "abc"}}) == "abc");
  CHECK(mcp::parse_child_id({{"child_id", "abc"}, {"reason", "r"}}, {"reason"}) == "abc");
  CHECK_THROWS_WITH_AS(mcp::parse_child_id({{"child_id", "abc"}, {"reason", "r"}}), "reason: unknown field",
                       supervisor::BadRequest);
  CHECK_THROWS_WITH_AS(mcp::parse_child_id(json::object()), "child_id: missing or not a string",
                       supervisor::BadRequest);
  CHECK_THROWS_WITH_AS(mcp::parse_child_id({{"child_id", ""}}), "child_id: missing or not a string",
                       supervisor::BadRequest);
  CHECK(mcp::parse_wait_seconds(json::object()) == 0);
  CHECK(mcp::parse_wait_seconds({{"wait_seconds", 600}}) == 600);
  CHECK_THROWS_AS(mcp::parse_wait_seconds({{"wait_seconds", 601}}), supervisor::BadRequest);
  CHECK_THROWS_AS(mcp::parse_wait_seconds({{"wait_seconds", -1}}), supervisor::BadRequest);
  CHECK_THROWS_AS(mcp::parse_wait_seconds({{"wait_seconds", "10"}}), supervisor::BadRequest);
  CHECK_NOTHROW(mcp::parse_no_arguments(json::object()));
  CHECK_THROWS_WITH_AS(mcp::parse_no_arguments({{"all", true}}), "all: unknown field (this tool takes no arguments)",
                       supervisor::BadRequest);
}

TEST_CASE("mcp: host-added fields are dropped before the check; other unknown fields are still refused") {
  CHECK(mcp::host_added_fields() == std::vector<std::string>{"wait_for_previous"});
  json spawn = {{"preset", "explore"}, {"brief", "b"}, {"description", "d"}, {"wait_for_previous", true}};
  CHECK_THROWS_WITH_AS(mcp::parse_spawn_arguments(spawn), "wait_for_previous: unknown field", supervisor::BadRequest);
  CHECK_NOTHROW(mcp::parse_spawn_arguments(mcp::without_host_fields(spawn)));
  CHECK_NOTHROW(mcp::parse_no_arguments(mcp::without_host_fields({{"wait_for_previous", false}})));
  CHECK(mcp::parse_child_id(mcp::without_host_fields({{"child_id", "abc"}, {"wait_for_previous", true}})) == "abc");
  // The wrong type is no host's field: refused by name. A typo too.
  CHECK_THROWS_WITH_AS(mcp::parse_no_arguments(mcp::without_host_fields({{"wait_for_previous", "yes"}})),
                       "wait_for_previous: unknown field (this tool takes no arguments)", supervisor::BadRequest);
  CHECK_THROWS_WITH_AS(mcp::parse_no_arguments(mcp::without_host_fields({{"wait_for_previus", true}})),
                       "wait_for_previus: unknown field (this tool takes no arguments)", supervisor::BadRequest);
}

TEST_CASE("mcp: results carry the value as text and as structured content") {
  protocol::Envelope e;
  e.id = "c1";
  e.preset = "explore";
  e.status = protocol::Status::completed;
  e.reason = "done";
  json r = mcp::envelope_result(e);
  CHECK(r["isError"] == false);
  CHECK(r["structuredContent"]["id"] == "c1");
  CHECK(json::parse(r["content"][0]["text"].get<std::string>()) == r["structuredContent"]);
  e.status = protocol::Status::budget_exhausted;  // still an answer the model can use
  CHECK(mcp::envelope_result(e)["isError"] == false);
  e.status = protocol::Status::failed;
  CHECK(mcp::envelope_result(e)["isError"] == true);
  e.status = protocol::Status::protocol_error;
  CHECK(mcp::envelope_result(e)["isError"] == true);
  json bad = mcp::tool_error("brief: missing");
  CHECK(bad["isError"] == true);
  CHECK_FALSE(bad.contains("structuredContent"));
}
