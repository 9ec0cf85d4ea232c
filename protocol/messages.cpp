#include "protocol/messages.hpp"

#include <algorithm>

#include "plain_lines.hpp"

namespace protocol {
namespace {

// Reads typed fields out of one message object and remembers the first thing that was wrong.
// Strings, arrays and objects are moved out of the object (each field is read once), which is
// discarded after: a tool request's arguments are not copied on their way to the session.
class Fields {
 public:
  Fields(json& obj, std::string_view type) : obj_(obj), type_(type) {}

  std::string str(const char* name, bool required = true) {
    json* v = find(name, required);
    if (!v) return {};
    if (!v->is_string()) return fail(name, "must be a string"), std::string{};
    return std::move(v->get_ref<std::string&>());
  }
  std::uint64_t u64(const char* name, bool required = true) {
    json* v = find(name, required);
    if (!v) return 0;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0))
      return fail(name, "must be a non-negative integer"), 0;
    return v->get<std::uint64_t>();
  }
  std::optional<std::uint64_t> opt_u64(const char* name) {
    if (!obj_.contains(name) || obj_[name].is_null()) return std::nullopt;
    return u64(name);
  }
  bool boolean(const char* name, bool required = true, bool fallback = false) {
    json* v = find(name, required);
    if (!v) return fallback;
    if (!v->is_boolean()) return fail(name, "must be true or false"), fallback;
    return v->get<bool>();
  }
  json array(const char* name, bool required = true) {
    json* v = find(name, required);
    if (!v) return json::array();
    if (!v->is_array()) return fail(name, "must be an array"), json::array();
    return std::move(*v);
  }
  json object(const char* name, bool required = true) {
    json* v = find(name, required);
    if (!v) return json::object();
    if (!v->is_object()) return fail(name, "must be an object"), json::object();
    return std::move(*v);
  }
  Usage usage(const char* name) {
    json u = object(name, false);
    Fields f(u, type_);
    f.prefix_ = std::string(name) + ".";
    Usage out;
    out.input_tokens = f.u64("input_tokens", false);
    out.output_tokens = f.u64("output_tokens", false);
    out.reasoning_tokens = f.u64("reasoning_tokens", false);
    out.cache_read_input_tokens = f.u64("cache_read_input_tokens", false);
    out.cache_write_input_tokens = f.u64("cache_write_input_tokens", false);
    if (!f.error_.empty() && error_.empty()) error_ = f.error_;
    return out;
  }

  void fail(std::string_view field, std::string_view what) {
    if (error_.empty())
      error_ = std::string(type_) + ": field '" + prefix_ + std::string(field) + "' " + std::string(what);
  }
  const std::string& error() const { return error_; }

 private:
  json* find(const char* name, bool required) {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) {
      if (required) fail(name, "is missing");
      return nullptr;
    }
    return &*it;
  }

  json& obj_;
  std::string_view type_;
  std::string prefix_;
  std::string error_;
};

// `depth_checked`: the caller ran nesting_within on `line` already (it is a scan of the whole line).
template <class T>
Decoded<T> parse_object(std::string_view line, json& obj, std::string& type, bool depth_checked = false) {
  Decoded<T> out;
  if (!depth_checked && !nesting_within(line)) {
    out.error = "arrays and objects nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return out;
  }
  obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) {
    out.error = "not valid JSON";
    return out;
  }
  if (!obj.is_object()) {
    out.error = "a message must be a JSON object";
    return out;
  }
  auto t = obj.find("type");
  if (t == obj.end() || !t->is_string()) {
    out.error = "field 'type' is missing or not a string";
    return out;
  }
  type = t->get<std::string>();
  return out;
}

Limits limits_from(json j, Fields& outer) {
  Fields f(j, "limits");
  Limits l;
  l.max_steps = f.u64("max_steps");
  l.max_tool_calls = f.u64("max_tool_calls");
  l.max_tokens = f.u64("max_tokens");
  l.timeout_ms = f.u64("timeout_ms");
  l.summary_bytes = f.u64("summary_bytes");
  l.answer_bytes = f.u64("answer_bytes");
  l.tool_result_bytes = f.u64("tool_result_bytes");
  l.max_thinking_tokens = f.u64("max_thinking_tokens", false);  // optional: added in 1.1 of the spec
  l.wrap_up_grace_ms = f.u64("wrap_up_grace_ms", false);
  if (!f.error().empty()) outer.fail("task.limits", f.error());
  return l;
}

