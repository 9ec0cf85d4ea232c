// Session event kinds (events.hpp).
#include "records/events.hpp"

#include <array>
#include <utility>

namespace supervisor {

namespace {
constexpr std::array<std::pair<EventKind, const char*>, 23> kNames = {{
    {EventKind::queued, "queued"},
    {EventKind::spawn, "spawn"},
    {EventKind::runtime_state, "runtime_state"},
    {EventKind::started, "started"},
    {EventKind::hello, "hello"},
    {EventKind::model_request, "model_request"},
    {EventKind::model_response, "model_response"},
    {EventKind::tool_results_cut, "tool_results_cut"},
    {EventKind::tool_decision, "tool_decision"},
    {EventKind::approval, "approval"},
    {EventKind::denial, "denial"},
    {EventKind::tool_result, "tool_result"},
    {EventKind::tool_done, "tool_done"},
    {EventKind::budget, "budget"},
    {EventKind::final, "final"},
    {EventKind::failure, "failure"},
    {EventKind::after_kill, "after_kill"},
    {EventKind::kill, "kill"},
    {EventKind::cancel, "cancel"},
    {EventKind::exit, "exit"},
    {EventKind::envelope, "envelope"},
    {EventKind::delivered, "delivered"},
    {EventKind::abandoned, "abandoned"},
}};
}  // namespace

const char* to_string(EventKind k) noexcept {
  for (const auto& [kind, name] : kNames)
    if (kind == k) return name;
  return "unknown";
}

std::optional<EventKind> parse_event_kind(std::string_view text) noexcept {
  for (const auto& [kind, name] : kNames)
    if (text == name) return kind;
  return std::nullopt;
}

std::optional<EventKind> event_kind(const nlohmann::json& event) noexcept {
  if (!event.is_object()) return std::nullopt;
  auto it = event.find("event");
  if (it == event.end() || !it->is_string()) return std::nullopt;
  return parse_event_kind(it->get_ref<const std::string&>());
}

nlohmann::json make_event(EventKind kind, nlohmann::json fields) {
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["event"] = to_string(kind);
  return fields;
}

}  // namespace supervisor
