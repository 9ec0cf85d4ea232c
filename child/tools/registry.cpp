// The tool table: specs for the model and the dispatcher. run_tool is the one place where
// failures become ToolOutput{ok=false} and where every result is capped.
#include <exception>
#include <new>

#include "common.hpp"
#include "protocol/tools.hpp"

namespace child {

namespace {

using nlohmann::json;
using Fn = ToolOutput (*)(const json&, const ToolContext&);

struct Tool {
  const char* name;
  Fn fn;
};

// The implementations. Names, descriptions and schemas live in the tool catalogue
// (protocol/tools.json); child_tools_test checks that this table and the catalogue's "child" tools
// are the same set.
const Tool kTools[] = {
    {"read_file", tools_detail::read_file},
    {"list_dir", tools_detail::list_dir},
    {"glob", tools_detail::glob},
    {"grep", tools_detail::grep},
    {"write_file", tools_detail::write_file},
    {"edit_file", tools_detail::edit_file},
    {"run_command", tools_detail::run_command},
    {"git_status", tools_detail::git_status},
    {"git_log", tools_detail::git_log},
    {"git_show", tools_detail::git_show},
    {"git_diff", tools_detail::git_diff},
};

const Tool* find_tool(const std::string& name) {
  for (const Tool& t : kTools) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace

nlohmann::json tool_specs(const std::vector<std::string>& names) {
  json out = json::array();
  for (const std::string& n : names) {
    if (!find_tool(n)) continue;
    if (const protocol::ToolInfo* t = protocol::find_tool(n)) out.push_back(t->spec());
  }
  return out;
}

std::vector<std::string> local_tool_names() {
  std::vector<std::string> out;
  for (const Tool& t : kTools) out.emplace_back(t.name);
  return out;
}

ToolOutput run_tool(const std::string& name, const nlohmann::json& args, const ToolContext& ctx) {
  ToolOutput out;
  try {
    const Tool* t = find_tool(name);
    if (!t) {
      out.ok = false;
      out.content = "unknown tool '" + name + "'";
    } else {
      ToolContext c = ctx;
      std::error_code ec;
      auto canon = std::filesystem::weakly_canonical(ctx.workspace, ec);
      if (!ec && !canon.empty()) c.workspace = canon;
      if (c.workspace.has_relative_path() && !c.workspace.has_filename()) {
        c.workspace = c.workspace.parent_path();
      }
      out = t->fn(args, c);
    }
  } catch (const tools_detail::ToolError& e) {
    out = ToolOutput{};
    out.ok = false;
    out.content = name + ": " + e.what();
  } catch (const std::bad_alloc&) {
    out = ToolOutput{};
    out.ok = false;
    out.content = name + ": out of memory";
  } catch (const std::exception& e) {
    out = ToolOutput{};
    out.ok = false;
    out.content = name + ": internal error: " + e.what();
  } catch (...) {
    out = ToolOutput{};
    out.ok = false;
    out.content = name + ": internal error";
  }
  try {
    tools_detail::cap_output(out, ctx.result_cap);
  } catch (...) {
    out.content.clear();
    out.content = "tool output could not be prepared";
  }
  return out;
}

}  // namespace child
