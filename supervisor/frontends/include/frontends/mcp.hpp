// The Model Context Protocol front end (`subagent-supervisor mcp`): JSON-RPC 2.0 messages, one per
// line on stdin/stdout, as the MCP stdio transport specifies. This header holds the pure parts
// (message classification, version negotiation, tool definitions, tool arguments) so they can be
// tested and fuzzed without a server; mcp_server.cpp holds the server.
//
// Errors: the argument parsers throw BadRequest naming the field (the server turns it into a JSON-RPC
// or tool error); classify() never throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/envelope.hpp"
#include "scheduling/hub.hpp"
#include "policy/preset.hpp"

namespace supervisor::mcp {

// Protocol revisions this server speaks, newest first. A client asking for another one gets the
// newest, as the lifecycle section of the specification says.
inline constexpr const char* kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2024-11-05"};
std::string negotiate_version(const nlohmann::json& requested);

// JSON-RPC 2.0 error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

struct Request {
  nlohmann::json id;  // a string or an integer
  std::string method;
  nlohmann::json params;  // an object, or null when absent
};
struct Notification {
  std::string method;
  nlohmann::json params;
};
struct Response {  // the client's answer to a request of ours (elicitation)
  nlohmann::json id;
  nlohmann::json result;  // null when `error` is set
  nlohmann::json error;   // null on success
};
// Not a valid JSON-RPC message: answered with `code` and `message` (id null when none was readable).
struct Invalid {
  nlohmann::json id;
  int code = kInvalidRequest;
  std::string message;
};
using Message = std::variant<Request, Notification, Response, Invalid>;

// Classifies one parsed JSON value. Never throws.
Message classify(const nlohmann::json& j);
// Parses one line and classifies it; a line that is not JSON is Invalid with kParseError.
Message decode_line(std::string_view line);

nlohmann::json result_message(const nlohmann::json& id, nlohmann::json result);
nlohmann::json error_message(const nlohmann::json& id, int code, const std::string& message);
nlohmann::json notification_message(const std::string& method, nlohmann::json params);
nlohmann::json request_message(const nlohmann::json& id, const std::string& method, nlohmann::json params);

// --- tools -------------------------------------------------------------------------------------

// tools/list's `tools`: agent_spawn, agent_list, agent_output, agent_cancel, agent_apply, each with
// an input schema, an output schema and annotations. The spawn tool's description lists `presets`.
nlohmann::json tool_definitions(const std::vector<Preset>& presets);

// The longest agent_output wait a client may ask for, in seconds.
inline constexpr std::uint64_t kMaxWaitSeconds = 600;

struct SpawnArguments {
  SpawnRequest request;
  bool background = false;
};
// Fields MCP hosts add to every tool call's arguments whatever the tool's input schema says (Gemini
// CLI adds "wait_for_previous", a boolean about its own scheduling). Such a field is removed before
// the arguments are checked, when it has the type the host uses; every other unknown field, and a
// host field of the wrong type, is still refused by name.
nlohmann::json without_host_fields(nlohmann::json args);
// The names without_host_fields() removes, for the documentation and tests.
std::vector<std::string> host_added_fields();

// agent_spawn's arguments; throws BadRequest naming the field.
SpawnArguments parse_spawn_arguments(const nlohmann::json& args);
// {"child_id": "..."} plus the fields in `also`; throws BadRequest naming the field.
std::string parse_child_id(const nlohmann::json& args, std::initializer_list<const char*> also = {});
// Tools without arguments: `args` must be an empty object.
void parse_no_arguments(const nlohmann::json& args);
// agent_output's optional wait, in seconds (0 when absent).
std::uint64_t parse_wait_seconds(const nlohmann::json& args);

// A tool result: the value as text (for models) plus the same value as structured content.
nlohmann::json tool_result(const nlohmann::json& value);
// A tool-level error the model can read and correct (isError).
nlohmann::json tool_error(const std::string& message);
// A finished child: its envelope. isError only when there is no usable answer (failed, protocol_error).
nlohmann::json envelope_result(const protocol::Envelope& e);

}  // namespace supervisor::mcp
