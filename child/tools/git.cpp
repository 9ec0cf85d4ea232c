// Read-only git views for the reviewer preset: a fixed argv, no shell, validated arguments, no
// pager, and no external diff or textconv programs.
#include "common.hpp"
#include "process.hpp"

namespace child::tools_detail {

namespace {

constexpr std::size_t kMaxRev = 256;

std::string check_rev(const std::string& rev, const char* argname) {
  if (rev.empty()) throw ToolError("argument '" + std::string(argname) + "' is empty");
  if (rev.size() > kMaxRev) {
    throw ToolError("argument '" + std::string(argname) + "' is longer than " + std::to_string(kMaxRev) + " bytes");
  }
  if (rev[0] == '-') {
    throw ToolError("argument '" + std::string(argname) + "' may not start with '-' (got '" + rev +
                    "'); give a revision such as HEAD~1, a branch, a tag or a commit id");
  }
  for (unsigned char c : rev) {
    if (c < 0x20 || c == 0x7F) {
      throw ToolError("argument '" + std::string(argname) + "' contains a control character");
    }
  }
  return rev;
}

ToolOutput run_git(const ToolContext& ctx, const std::string& what, const std::vector<std::string>& args) {
  std::string git = find_executable("git");
  if (git.empty()) throw ToolError("git is not installed (not found on PATH)");
  const std::string ws = ctx.workspace.string();
  ProcessSpec spec;
  spec.argv = {git,  "--no-pager",
               "-c", "core.pager=cat",
               "-c", "core.fsmonitor=false",
               "-c", "core.untrackedCache=false",
               "-c", "color.ui=false",
               "-c", "safe.directory=" + ws,
               "-C", ws};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = current_environment({"GIT_", "PAGER=", "LESS"});
  // Repository discovery stops at the workspace: a repository above it is out of scope.
  spec.env.push_back("GIT_CEILING_DIRECTORIES=" + ctx.workspace.parent_path().string());
  for (const char* e : {"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_OPTIONAL_LOCKS=0",
                        "GIT_TERMINAL_PROMPT=0", "GIT_PAGER=cat", "PAGER=cat", "GIT_NO_REPLACE_OBJECTS=1"}) {
    spec.env.emplace_back(e);
  }
  spec.cwd = ws;
  spec.timeout = std::chrono::seconds(60);
  spec.max_output = ctx.result_cap > 400 ? ctx.result_cap - 200 : ctx.result_cap / 2;
  ProcessResult r = run_process(spec);

  ToolOutput out;
  out.content = r.output;
  if (r.timed_out) {
    out.ok = false;
    out.content += "\n[git " + what + " timed out after 60 s]\n";
    return out;
  }
  if (r.exit_code != 0) {
    out.ok = false;
    out.content = "git " + what + " failed (exit " + std::to_string(r.term_signal ? 128 + r.term_signal : r.exit_code) +
                  "): " + out.content;
    return out;
  }
  if (out.content.empty()) out.content = "(no output from git " + what + ")\n";
  if (r.output_cut) {
    out.content += "[git output was " + std::to_string(r.output_bytes) +
                   " bytes; showing the first and last part. Narrow it with 'path']\n";
  }
  return out;
}

std::string rel_path_arg(const ToolContext& ctx, const Args& a) {
  auto p = a.opt_str("path");
  if (!p) return {};
  return resolve_path(ctx, *p, "path").rel;
}

}  // namespace

ToolOutput git_status(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  return run_git(ctx, "status", {"status", "--short", "--branch", "--untracked-files=normal"});
}

ToolOutput git_log(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  std::int64_t n = a.integer("max_count", 20, 1, 1000);
  std::string path = rel_path_arg(ctx, a);
  std::vector<std::string> argv = {"log", "--no-color", "--max-count=" + std::to_string(n), "--date=short",
                                   "--format=%h %ad %an: %s"};
  if (auto rev = a.opt_str("rev")) {
    argv.push_back("--end-of-options");
    argv.push_back(check_rev(*rev, "rev"));
  }
  argv.push_back("--");
  if (!path.empty()) argv.push_back(path);
  return run_git(ctx, "log", argv);
}

ToolOutput git_show(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  std::string rev = check_rev(a.opt_str("rev").value_or("HEAD"), "rev");
  return run_git(
      ctx, "show",
      {"show", "--no-color", "--no-ext-diff", "--no-textconv", "--stat", "--patch", "--end-of-options", rev});
}

ToolOutput git_diff(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  bool staged = a.boolean("staged", false);
  std::string path = rel_path_arg(ctx, a);
  std::vector<std::string> argv = {"diff", "--no-color", "--no-ext-diff", "--no-textconv", "--stat", "--patch"};
  if (staged) argv.push_back("--cached");
  if (auto rev = a.opt_str("rev")) {
    argv.push_back("--end-of-options");
    argv.push_back(check_rev(*rev, "rev"));
  }
  argv.push_back("--");
  if (!path.empty()) argv.push_back(path);
  return run_git(ctx, "diff", argv);
}

}  // namespace child::tools_detail
