#include "process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common.hpp"
#include "process/output.hpp"
#include "process/runner.hpp"

extern char** environ;

namespace child::tools_detail {

namespace {

using Clock = std::chrono::steady_clock;

// CLOSE_RANGE_CLOEXEC (Linux 5.11); Debian 12's headers may lack it.
constexpr unsigned kCloseRangeCloexec = 1u << 2;

}  // namespace

std::vector<std::string> current_environment(const std::vector<std::string>& drop_prefixes) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view v(*e);
    bool drop = false;
    for (const auto& p : drop_prefixes) drop = drop || v.rfind(p, 0) == 0;
    if (!drop) env.emplace_back(v);
  }
  return env;
}

std::string find_executable(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/bin:/bin";
  std::size_t i = 0;
  while (i <= dirs.size()) {
    std::size_t j = dirs.find(':', i);
    if (j == std::string::npos) j = dirs.size();
    std::string dir = dirs.substr(i, j - i);
    if (!dir.empty() && dir[0] == '/') {
      std::string cand = dir + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    i = j + 1;
  }
  return {};
}

ProcessResult run_process(const ProcessSpec& spec) {
  // Everything the child needs is built before fork.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2], status[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw ToolError(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(status, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw ToolError(std::string("pipe: ") + std::strerror(err));
  }
  const auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {out[0], out[1], status[0], status[1]}) ::close(fd);
    throw ToolError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only; leave through _exit.
    struct {
      int step;
      int err;
    } rec{0, 0};
    ::setpgid(0, 0);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGCHLD}) ::signal(sig, SIG_DFL);
    // The agent's protocol pipe must not reach a model-chosen command, or it could forge
    // messages to the supervisor: every fd above 2 goes at exec.
    if (::syscall(SYS_close_range, 3u, ~0u, kCloseRangeCloexec) != 0) {
      for (int fd = 3; fd < 65536; ++fd) {
        if (fd != status[1]) ::close(fd);
      }
    }
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0 && devnull != 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    } else if (devnull < 0) {
      ::close(0);
    }
    if (::dup2(out[1], 1) < 0 || ::dup2(out[1], 2) < 0) {
      rec = {1, errno};
    } else if (::chdir(spec.cwd.c_str()) != 0) {
      rec = {2, errno};
    } else {
      ::execve(argv[0], argv.data(), envp.data());
      rec = {3, errno};
    }
    ssize_t ignored = ::write(status[1], &rec, sizeof rec);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent, so a kill right away cannot miss the group
  ::close(out[1]);
  ::close(status[1]);

  struct {
    int step;
    int err;
  } rec{0, 0};
  ssize_t r;
  do {
    r = ::read(status[0], &rec, sizeof rec);
  } while (r < 0 && errno == EINTR);
  ::close(status[0]);
  if (r == static_cast<ssize_t>(sizeof rec)) {
    ::close(out[0]);
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    const char* what = rec.step == 2 ? "cannot enter directory '" : "cannot run '";
    std::string subject = rec.step == 2 ? spec.cwd : spec.argv[0];
    throw ToolError(what + subject + "': " + std::strerror(rec.err));
  }

  ProcessResult res;
  process::HeadTailKeeper keep(spec.max_output);
  process::Pipe pipes[1] = {{out[0], [&keep](std::string_view chunk) {
                               keep.add(chunk);
                               return true;
                             }}};
  process::Limits limits;
  limits.deadline = start + spec.timeout;
  process::Outcome o = process::collect({pid, -1, true}, pipes, limits);
  ::close(out[0]);

  res.timed_out = o.timed_out;
  res.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  res.output_bytes = keep.total();
  res.output = keep.finish(&res.output_cut);
  if (!res.timed_out) {
    res.exit_code = o.exit_code;
    res.term_signal = o.term_signal;
  }
  return res;
}

}  // namespace child::tools_detail
