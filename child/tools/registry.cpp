// The tool table: specs for the model and the dispatcher. run_tool is the one place where
// failures become ToolOutput{ok=false} and where every result is capped.
#include <exception>
#include <new>

#include "common.hpp"

namespace child {

namespace {

using nlohmann::json;
using Fn = ToolOutput (*)(const json&, const ToolContext&);

struct Tool {
  const char* name;
  Fn fn;
  const char* description;
  json (*schema)();
};

json obj(json props, std::vector<std::string> required = {}) {
  json j = {{"type", "object"}, {"properties", std::move(props)}, {"additionalProperties", false}};
  if (!required.empty()) j["required"] = std::move(required);
  return j;
}

json str(const char* d) { return {{"type", "string"}, {"description", d}}; }
json integer(const char* d, int min) {
  return {{"type", "integer"}, {"minimum", min}, {"description", d}};
}
json boolean(const char* d) { return {{"type", "boolean"}, {"description", d}}; }

const Tool kTools[] = {
    {"read_file", tools_detail::read_file,
     "Read a text file from the workspace. Lines come back numbered (\"  12\\tcode\"), with a "
     "header giving the file's total line count. Use start_line/end_line to read part of a long "
     "file; when the output limit is reached the result says which start_line to continue from. "
     "Binary files are refused.",
     [] {
       return obj({{"path", str("File path, relative to the workspace root.")},
                   {"start_line", integer("First line to show (1-based). Default 1.", 1)},
                   {"end_line", integer("Last line to show (inclusive). Default: end of file.", 1)},
                   {"max_bytes", integer("Stop after about this many bytes of output. Default "
                                         "and maximum: the tool result limit.", 1)}},
                  {"path"});
     }},
    {"list_dir", tools_detail::list_dir,
     "List one directory of the workspace, sorted by name: directories end with \"/\", files show "
     "their size, symlinks show their target. Not recursive; use glob to find files by name "
     "across directories.",
     [] {
       return obj({{"path", str("Directory, relative to the workspace root. Default \".\".")},
                   {"max_entries", integer("Show at most this many entries. Default 200.", 1)}});
     }},
    {"glob", tools_detail::glob,
     "Find files and directories by name pattern. Supports * and ? (within one path segment), "
     "[abc] / [a-z] / [!x] classes, and ** for any number of directories, e.g. \"**/*.cpp\" or "
     "\"src/**/test_*.py\". Matches are sorted, relative to the workspace root, directories end "
     "with \"/\". The .git directory is skipped and symlinked directories are not followed.",
     [] {
       return obj({{"pattern", str("Glob pattern, relative to 'path'.")},
                   {"path", str("Directory to search from, relative to the workspace root. "
                                "Default \".\".")},
                   {"max_results", integer("Show at most this many matches. Default 200.", 1)}},
                  {"pattern"});
     }},
    {"grep", tools_detail::grep,
     "Search file contents with a regular expression (RE2 syntax: like Perl/Python but without "
     "backreferences or lookaround). Searches a file or a directory recursively, skipping .git "
     "and binary files. Output lines look like \"path:line: text\" (context lines use \"-\"). "
     "^ and $ match at line starts and ends. Results are capped; use 'path' and 'glob' to narrow "
     "the search.",
     [] {
       return obj(
           {{"pattern", str("RE2 regular expression, e.g. \"class \\\\w+Session\" or "
                            "\"TODO|FIXME\". Escape regex metacharacters to match them literally.")},
            {"path", str("File or directory to search, relative to the workspace root. Default "
                         "\".\".")},
            {"glob", str("Only search files whose name matches this glob (e.g. \"*.hpp\"), or "
                         "whose workspace-relative path matches it when it contains a \"/\" "
                         "(e.g. \"src/**/*.cpp\").")},
            {"case_insensitive", boolean("Ignore case. Default false.")},
            {"max_matches", integer("Stop after this many matching lines in total. Default 100.",
                                    1)},
            {"max_per_file", integer("Show at most this many matching lines per file. Default "
                                     "20.", 1)},
            {"context", integer("Lines of context to show before and after each match (0-20). "
                                "Default 0.", 0)}},
           {"pattern"});
     }},
    {"write_file", tools_detail::write_file,
     "Create a file or replace its whole content. Parent directories are created. Prefer "
     "edit_file for changing part of an existing file.",
     [] {
       return obj({{"path", str("File path, relative to the workspace root.")},
                   {"content", str("The complete new content of the file.")}},
                  {"path", "content"});
     }},
    {"edit_file", tools_detail::edit_file,
     "Replace an exact piece of text in a file. old_string must match the file byte for byte "
     "(including indentation and line breaks) and must occur exactly once, unless replace_all is "
     "true. Include a few surrounding lines to make it unique. Read the file first.",
     [] {
       return obj({{"path", str("File path, relative to the workspace root.")},
                   {"old_string", str("Exact text to replace.")},
                   {"new_string", str("Text to put in its place.")},
                   {"replace_all", boolean("Replace every occurrence. Default false.")}},
                  {"path", "old_string", "new_string"});
     }},
    {"run_command", tools_detail::run_command,
     "Run a shell command (/bin/sh -c) in the workspace root, inside the sandbox (no network). "
     "stdout and stderr are merged; the result ends with the exit code. Long output keeps its "
     "beginning and end. The command and everything it started is killed at the timeout. "
     "No interactive input (stdin is empty).",
     [] {
       return obj({{"command", str("Shell command line, e.g. \"make -j4 test 2>&1 | tail -50\".")},
                   {"timeout_seconds", integer("Kill the command after this many seconds "
                                               "(1-3600). Default 120.", 1)},
                   {"max_output_bytes", integer("Keep at most this many bytes of output (first "
                                                "and last halves). Default: the tool result "
                                                "limit.", 64)}},
                  {"command"});
     }},
    {"git_status", tools_detail::git_status,
     "Show the working tree status (git status --short --branch): branch, staged, modified and "
     "untracked files.",
     [] { return obj(json::object()); }},
    {"git_log", tools_detail::git_log,
     "Show recent commits, one per line: short hash, date, author, subject.",
     [] {
       return obj({{"max_count", integer("Number of commits. Default 20.", 1)},
                   {"path", str("Only commits touching this file or directory.")},
                   {"rev", str("Start from this revision or range (e.g. \"main\", "
                               "\"v1.0..HEAD\"). Default HEAD.")}});
     }},
    {"git_show", tools_detail::git_show,
     "Show one commit (message, changed-file summary and patch), or a file at a revision with "
     "\"REV:path\".",
     [] {
       return obj({{"rev", str("Commit, branch, tag or REV:path, e.g. \"HEAD~1\" or "
                               "\"abc123:src/main.cpp\". Default HEAD.")}});
     }},
    {"git_diff", tools_detail::git_diff,
     "Show changes as a unified diff with a file summary: by default unstaged changes in the "
     "working tree; staged=true for the index against HEAD; rev to compare against a revision "
     "or between two (\"A..B\").",
     [] {
       return obj({{"rev", str("Revision or range to diff against, e.g. \"HEAD~3\" or "
                               "\"main..feature\".")},
                   {"path", str("Limit the diff to this file or directory.")},
                   {"staged", boolean("Show staged changes (git diff --cached). Default false.")}});
     }},
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
    if (const Tool* t = find_tool(n)) {
      out.push_back({{"name", t->name}, {"description", t->description},
                     {"input_schema", t->schema()}});
    }
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
