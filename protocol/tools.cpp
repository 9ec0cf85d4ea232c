#include "protocol/tools.hpp"

#include <stdexcept>

namespace protocol {

namespace detail {
extern const std::string_view kToolCatalogueJson;
}

namespace {

std::vector<ToolInfo> parse_catalogue() {
  // The file is part of the build; a malformed one fails the protocol tests at once.
  const auto doc = nlohmann::json::parse(detail::kToolCatalogueJson);
  std::vector<ToolInfo> out;
  for (const auto& t : doc.at("tools")) {
    ToolInfo info;
    info.name = t.at("name").get<std::string>();
    const std::string where = t.at("runs_in").get<std::string>();
    if (where == "child")
      info.runs_in = RunsIn::child;
    else if (where == "supervisor")
      info.runs_in = RunsIn::supervisor;
    else
      throw std::logic_error("protocol/tools.json: " + info.name + ".runs_in must be child or supervisor");
    info.description = t.at("description").get<std::string>();
    info.input_schema = t.at("input_schema");
    if (!info.input_schema.is_object())
      throw std::logic_error("protocol/tools.json: " + info.name + ".input_schema must be an object");
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace

const char* to_string(RunsIn r) noexcept { return r == RunsIn::supervisor ? "supervisor" : "child"; }

nlohmann::json ToolInfo::spec() const {
  return {{"name", name}, {"description", description}, {"input_schema", input_schema}};
}

const std::vector<ToolInfo>& tool_catalogue() {
  static const std::vector<ToolInfo> tools = parse_catalogue();
  return tools;
}

const ToolInfo* find_tool(std::string_view name) {
  for (const ToolInfo& t : tool_catalogue())
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> tool_names() {
  std::vector<std::string> out;
  for (const ToolInfo& t : tool_catalogue()) out.push_back(t.name);
  return out;
}

std::string tool_names_text() {
  std::string out;
  for (const ToolInfo& t : tool_catalogue()) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

nlohmann::json tool_specs(const std::vector<std::string>& names) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& n : names) {
    const ToolInfo* t = find_tool(n);
    if (!t) throw std::invalid_argument("tool '" + n + "' is not in the tool catalogue (" + tool_names_text() + ")");
    out.push_back(t->spec());
  }
  return out;
}

std::string_view tool_catalogue_json() { return detail::kToolCatalogueJson; }

}  // namespace protocol
