#include "interpreter.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace sandbox::detail {

namespace fs = std::filesystem;

namespace {

// The "#!" line's interpreter and its first argument (the kernel passes the rest as one string).
bool shebang(const std::string& program, std::string& interp, std::string& arg) {
  std::ifstream in(program, std::ios::binary);
  if (!in) return false;
  char magic[2] = {};
  if (!in.read(magic, 2) || magic[0] != '#' || magic[1] != '!') return false;
  std::string line;
  std::getline(in, line);
  if (line.size() > 255) line.resize(255);  // BINPRM_BUF_SIZE: the kernel reads no further
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::istringstream words(line);
  words >> interp;
  std::getline(words, arg);
  auto b = arg.find_first_not_of(" \t");
  arg = b == std::string::npos ? std::string() : arg.substr(b);
  return !interp.empty();
}

std::string real(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::canonical(p, ec);
  return ec ? std::string() : r.string();
}

std::string on_path(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return real(name);
  std::istringstream dirs(path_env);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return real(candidate);
  }
  return "";
}

bool covered(const std::string& path, const std::vector<std::string>& roots) {
  for (const auto& r : roots) {
    if (path == r) return true;
    const std::string dir = r.back() == '/' ? r : r + "/";
    if (path.rfind(dir, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> script_interpreters(const std::string& program, const std::string& path_env) {
  std::vector<std::string> out;
  std::string current = program;
  for (int depth = 0; depth < 4; ++depth) {
    std::string interp, arg;
    if (!shebang(current, interp, arg)) break;
    const std::string resolved = real(interp);
    if (resolved.empty()) break;
    out.push_back(resolved);
    if (fs::path(resolved).filename() == "env" && !arg.empty()) {
      // "#!/usr/bin/env python3" (or "env -S python3 -u"): env execs the first word that is no option.
      std::istringstream words(arg);
      std::string w;
      while (words >> w && w.front() == '-') {
      }
      if (!w.empty() && w.front() != '-') {
        const std::string cmd = on_path(w, path_env);
        if (!cmd.empty()) out.push_back(cmd);
      }
      break;
    }
    current = resolved;
  }
  return out;
}

std::string exec_refusal_hint(const std::string& program, const std::vector<std::string>& interpreters,
                              const std::vector<std::string>& exec_paths, bool policy_names_interpreter) {
  const std::string self = real(program).empty() ? program : real(program);
  if (!covered(self, exec_paths) && !covered(program, exec_paths))
    return "'" + program + "' is not under any sandbox.filesystem.execute path of the policy";
  struct stat st {};
  if (::stat(program.c_str(), &st) == 0 && !(st.st_mode & 0111))
    return "'" + program + "' has no execute permission (chmod +x it)";
  for (const auto& i : interpreters) {
    if (covered(i, exec_paths)) continue;
    std::string hint = "'" + program + "' is a script and its interpreter '" + i +
                       "' (from its '#!' line) is not under any sandbox.filesystem.execute path";
    if (!policy_names_interpreter)
      hint += "; allow it with \"${interpreter}\" in the policy's sandbox.filesystem.execute (policies/README.md)";
    return hint;
  }
  return "";
}

}  // namespace sandbox::detail
