#include "frontends/mcp.hpp"

#include <algorithm>

#include "policy/decide.hpp"
#include "frontends/control.hpp"

namespace supervisor::mcp {
using nlohmann::json;

std::string negotiate_version(const json& requested) {
  if (requested.is_string())
    for (const char* v : kProtocolVersions)
      if (requested.get<std::string>() == v) return v;
  return kProtocolVersions[0];
}

namespace {

bool valid_id(const json& id) { return id.is_string() || id.is_number_integer(); }

json readable_id(const json& j) {
  auto it = j.find("id");
  return it != j.end() && valid_id(*it) ? *it : json(nullptr);
}

}  // namespace

Message classify(const json& j) {
  if (j.is_array())
    return Invalid{nullptr, kInvalidRequest, "JSON-RPC batches are not supported (MCP removed them in 2025-06-18)"};
  if (!j.is_object()) return Invalid{nullptr, kInvalidRequest, "a message must be a JSON object"};
  const json id = readable_id(j);
  auto v = j.find("jsonrpc");
  if (v == j.end() || *v != "2.0") return Invalid{id, kInvalidRequest, "jsonrpc: must be \"2.0\""};
  auto has_id = j.find("id");
  if (has_id != j.end() && !valid_id(*has_id))
    return Invalid{nullptr, kInvalidRequest, "id: must be a string or an integer"};
  json params = nullptr;
  if (auto p = j.find("params"); p != j.end()) {
    if (!p->is_object() && !p->is_null()) return Invalid{id, kInvalidRequest, "params: must be an object"};
    params = *p;
  }
  if (auto m = j.find("method"); m != j.end()) {
    if (!m->is_string()) return Invalid{id, kInvalidRequest, "method: must be a string"};
    if (has_id == j.end()) return Notification{m->get<std::string>(), params};
    return Request{*has_id, m->get<std::string>(), params};
  }
  if (has_id == j.end()) return Invalid{nullptr, kInvalidRequest, "method: missing (and no id: not a response either)"};
  auto r = j.find("result");
  auto e = j.find("error");
  if ((r == j.end()) == (e == j.end()))
    return Invalid{nullptr, kInvalidRequest, "a response must have exactly one of result and error"};
  if (e != j.end() && !e->is_object()) return Invalid{nullptr, kInvalidRequest, "error: must be an object"};
  return Response{*has_id, r != j.end() ? *r : json(nullptr), e != j.end() ? *e : json(nullptr)};
}

Message decode_line(std::string_view line) {
  if (!protocol::nesting_within(line))
    return Invalid{
        nullptr, kParseError,
        "parse error: arrays and objects nested deeper than " + std::to_string(protocol::kMaxDepth) + " levels"};
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid{nullptr, kParseError, "parse error: the line is not valid JSON"};
  return classify(j);
}

json result_message(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json error_message(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

json notification_message(const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
}

json request_message(const json& id, const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

// --- tools ---------------------------------------------------------------------------------------

namespace {

json limits_schema() {
  auto count = [](const char* what) { return json{{"type", "integer"}, {"minimum", 1}, {"description", what}}; };
  return {
      {"type", "object"},
      {"description",
       "Tighten the preset's budgets for this child (never widen: a value above the preset's is refused). "
       "When a budget runs out the child is asked to wrap up and report what it has."},
      {"properties",
       {{"max_steps", count("model turns")},
        {"max_tool_calls", count("tool calls")},
        {"max_tokens", count("input + output tokens over the whole run")},
        {"max_thinking_tokens", count("reasoning tokens")},
        // anyOf rather than a type array: some hosts (Gemini CLI) warn about or drop type arrays.
        {"timeout",
         {{"anyOf", {{{"type", "integer"}, {"minimum", 1}}, {{"type", "string"}}}},
          {"description", "wall time: seconds, or a duration such as \"90s\", \"5m\", \"1h\""}}},
        {"max_cost_usd",
         {{"type", "number"},
          {"exclusiveMinimum", 0},
          {"description", "estimated spend in US dollars at the model config's prices (needs a price for the model)"}}},
        {"max_disk_bytes", count("bytes a writer (worker, implementation) may add to its workspace or worktree")},
        {"summary_bytes", count("cap on the envelope's summary")},
        {"answer_bytes", count("cap on the envelope's answer")}}},
      {"additionalProperties", false}};
}

json child_id_schema(const char* what) {
  return {{"type", "object"},
          {"properties", {{"child_id", {{"type", "string"}, {"description", what}}}}},
          {"required", {"child_id"}},
          {"additionalProperties", false}};
}

const char* const kStatuses[] = {"completed", "budget_exhausted", "timeout", "cancelled", "failed", "protocol_error"};
// What the hub reports of its children (ChildInfo::state).
const char* const kStates[] = {to_string(ChildState::queued), to_string(ChildState::waiting_for_lock),
                               to_string(ChildState::running), to_string(ChildState::done)};

// The envelope's "denials": the first refused tool calls (protocol/README.md, "Result envelope").
json denials_schema() {
  return {{"type", "array"},
          {"maxItems", protocol::kMaxDenials},
          {"description",
           "tool calls the supervisor refused, first ones first; the rest are counted in "
           "denials_omitted (tools_denied = listed + omitted)"},
          {"items",
           {{"type", "object"},
            {"properties",
             {{"tool", {{"type", "string"}}},
              {"rule",
               {{"type", "string"},
                {"description",
                 "what refused it: tools.deny, tools.rules[N] {...}, "
                 "blocked, not offered, wrap-up, ask: no approver, "
                 "ask: declined by parent, ask: approval timed out, ask: too many waiting"}}},
              {"reason", {{"type", "string"}}}}},
            {"required", {"tool", "rule", "reason"}}}}};
}

json envelope_schema() {
  return {{"type", "object"},
          {"description", "The child's result envelope (protocol/README.md, \"Result envelope\")."},
          {"properties",
           {{"id", {{"type", "string"}}},
            {"preset", {{"type", "string"}}},
            {"status", {{"type", "string"}, {"enum", kStatuses}}},
            {"reason", {{"type", "string"}}},
            {"summary", {{"type", "string"}}},
            {"answer", {{"type", "string"}}},
            {"tools_denied", {{"type", "integer"}, {"minimum", 0}}},
            {"denials", denials_schema()},
            {"denials_omitted", {{"type", "integer"}, {"minimum", 0}}},
            {"transcript", {{"anyOf", {{{"type", "string"}}, {{"type", "null"}}}}}}}},
          {"required", {"id", "preset", "status", "reason"}}};
}

json child_schema() {
  return {{"type", "object"},
          {"properties",
           {{"child_id", {{"type", "string"}}},
            {"state", {{"type", "string"}, {"enum", kStates}}},
            {"preset", {{"type", "string"}}},
            {"description", {{"type", "string"}}},
            {"status", {{"type", "string"}, {"enum", kStatuses}}},
            {"budget_use", {{"type", "object"}}}}},
          {"required", {"child_id", "state", "preset"}}};
}

json annotations(const char* title, bool read_only, bool destructive, bool idempotent, bool open_world) {
  json a = {{"title", title}, {"readOnlyHint", read_only}, {"openWorldHint", open_world}};
  if (!read_only) {  // the other hints only mean something for tools that change things
    a["destructiveHint"] = destructive;
    a["idempotentHint"] = idempotent;
  }
  return a;
}

std::string preset_line(const Preset& p) {
  std::string tools;
  for (const auto& t : offered_tools(p)) tools += (tools.empty() ? "" : ", ") + t;
  std::string mode = p.workspace_mode == WorkspaceMode::read ? "never writes the workspace"
                     : p.workspace_mode == WorkspaceMode::write_locked
                         ? "edits the workspace in place (one writer at a time)"
                         : "works on an isolated copy and returns a patch (agent_apply)";
  const auto offered = offered_tools(p);
  const bool web =
      std::any_of(offered.begin(), offered.end(), [](const std::string& t) { return t.rfind("web_", 0) == 0; });
  std::string net = p.sandbox.network != sandbox::Network::none
                        ? "network: " + std::string(to_string(p.sandbox.network))
                    : web ? "no network of its own; the web only through the supervisor's checked web tools"
                          : "no network";
  return "- " + p.name + ": " + p.description + " Tools: " + (tools.empty() ? "none" : tools) + ". It " + mode + "; " +
         net + ". Default budget " + std::to_string(p.budgets.max_steps) + " steps, " +
         std::to_string(p.budgets.timeout_ms / 1000) + " s.";
}

}  // namespace

json tool_definitions(const std::vector<Preset>& presets) {
  std::vector<std::string> names;
  std::string lines;
  bool any_writer = false, any_patch = false;
  for (const auto& p : presets) {
    names.push_back(p.name);
    lines += preset_line(p) + "\n";
    any_writer = any_writer || p.workspace_mode == WorkspaceMode::write_locked;
    any_patch = any_patch || p.workspace_mode == WorkspaceMode::worktree;
  }
  json preset_schema = {{"type", "string"}, {"description", "which kind of child (see the list above)"}};
  if (!names.empty()) preset_schema["enum"] = names;

  json spawn = {
      {"name", "agent_spawn"},
      {"title", "Delegate to a sandboxed subagent"},
      {"description",
       "Start a child agent on one focused task. It runs in its own kernel-enforced sandbox with only the tools "
       "of its preset, hard budgets (steps, tool calls, tokens, time) enforced from outside, and sees nothing "
       "but the brief: put every fact it needs in the brief. Returns one capped result envelope (status, "
       "summary, answer with evidence, budget use, transcript path). With background=true it returns a "
       "child_id at once; read the result later with agent_output. Presets:\n" +
           lines +
           "Tool calls a preset marks 'ask' are put to the user for approval when the client supports it, "
           "otherwise denied."},
      {"inputSchema",
       {{"type", "object"},
        {"properties",
         {{"preset", preset_schema},
          {"brief",
           {{"type", "string"},
            {"minLength", 1},
            {"description", "the objective and everything the child needs to know: it sees nothing else"}}},
          {"description",
           {{"type", "string"},
            {"minLength", 1},
            {"description", "a short label (3-10 words), shown in approvals, lists and logs"}}},
          {"workspace",
           {{"type", "string"},
            {"description",
             "directory the child works in (default: the server's workspace); must be inside an "
             "allowed root"}}},
          {"model", {{"type", "string"}, {"description", "model spec (default: the server's --model)"}}},
          {"limits", limits_schema()},
          {"tools",
           {{"type", "array"}, {"items", {{"type", "string"}}}, {"description", "narrow the preset's tools to these"}}},
          {"domains",
           {{"type", "array"},
            {"items", {{"type", "string"}}},
            {"description", "research: the only domains web_fetch may reach (within the preset's)"}}},
          {"background",
           {{"type", "boolean"},
            {"default", false},
            {"description", "return at once with a child_id instead of waiting for the envelope"}}}}},
        {"required", {"preset", "brief", "description"}},
        {"additionalProperties", false}}},
      {"outputSchema",
       {{"type", "object"},
        {"description", "The envelope when the child ran to the end; {child_id, state} for a background spawn."},
        {"properties",
         {{"child_id", {{"type", "string"}}},
          {"state", {{"type", "string"}, {"enum", kStates}}},
          {"id", {{"type", "string"}}},
          {"status", {{"type", "string"}, {"enum", kStatuses}}},
          {"tools_denied", {{"type", "integer"}, {"minimum", 0}}},
          {"denials", denials_schema()},
          {"denials_omitted", {{"type", "integer"}, {"minimum", 0}}}}}}},
      {"annotations", annotations("Delegate to a sandboxed subagent", false, any_writer || any_patch, false, true)}};

  json list = {{"name", "agent_list"},
               {"title", "List subagents"},
               {"description",
                "Every child of this server: id, state (queued, waiting_for_lock, running, done), preset, "
                "description, budget use so far, and the status of finished ones."},
               {"inputSchema", {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}}},
               {"outputSchema",
                {{"type", "object"},
                 {"properties", {{"children", {{"type", "array"}, {"items", child_schema()}}}}},
                 {"required", {"children"}}}},
               {"annotations", annotations("List subagents", true, false, true, false)}};

  json output_in = child_id_schema("the id agent_spawn returned");
  output_in["properties"]["wait_seconds"] = {
      {"type", "integer"},
      {"minimum", 0},
      {"maximum", kMaxWaitSeconds},
      {"description", "wait up to this long for the child to finish (default 0: answer at once)"}};
  json output = {{"name", "agent_output"},
                 {"title", "Read a subagent's result"},
                 {"description",
                  "The state and budget use of one child, and its envelope once it has finished. Set wait_seconds "
                  "to wait for a background child to finish."},
                 {"inputSchema", output_in},
                 {"outputSchema",
                  {{"type", "object"},
                   {"properties",
                    {{"child_id", {{"type", "string"}}},
                     {"state", {{"type", "string"}, {"enum", kStates}}},
                     {"budget_use", {{"type", "object"}}},
                     {"envelope", {{"anyOf", {envelope_schema(), {{"type", "null"}}}}}}}},
                   {"required", {"child_id", "state", "envelope"}}}},
                 {"annotations", annotations("Read a subagent's result", true, false, true, false)}};

  json cancel_in = child_id_schema("the child to cancel");
  cancel_in["properties"]["reason"] = {{"type", "string"}, {"description", "why (recorded in the envelope)"}};
  json cancel = {{"name", "agent_cancel"},
                 {"title", "Cancel a subagent"},
                 {"description",
                  "Stop a queued or running child: its whole process tree is killed and its envelope says "
                  "cancelled. Cancelling a finished child does nothing."},
                 {"inputSchema", cancel_in},
                 {"outputSchema",
                  {{"type", "object"},
                   {"properties", {{"child_id", {{"type", "string"}}}, {"state", {{"type", "string"}}}}},
                   {"required", {"child_id", "state"}}}},
                 {"annotations", annotations("Cancel a subagent", false, false, true, false)}};

  json apply_in = child_id_schema("the finished child whose patch to apply");
  apply_in["properties"]["allow_flagged"] = {
      {"type", "boolean"},
      {"description",
       "apply even though the patch's review flags symlinks, mode changes, new executables or later-execution paths "
       "(hooks, CI, agent and editor configuration); only after reviewing them. Symlinks leaving the workspace are "
       "refused regardless"}};
  json apply = {
      {"name", "agent_apply"},
      {"title", "Apply a subagent's patch"},
      {"description",
       "Apply the patch a finished worktree child (such as implementation) returned to the workspace it "
       "was spawned on. A patch that no longer applies is reported and nothing is changed. A patch whose review "
       "(the envelope's artifacts.patch.review) flags changes is refused unless allow_flagged is true."},
      {"inputSchema", apply_in},
      {"outputSchema",
       {{"type", "object"},
        {"properties",
         {{"child_id", {{"type", "string"}}},
          {"ok", {{"type", "boolean"}}},
          {"message", {{"type", "string"}}},
          {"files", {{"type", "array"}, {"items", {{"type", "string"}}}}}}},
        {"required", {"child_id", "ok", "message"}}}},
      {"annotations", annotations("Apply a subagent's patch", false, true, false, false)}};

  return json::array({spawn, list, output, cancel, apply});
}

std::vector<std::string> host_added_fields() { return {"wait_for_previous"}; }

json without_host_fields(json args) {
  if (!args.is_object()) return args;
  if (auto it = args.find("wait_for_previous"); it != args.end() && it->is_boolean()) args.erase(it);
  return args;
}

SpawnArguments parse_spawn_arguments(const json& args) {
  if (!args.is_object()) throw BadRequest("arguments: must be an object");
  static const char* const keys[] = {"preset", "brief", "description", "workspace", "model",
                                     "limits", "tools", "domains",     "background"};
  for (const auto& [k, v] : args.items())
    if (std::none_of(std::begin(keys), std::end(keys), [&](const char* x) { return k == x; }))
      throw BadRequest(k + ": unknown field");
  SpawnArguments out;
  out.request = parse_spawn(args);
  if (out.request.brief.empty()) throw BadRequest("brief: must not be empty");
  if (out.request.description.empty()) throw BadRequest("description: missing (a short label for the child)");
  if (auto b = args.find("background"); b != args.end() && !b->is_null()) {
    if (!b->is_boolean()) throw BadRequest("background: must be true or false");
    out.background = b->get<bool>();
  }
  return out;
}

std::string parse_child_id(const json& args, std::initializer_list<const char*> also) {
  if (!args.is_object()) throw BadRequest("arguments: must be an object");
  for (const auto& [k, v] : args.items())
    if (k != "child_id" && std::none_of(also.begin(), also.end(), [&](const char* x) { return k == x; }))
      throw BadRequest(k + ": unknown field");
  auto it = args.find("child_id");
  if (it == args.end() || !it->is_string() || it->get<std::string>().empty())
    throw BadRequest("child_id: missing or not a string");
  return *it;
}

void parse_no_arguments(const json& args) {
  if (!args.is_object()) throw BadRequest("arguments: must be an object");
  if (!args.empty()) throw BadRequest(args.begin().key() + ": unknown field (this tool takes no arguments)");
}

std::uint64_t parse_wait_seconds(const json& args) {
  auto it = args.find("wait_seconds");
  if (it == args.end() || it->is_null()) return 0;
  const bool whole = it->is_number_unsigned() || (it->is_number_integer() && it->get<std::int64_t>() >= 0);
  if (!whole || it->get<std::uint64_t>() > kMaxWaitSeconds)
    throw BadRequest("wait_seconds: must be a whole number from 0 to " + std::to_string(kMaxWaitSeconds));
  return it->get<std::uint64_t>();
}

json tool_result(const json& value) {
  return {{"content", json::array({{{"type", "text"}, {"text", value.dump(2)}}})},
          {"structuredContent", value},
          {"isError", false}};
}

json tool_error(const std::string& message) {
  return {{"content", json::array({{{"type", "text"}, {"text", message}}})}, {"isError", true}};
}

json envelope_result(const protocol::Envelope& e) {
  json r = tool_result(protocol::to_json(e));
  r["isError"] = e.status == protocol::Status::failed || e.status == protocol::Status::protocol_error;
  return r;
}

}  // namespace supervisor::mcp
