// The later-execution paths of a writer's workspace: which exist, their snapshot, the repository's
// core.hooksPath; and where the state directory is by default. Part of the small library the lean
// `sandbox` command links (supervisor/CMakeLists.txt: subagent_held).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <stdexcept>

#include "workspace/git_step.hpp"
#include "workspace/later_execution.hpp"

namespace supervisor {
namespace fs = std::filesystem;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string home() { return env_or("HOME", "/root"); }

std::string first_line(const std::string& s, const std::string& what) {
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) return l;
  throw std::runtime_error(what + ": git printed nothing");
}

std::string identity(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return "";
  return std::to_string(st.st_mode) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

fs::path default_workspace_state_dir() {
  if (const char* s = std::getenv("SUBAGENT_STATE_DIR"); s && *s) return s;
  return fs::path(env_or("XDG_STATE_HOME", home() + "/.local/state")) / "subagent-supervisor";
}

// --- later-execution paths ---

bool is_later_execution(const std::string& rel, const std::vector<std::string>& list) {
  const fs::path p = fs::path(rel).lexically_normal();
  for (const auto& e : list) {
    if (e.rfind("**/", 0) == 0) {
      const std::string name = e.substr(3);
      for (const auto& part : p)
        if (part == name) return true;
    } else {
      const fs::path entry = fs::path(e).lexically_normal();
      auto r = p.lexically_relative(entry);
      if (!r.empty() && *r.begin() != "..") return true;
    }
  }
  return false;
}

std::vector<std::string> find_later_execution(const fs::path& workspace, const std::vector<std::string>& list,
                                              std::size_t max_entries, bool* complete) {
  std::set<std::string> found;
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : list) {
    if (e.rfind("**/", 0) == 0) {
      names.insert(e.substr(3));
    } else if (fs::exists(fs::symlink_status(workspace / e, ec))) {
      found.insert(fs::path(e).lexically_normal().generic_string());
    }
  }
  bool done = true;
  if (!names.empty()) {
    std::size_t seen = 0;
    for (auto it = fs::recursive_directory_iterator(workspace, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (++seen > max_entries) {
        done = false;
        break;
      }
      if (names.count(it->path().filename().string())) {
        found.insert(it->path().lexically_relative(workspace).generic_string());
        if (it->symlink_status().type() == fs::file_type::directory) it.disable_recursion_pending();
      }
    }
  }
  if (complete) *complete = done;
  return {found.begin(), found.end()};
}

LaterExecutionSnapshot snapshot_later_execution(const fs::path& workspace, const std::vector<std::string>& list,
                                                const std::vector<std::string>& shallow) {
  LaterExecutionSnapshot s;
  for (const auto& rel : find_later_execution(workspace, list, 200000, &s.complete)) {
    s.entries[rel] = identity(workspace / rel);
    if (std::find(shallow.begin(), shallow.end(), rel) != shallow.end()) continue;
    std::error_code ec;
    // What lies beneath a matched directory, too (bounded): a file added to an absent-at-start
    // directory or to one a policy did not protect.
    std::size_t n = 0;
    if (fs::is_directory(fs::symlink_status(workspace / rel, ec)))
      for (auto it =
               fs::recursive_directory_iterator(workspace / rel, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator() && ++n < 10000; it.increment(ec))
        s.entries[it->path().lexically_relative(workspace).generic_string()] = identity(it->path());
  }
  return s;
}

std::vector<std::string> later_execution_changes(const LaterExecutionSnapshot& before,
                                                 const LaterExecutionSnapshot& after) {
  std::vector<std::string> out;
  for (const auto& [p, id] : after.entries) {
    auto it = before.entries.find(p);
    if (it == before.entries.end() || it->second != id) out.push_back(p);
  }
  for (const auto& [p, id] : before.entries)
    if (!after.entries.count(p)) out.push_back(p);
  std::sort(out.begin(), out.end());
  return out;
}

std::string hooks_path_inside(const fs::path& workspace) {
  fs::path top;
  fs::path git_dir = find_git_dir(workspace, &top);
  if (git_dir.empty()) return "";
  GitStep s;
  s.what = "git config core.hooksPath";
  s.git_dir = git_dir;
  s.work_tree = top;
  // run_git's own -c core.hooksPath=/dev/null would shadow the answer: ask the files only.
  s.args = {"config", "--local", "--get", "core.hooksPath"};
  GitResult r;
  try {
    r = run_git(s);
  } catch (const std::exception&) {
    return "";
  }
  if (r.code != 0) return "";
  fs::path hooks = first_line(r.out, s.what);
  if (hooks.is_relative()) hooks = top / hooks;  // git resolves a relative hooksPath from the top
  auto rel = hooks.lexically_normal().lexically_relative(fs::weakly_canonical(workspace));
  if (rel.empty() || *rel.begin() == "..") return "";
  return rel.generic_string();
}

}  // namespace supervisor
