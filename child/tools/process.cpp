#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common.hpp"

extern char** environ;

namespace child::tools_detail {

namespace {

using Clock = std::chrono::steady_clock;

// CLOSE_RANGE_CLOEXEC (Linux 5.11); Debian 12's headers may lack it.
constexpr unsigned kCloseRangeCloexec = 1u << 2;

// Bytes the program wrote, kept as the first half and a rolling last half of the cap.
class OutputKeeper {
 public:
  explicit OutputKeeper(std::size_t cap) : head_cap_(cap - cap / 2), tail_cap_(cap / 2) {}

  void add(const char* p, std::size_t n) {
    total_ += n;
    if (head_.size() < head_cap_) {
      std::size_t k = std::min(n, head_cap_ - head_.size());
      head_.append(p, k);
      p += k;
      n -= k;
    }
    if (n == 0 || tail_cap_ == 0) return;
    tail_.append(p, n);
    if (tail_.size() > 2 * tail_cap_ + 65536) tail_.erase(0, tail_.size() - tail_cap_);
  }

  std::size_t total() const { return total_; }

  std::string finish(bool* cut) {
    *cut = total_ > head_.size() + tail_.size() ||
           (tail_.size() > tail_cap_);
    if (tail_.size() > tail_cap_) tail_.erase(0, tail_.size() - tail_cap_);
    if (!*cut) return head_ + tail_;
    std::size_t h = utf8_floor(head_, head_.size());
    std::size_t t = 0;
    while (t < tail_.size() && (static_cast<unsigned char>(tail_[t]) & 0xC0) == 0x80) ++t;
    std::size_t omitted = total_ - h - (tail_.size() - t);
    std::string out = head_.substr(0, h);
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += "[... " + std::to_string(omitted) + " bytes of output omitted ...]\n";
    out.append(tail_, t, std::string::npos);
    return out;
  }

 private:
  std::size_t head_cap_, tail_cap_;
  std::string head_, tail_;
  std::size_t total_ = 0;
};

void kill_group_and_reap(pid_t pgid) {
  ::kill(-pgid, SIGKILL);
  // Members of the group that were reparented to us (we may be a namespace's init) are reaped
  // here; others belong to whoever reaps them. Never block: a stuck process must not hang the child.
  for (int i = 0; i < 100; ++i) {
    int st;
    pid_t r = ::waitpid(-pgid, &st, WNOHANG);
    if (r < 0) return;  // ECHILD: nothing of ours left in the group
    if (r == 0) {
      ::usleep(2000);
      ::kill(-pgid, SIGKILL);
    }
  }
}

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
  OutputKeeper keep(std::max<std::size_t>(spec.max_output, 2));
  const auto deadline = start + spec.timeout;
  bool pipe_open = true, exited = false;
  Clock::time_point exited_at;
  int wstatus = 0;
  char buf[65536];
  for (;;) {
    if (!exited) {
      pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
      if (w == pid) {
        exited = true;
        exited_at = Clock::now();
      }
    }
    auto now = Clock::now();
    // After the program exits, background processes holding the pipe get a short grace.
    if (exited && (!pipe_open || now >= exited_at + std::chrono::milliseconds(200))) break;
    if (now >= deadline) {
      res.timed_out = true;
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    int wait_ms = static_cast<int>(std::min<long long>(left, exited ? 20 : 50));
    if (pipe_open) {
      pollfd p{out[0], POLLIN, 0};
      int pr = ::poll(&p, 1, wait_ms);
      if (pr < 0 && errno != EINTR) break;
      if (pr > 0) {
        ssize_t n = ::read(out[0], buf, sizeof buf);
        if (n > 0) {
          keep.add(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          pipe_open = false;
          // The usual end: output closed because the program exited; reap it without a delay.
          if (!exited) {
            pid_t w;
            do {
              w = ::waitpid(pid, &wstatus, WNOHANG);
            } while (w < 0 && errno == EINTR);
            if (w == pid) {
              exited = true;
              exited_at = Clock::now();
            }
          }
        }
      }
    } else {
      ::poll(nullptr, 0, std::min(wait_ms, 5));
    }
  }
  ::close(out[0]);
  if (!exited) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
  kill_group_and_reap(pid);

  res.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  res.output_bytes = keep.total();
  res.output = keep.finish(&res.output_cut);
  if (!res.timed_out) {
    if (WIFEXITED(wstatus)) res.exit_code = WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) res.term_signal = WTERMSIG(wstatus);
  }
  return res;
}

}  // namespace child::tools_detail