std::vector<ToolCall> tool_calls_from(json arr, Fields& outer) {
  std::vector<ToolCall> calls;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    json& c = arr[i];
    std::string where = "tool_calls[" + std::to_string(i) + "]";
    if (!c.is_object()) {
      outer.fail(where, "must be an object");
      break;
    }
    Fields f(c, "tool_call");
    ToolCall tc{f.str("id"), f.str("name"), f.object("arguments", false)};
    if (!f.error().empty()) {
      outer.fail(where, f.error());
      break;
    }
    calls.push_back(std::move(tc));
  }
  return calls;
}

}  // namespace

bool nesting_within(std::string_view text, std::size_t max_depth) noexcept {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

namespace {
Decoded<ChildMessage> decode_child_tree(std::string_view line, bool depth_checked);
}  // namespace

Decoded<ChildMessage> decode_child_message(std::string_view line) {
  // The depth bound first, as for every line (the shortcut parses a tool request's arguments too),
  // and once: the tree decoder is told it was checked.
  if (!nesting_within(line)) return decode_child_tree(line, /*depth_checked=*/false);
  if (auto plain = detail::decode_plain_child_line(line)) {
    Decoded<ChildMessage> out;
    out.message = std::move(*plain);
    return out;
  }
  return decode_child_tree(line, /*depth_checked=*/true);
}

Decoded<ChildMessage> decode_child_message_via_tree(std::string_view line) {
  return decode_child_tree(line, /*depth_checked=*/false);
}

namespace {
Decoded<ChildMessage> decode_child_tree(std::string_view line, bool depth_checked) {
  json obj;
  std::string type;
  auto out = parse_object<ChildMessage>(line, obj, type, depth_checked);
  if (!out.error.empty()) return out;
  Fields f(obj, type);
  if (type == "hello") {
    Hello h;
    json v = f.array("versions");
    for (const auto& x : v) {
      if (!x.is_number_integer()) {
        f.fail("versions", "must hold integers");
        break;
      }
      h.versions.push_back(x.get<int>());
    }
    h.agent = f.str("agent", false);
    out.message = std::move(h);
  } else if (type == "model_request") {
    ModelRequest m;
    m.id = f.str("id");
    m.messages = f.array("messages");
    // Roles are a closed set: a provider would otherwise guess what "developer" or "User" means.
    for (std::size_t i = 0; i < m.messages.size(); ++i) {
      const json& msg = m.messages[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!msg.is_object()) {
        f.fail(where, "must be an object {role, content}");
        break;
      }
      auto role = msg.find("role");
      if (role == msg.end() || !role->is_string()) {
        f.fail(where + ".role", "is missing or not a string");
        break;
      }
      const std::string& r = role->get_ref<const std::string&>();
      if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
        f.fail(where + ".role", "must be one of system, user, assistant, tool (got '" + r.substr(0, 40) + "')");
        break;
      }
    }
    m.tools = f.array("tools", false);
    m.max_tokens = f.opt_u64("max_tokens");
    out.message = std::move(m);
  } else if (type == "tool_request") {
    ToolRequest m;
    m.id = f.str("id");
    m.tool = f.str("tool");
    m.args = f.object("args", false);
    out.message = std::move(m);
  } else if (type == "tool_done") {
    ToolDone m;
    m.id = f.str("id");
    m.ok = f.boolean("ok");
    m.bytes = f.u64("bytes", false);
    m.error = f.str("error", false);
    out.message = std::move(m);
  } else if (type == "final") {
    Final m;
    m.summary = f.str("summary");
    m.answer = f.str("answer");
    m.report = f.object("report", false);
    out.message = std::move(m);
  } else if (type == "log") {
    Log m;
    m.level = f.str("level", false);
    if (!m.level.empty() && m.level != "debug" && m.level != "info" && m.level != "warn" && m.level != "error")
      f.fail("level", "must be one of debug, info, warn, error (got '" + m.level.substr(0, 40) + "')");
    m.message = f.str("message");
    out.message = std::move(m);
  } else {
    out.error = "unknown message type '" + type + "'";
    return out;
  }
  if (!f.error().empty()) {
    out.message.reset();
    out.error = f.error();
  }
  return out;
}
}  // namespace

