// Small helpers shared by the tests: temporary directories, paths of the built programs, /proc scans.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proc_scan.hpp"

namespace test {

namespace fs = std::filesystem;

inline fs::path bin(const std::string& name) { return fs::path(SUBAGENT_BIN_DIR) / name; }
inline fs::path program(const std::string& name) { return fs::path(SUBAGENT_TEST_PROGRAM_DIR) / name; }
inline fs::path source(const std::string& rel) { return fs::path(SUBAGENT_SOURCE_DIR) / rel; }
inline fs::path policy_dir() { return source("policies"); }

// A directory under /tmp, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "subagent-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  // Writes `content` to `rel` (creating parent directories); returns the absolute path.
  std::string write(const std::string& rel, const std::string& content) const {
    fs::path p = path_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

 private:
  fs::path path_;
};

// A copy of subagent-child under a name no other test uses (tests run in parallel), so a /proc scan
// for survivors counts only this test's children. Returns the copy's path inside `dir`.
inline fs::path private_child(const TempDir& dir) {
  fs::path p = dir.path() / ("sc" + std::to_string(::getpid()));
  fs::copy_file(bin("subagent-child"), p, fs::copy_options::overwrite_existing);
  // Readable and executable by others: under a root supervisor the child runs as an id of its own.
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                         fs::perms::others_exec);
  return p;
}

struct RunResult {
  int code = -1;    // exit code, or 128+signal
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv (argv[0] is a path) with stdin from /dev/null, or from `input` when given.
// In a forked child: chdir to `cwd` and execv argv (exit 126 when the chdir fails, 127 when the exec does).
[[noreturn]] inline void exec_in(const fs::path& cwd, const std::vector<std::string>& argv) {
  if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

inline RunResult run(const std::vector<std::string>& argv, const std::string& input = "",
                     const fs::path& cwd = SUBAGENT_SOURCE_DIR) {
  TempDir io;
  const std::string in = io.write("in", input), out = (io.path() / "out").string(), err = (io.path() / "err").string();
  pid_t pid = ::fork();
  if (pid == 0) {
    int i = ::open(in.c_str(), O_RDONLY), o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
        e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(i, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    exec_in(cwd, argv);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Runs argv with stdout and stderr on a pseudo-terminal (raw mode: no \n -> \r\n translation) and
// stdin on /dev/null; returns everything the terminal received.
inline RunResult run_on_terminal(const std::vector<std::string>& argv, const fs::path& cwd = SUBAGENT_SOURCE_DIR) {
  int master = -1;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    struct termios t;
    if (::tcgetattr(1, &t) == 0) {
      ::cfmakeraw(&t);
      ::tcsetattr(1, TCSANOW, &t);
    }
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    exec_in(cwd, argv);
  }
  RunResult r;
  if (pid < 0) {
    r.code = -1;
    return r;
  }
  char buf[4096];
  ssize_t n;
  while ((n = ::read(master, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) r.out.append(buf, static_cast<std::size_t>(n));
  ::close(master);  // EIO once every holder of the terminal is gone
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace test
