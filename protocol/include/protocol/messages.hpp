// The supervisor <-> child protocol, version 1: one JSON object per line. Specified in
// protocol/README.md; this header is the single implementation both sides use.
//
// Decoding never throws: a line that is not a JSON object, lacks a field, has a field of the wrong
// type, or names an unknown type yields a DecodeError whose text names the offending field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace protocol {

using json = nlohmann::json;

inline constexpr int kVersion = 1;
inline constexpr int kMinVersion = 1;

// Token counts of one model call or of a whole child. `input_tokens` is every input token, cached or
// not; `cache_read_input_tokens` and `cache_write_input_tokens` are the parts of it the provider read
// from or wrote to its prompt cache. `reasoning_tokens` is the part of `output_tokens` spent thinking.
struct Usage {
  std::uint64_t input_tokens = 0;
  std::uint64_t output_tokens = 0;
  std::uint64_t reasoning_tokens = 0;
  std::uint64_t cache_read_input_tokens = 0;
  std::uint64_t cache_write_input_tokens = 0;
  std::uint64_t total() const noexcept { return input_tokens + output_tokens; }
  Usage& operator+=(const Usage& o) noexcept {
    input_tokens += o.input_tokens;
    output_tokens += o.output_tokens;
    reasoning_tokens += o.reasoning_tokens;
    cache_read_input_tokens += o.cache_read_input_tokens;
    cache_write_input_tokens += o.cache_write_input_tokens;
    return *this;
  }
};

// ---- child -> supervisor -------------------------------------------------------------------------

struct Hello {                // first message the child sends
  std::vector<int> versions;  // protocol versions the child speaks
  std::string agent;          // free text, e.g. "subagent-child/0.1.0"
};

struct ModelRequest {  // "run one model turn for me"
  std::string id;
  json messages = json::array();  // neutral chat messages (see README)
  json tools = json::array();     // tool specs offered to the model: {name, description, input_schema}
  std::optional<std::uint64_t> max_tokens;
};

struct ToolRequest {  // "may I run this tool?" (or, for brokered tools, "run it for me")
  std::string id;
  std::string tool;
  json args = json::object();
};

struct ToolDone {  // after a local tool ran: outcome and size of what went to the model
  std::string id;
  bool ok = true;
  std::uint64_t bytes = 0;
  std::string error;
};

struct Final {  // the child's result; the last message it sends
  std::string summary;
  std::string answer;
  json report = json::object();  // structured form of the answer (findings, evidence, ...)
};

struct Log {
  std::string level;  // debug | info | warn | error
  std::string message;
};

using ChildMessage = std::variant<Hello, ModelRequest, ToolRequest, ToolDone, Final, Log>;

// ---- supervisor -> child -------------------------------------------------------------------------

struct Limits {
  std::uint64_t max_steps = 0;
  std::uint64_t max_tool_calls = 0;
  std::uint64_t max_tokens = 0;
  std::uint64_t timeout_ms = 0;
  std::uint64_t summary_bytes = 0;
  std::uint64_t answer_bytes = 0;
  std::uint64_t tool_result_bytes = 0;    // cap on any one tool result the child sends to the model
  std::uint64_t max_thinking_tokens = 0;  // reasoning tokens over the whole run (0: no separate cap)
  std::uint64_t wrap_up_grace_ms = 0;     // after wrap_up: time to send final before the tree is killed
};

struct Task {
  std::string brief;
  std::string description;
  std::string preset;
  std::string workspace;
  json tools = json::array();  // specs of the tools this child may use
  Limits limits;
};

struct Welcome {
  int version = kVersion;
  std::string child_id;
  Task task;
};

struct ToolCall {
  std::string id;
  std::string name;
  json arguments = json::object();
};

struct ModelResponse {
  std::string id;
  std::string content;
  std::vector<ToolCall> tool_calls;
  Usage usage;
  std::string finish_reason;  // stop | tool_calls | length | budget | other text from the provider
};

struct ModelError {
  std::string id;
  std::string code;  // budget_exhausted | provider_error | wrap_up | bad_request
  std::string message;
};

struct ToolDecision {
  std::string id;
  bool allow = false;
  std::string reason;
};

struct ToolResult {  // result of a brokered tool the supervisor ran on the child's behalf
  std::string id;
  bool ok = false;
  std::string content;
};

struct WrapUp {
  std::string reason;  // budget_exhausted | timeout
  std::string budget;  // steps | tool_calls | tokens | time (empty when not a budget)
};

struct Cancel {
  std::string reason;
};

struct Error {
  std::string code;
  std::string message;
};

using SupervisorMessage =
    std::variant<Welcome, ModelResponse, ModelError, ToolDecision, ToolResult, WrapUp, Cancel, Error>;

// ---- codec ---------------------------------------------------------------------------------------

template <class T>
struct Decoded {
  std::optional<T> message;
  std::string error;  // set when !message: names what was wrong
  explicit operator bool() const noexcept { return message.has_value(); }
};

// Deepest nesting of arrays and objects a line may have. nlohmann::json copies, compares and prints
// values recursively, so one line of a megabyte of '[' would overflow the stack of whoever copies it;
// the decoders (and every other reader of untrusted JSON) refuse such lines before parsing them.
inline constexpr std::size_t kMaxDepth = 128;

// True when the arrays and objects in `text` (any bytes; brackets inside JSON strings do not count)
// nest at most `max_depth` deep. Linear, no allocation.
bool nesting_within(std::string_view text, std::size_t max_depth = kMaxDepth) noexcept;

Decoded<ChildMessage> decode_child_message(std::string_view line);
Decoded<SupervisorMessage> decode_supervisor_message(std::string_view line);

// The general decoder of child lines, through a JSON tree. decode_child_message gives the same
// result for every line; it reads the tool_request and tool_done lines of the plain shape children
// write (one per tool call, the broker's hot path) without building a tree. Tests compare the two.
Decoded<ChildMessage> decode_child_message_via_tree(std::string_view line);

json to_json(const ChildMessage& m);
json to_json(const SupervisorMessage& m);
json to_json(const Usage& u);
json to_json(const Limits& l);

// One line of the wire: compact JSON + '\n'. Invalid UTF-8 in strings is replaced, never thrown on.
std::string encode_line(const json& j);
inline std::string encode_line(const ChildMessage& m) { return encode_line(to_json(m)); }
// The same bytes as encode_line(to_json(m)); a tool_decision is written without a tree.
std::string encode_line(const SupervisorMessage& m);

// Chooses the protocol version: the highest of `offered` that this build speaks, or nullopt.
std::optional<int> negotiate_version(const std::vector<int>& offered) noexcept;

const char* type_name(const ChildMessage& m) noexcept;
const char* type_name(const SupervisorMessage& m) noexcept;

}  // namespace protocol