Decoded<SupervisorMessage> decode_supervisor_message(std::string_view line) {
  json obj;
  std::string type;
  auto out = parse_object<SupervisorMessage>(line, obj, type);
  if (!out.error.empty()) return out;
  Fields f(obj, type);
  if (type == "welcome") {
    Welcome w;
    w.version = static_cast<int>(f.u64("version"));
    w.child_id = f.str("child_id");
    json task = f.object("task");
    Fields t(task, "task");
    w.task.brief = t.str("brief");
    w.task.description = t.str("description", false);
    w.task.preset = t.str("preset");
    w.task.workspace = t.str("workspace");
    w.task.tools = t.array("tools");
    w.task.limits = limits_from(t.object("limits"), t);
    if (!t.error().empty()) f.fail("task", t.error());
    out.message = std::move(w);
  } else if (type == "model_response") {
    ModelResponse m;
    m.id = f.str("id");
    m.content = f.str("content", false);
    m.tool_calls = tool_calls_from(f.array("tool_calls", false), f);
    m.usage = f.usage("usage");
    m.finish_reason = f.str("finish_reason", false);
    out.message = std::move(m);
  } else if (type == "model_error") {
    ModelError m{f.str("id"), f.str("code"), f.str("message", false)};
    out.message = std::move(m);
  } else if (type == "tool_decision") {
    ToolDecision m;
    m.id = f.str("id");
    std::string d = f.str("decision");
    if (d != "allow" && d != "deny" && f.error().empty()) f.fail("decision", "must be \"allow\" or \"deny\"");
    m.allow = d == "allow";
    m.reason = f.str("reason", false);
    out.message = std::move(m);
  } else if (type == "tool_result") {
    ToolResult m{f.str("id"), f.boolean("ok"), f.str("content", false)};
    out.message = std::move(m);
  } else if (type == "wrap_up") {
    WrapUp m{f.str("reason"), f.str("budget", false)};
    out.message = std::move(m);
  } else if (type == "cancel") {
    Cancel m{f.str("reason", false)};
    out.message = std::move(m);
  } else if (type == "error") {
    Error m{f.str("code"), f.str("message", false)};
    out.message = std::move(m);
  } else {
    out.error = "unknown message type '" + type + "'";
    return out;
  }
  if (!f.error().empty()) {
    out.message.reset();
    out.error = f.error();
  }
  return out;
}

json to_json(const Usage& u) {
  return {{"input_tokens", u.input_tokens},
          {"output_tokens", u.output_tokens},
          {"reasoning_tokens", u.reasoning_tokens},
          {"cache_read_input_tokens", u.cache_read_input_tokens},
          {"cache_write_input_tokens", u.cache_write_input_tokens}};
}

json to_json(const Limits& l) {
  return {{"max_steps", l.max_steps},
          {"max_tool_calls", l.max_tool_calls},
          {"max_tokens", l.max_tokens},
          {"timeout_ms", l.timeout_ms},
          {"summary_bytes", l.summary_bytes},
          {"answer_bytes", l.answer_bytes},
          {"tool_result_bytes", l.tool_result_bytes},
          {"max_thinking_tokens", l.max_thinking_tokens},
          {"wrap_up_grace_ms", l.wrap_up_grace_ms}};
}

