#include "frontends/control.hpp"

#include <cstdint>

namespace supervisor {
using nlohmann::json;

namespace {

// Durations end up in signed std::chrono::milliseconds.
constexpr std::uint64_t kMaxMilliseconds = static_cast<std::uint64_t>(INT64_MAX);

void only_keys(const json& j, const std::string& where, std::initializer_list<const char*> keys) {
  for (const auto& [k, v] : j.items())
    if (std::none_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; }))
      throw BadRequest(where + k + ": unknown field");
}

std::optional<std::uint64_t> count(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_unsigned()) throw BadRequest(where + key + ": must be a non-negative integer");
  return it->get<std::uint64_t>();
}

std::optional<std::vector<std::string>> names(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) throw BadRequest(where + key + ": must be an array of strings");
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) throw BadRequest(where + key + ": must be an array of strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

std::string text(const json& j, const char* key, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw BadRequest(std::string(key) + ": missing");
    return {};
  }
  if (!it->is_string()) throw BadRequest(std::string(key) + ": must be a string");
  return it->get<std::string>();
}

}  // namespace

BudgetOverrides parse_limits(const json& j, const std::string& where) {
  BudgetOverrides o;
  if (j.is_null()) return o;
  if (!j.is_object()) throw BadRequest(where + ": must be an object");
  const std::string w = where + ".";
  only_keys(j, w,
            {"max_steps", "max_tool_calls", "max_tokens", "max_thinking_tokens", "timeout", "summary_bytes",
             "answer_bytes", "max_cost_usd"});
  o.max_steps = count(j, "max_steps", w);
  o.max_tool_calls = count(j, "max_tool_calls", w);
  o.max_tokens = count(j, "max_tokens", w);
  o.max_thinking_tokens = count(j, "max_thinking_tokens", w);
  o.summary_bytes = count(j, "summary_bytes", w);
  o.answer_bytes = count(j, "answer_bytes", w);
  if (auto it = j.find("max_cost_usd"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || it->get<double>() > 1e9)
      throw BadRequest(w + "max_cost_usd: must be a positive number of US dollars");
    o.max_cost_usd = it->get<double>();
  }
  if (auto it = j.find("timeout"); it != j.end() && !it->is_null()) {
    if (it->is_number_unsigned()) {
      // Refused rather than wrapped: 2^64/1000 + 1 seconds would come out as a few hundred milliseconds.
      if (it->get<std::uint64_t>() > kMaxMilliseconds / 1000) throw BadRequest(w + "timeout: is too large");
      o.timeout_ms = it->get<std::uint64_t>() * 1000;
    } else if (it->is_string()) {
      try {
        o.timeout_ms = static_cast<std::uint64_t>(parse_duration(it->get<std::string>()).count());
      } catch (const std::invalid_argument& e) {
        throw BadRequest(w + "timeout: " + e.what());
      }
    } else {
      throw BadRequest(w + "timeout: must be seconds or a duration like \"5m\"");
    }
  }
  return o;
}

Scope parse_scope(const json& j) {
  Scope s;
  if (j.is_null()) return s;
  if (!j.is_object()) throw BadRequest("scope: must be an object");
  only_keys(j, "scope.", {"tools", "presets", "domains", "budgets"});
  s.tools = names(j, "tools", "scope.");
  s.presets = names(j, "presets", "scope.");
  s.domains = names(j, "domains", "scope.");
  if (j.contains("budgets")) s.budgets = parse_limits(j["budgets"], "scope.budgets");
  return s;
}

SpawnRequest parse_spawn(const json& j) {
  only_keys(j, "",
            {"type", "id", "preset", "brief", "description", "workspace", "model", "limits", "tools", "domains",
             "background"});
  SpawnRequest r;
  r.preset = text(j, "preset", true);
  r.brief = text(j, "brief", true);
  r.description = text(j, "description", false);
  r.workspace = text(j, "workspace", false);
  r.model = text(j, "model", false);
  if (j.contains("limits")) {
    // The disk budget is a writer's (writes.max_disk_bytes), not a session budget: the hub tightens
    // the preset with it, as `run --max-disk-bytes` does.
    json limits = j["limits"];
    if (limits.is_object() && limits.contains("max_disk_bytes")) {
      r.max_disk_bytes = count(limits, "max_disk_bytes", "limits.");
      limits.erase("max_disk_bytes");
    }
    r.limits = parse_limits(limits, "limits");
  }
  r.tools = names(j, "tools", "");
  r.domains = names(j, "domains", "");
  return r;
}

json to_json(const Progress& p) {
  return {{"steps", p.steps},           {"max_steps", p.max_steps},
          {"tool_calls", p.tool_calls}, {"max_tool_calls", p.max_tool_calls},
          {"tokens", p.tokens},         {"max_tokens", p.max_tokens},
          {"elapsed_ms", p.elapsed_ms}};
}

json to_json(const ChildInfo& c) {
  json j = {{"child_id", c.id},
            {"state", to_string(c.state)},
            {"preset", c.preset},
            {"description", c.description},
            {"budget_use", to_json(c.progress)}};
  if (!c.waiting_for.empty()) j["waiting_for"] = c.waiting_for;
  if (c.envelope) j["status"] = protocol::to_string(c.envelope->status);
  return j;
}

}  // namespace supervisor