namespace {
struct ChildEncoder {
  json operator()(const Hello& m) const { return {{"type", "hello"}, {"versions", m.versions}, {"agent", m.agent}}; }
  json operator()(const ModelRequest& m) const {
    json j{{"type", "model_request"}, {"id", m.id}, {"messages", m.messages}, {"tools", m.tools}};
    if (m.max_tokens) j["max_tokens"] = *m.max_tokens;
    return j;
  }
  json operator()(const ToolRequest& m) const {
    return {{"type", "tool_request"}, {"id", m.id}, {"tool", m.tool}, {"args", m.args}};
  }
  json operator()(const ToolDone& m) const {
    json j{{"type", "tool_done"}, {"id", m.id}, {"ok", m.ok}, {"bytes", m.bytes}};
    if (!m.error.empty()) j["error"] = m.error;
    return j;
  }
  json operator()(const Final& m) const {
    return {{"type", "final"}, {"summary", m.summary}, {"answer", m.answer}, {"report", m.report}};
  }
  json operator()(const Log& m) const { return {{"type", "log"}, {"level", m.level}, {"message", m.message}}; }
};

struct SupervisorEncoder {
  json operator()(const Welcome& m) const {
    return {{"type", "welcome"},
            {"version", m.version},
            {"child_id", m.child_id},
            {"task",
             {{"brief", m.task.brief},
              {"description", m.task.description},
              {"preset", m.task.preset},
              {"workspace", m.task.workspace},
              {"tools", m.task.tools},
              {"limits", to_json(m.task.limits)}}}};
  }
  json operator()(const ModelResponse& m) const {
    json calls = json::array();
    for (const auto& c : m.tool_calls) calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
    return {{"type", "model_response"},  {"id", m.id},
            {"content", m.content},      {"tool_calls", std::move(calls)},
            {"usage", to_json(m.usage)}, {"finish_reason", m.finish_reason}};
  }
  json operator()(const ModelError& m) const {
    return {{"type", "model_error"}, {"id", m.id}, {"code", m.code}, {"message", m.message}};
  }
  json operator()(const ToolDecision& m) const {
    return {{"type", "tool_decision"}, {"id", m.id}, {"decision", m.allow ? "allow" : "deny"}, {"reason", m.reason}};
  }
  json operator()(const ToolResult& m) const {
    return {{"type", "tool_result"}, {"id", m.id}, {"ok", m.ok}, {"content", m.content}};
  }
  json operator()(const WrapUp& m) const { return {{"type", "wrap_up"}, {"reason", m.reason}, {"budget", m.budget}}; }
  json operator()(const Cancel& m) const { return {{"type", "cancel"}, {"reason", m.reason}}; }
  json operator()(const Error& m) const { return {{"type", "error"}, {"code", m.code}, {"message", m.message}}; }
};

struct ChildTypeName {
  const char* operator()(const Hello&) const { return "hello"; }
  const char* operator()(const ModelRequest&) const { return "model_request"; }
  const char* operator()(const ToolRequest&) const { return "tool_request"; }
  const char* operator()(const ToolDone&) const { return "tool_done"; }
  const char* operator()(const Final&) const { return "final"; }
  const char* operator()(const Log&) const { return "log"; }
};
}  // namespace

json to_json(const ChildMessage& m) { return std::visit(ChildEncoder{}, m); }
json to_json(const SupervisorMessage& m) { return std::visit(SupervisorEncoder{}, m); }

const char* type_name(const ChildMessage& m) noexcept { return std::visit(ChildTypeName{}, m); }
const char* type_name(const SupervisorMessage& m) noexcept {
  static constexpr const char* names[] = {"welcome",     "model_response", "model_error", "tool_decision",
                                          "tool_result", "wrap_up",        "cancel",      "error"};
  return names[m.index()];
}

std::string encode_line(const SupervisorMessage& m) {
  if (const auto* decision = std::get_if<ToolDecision>(&m)) {
    std::string line;
    line.reserve(64 + decision->id.size() + decision->reason.size());
    if (detail::encode_plain_decision(*decision, line)) return line;
  }
  return encode_line(to_json(m));
}

std::string encode_line(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  s.push_back('\n');
  return s;
}

std::optional<int> negotiate_version(const std::vector<int>& offered) noexcept {
  std::optional<int> best;
  for (int v : offered)
    if (v >= kMinVersion && v <= kVersion && (!best || v > *best)) best = v;
  return best;
}

}  // namespace protocol
