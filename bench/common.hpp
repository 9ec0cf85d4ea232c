// Small helpers shared by the benchmarks: statistics, clocks, pipes, processes,
// line reading. Benchmark code only; nothing here is used by the supervisor.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

namespace bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

inline double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// CPU time of the calling thread (user + system), microseconds.
inline double thread_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// CPU time of this whole process (every thread: the supervisor's work runs on its pool too).
inline double process_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// CPU time of every waited-for descendant so far (user + system), microseconds.
inline double children_cpu_us() {
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  auto t = [](const timeval &v) { return static_cast<double>(v.tv_sec) * 1e6 + static_cast<double>(v.tv_usec); };
  return t(ru.ru_utime) + t(ru.ru_stime);
}

struct Stats {
  std::size_t n = 0;
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

// Nearest-rank percentiles.
inline Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    std::size_t rank = static_cast<std::size_t>(q * static_cast<double>(v.size()) + 0.999999);
    return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  s.n = v.size();
  s.p50 = at(0.50);
  s.p99 = at(0.99);
  s.min = v.front();
  s.max = v.back();
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  return s;
}

inline json to_json(const Stats &s) {
  return {{"n", s.n}, {"p50", s.p50}, {"p99", s.p99}, {"mean", s.mean}, {"min", s.min}, {"max", s.max}};
}

[[noreturn]] inline void fail_errno(const std::string &what) {
  throw std::system_error(errno, std::generic_category(), what);
}

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) fail_errno("pipe2");
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe &) = delete;
  Pipe &operator=(const Pipe &) = delete;
  void close_read() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void close_write() {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

inline void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno("write");
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Buffered line reader on a blocking fd.
class FdLines {
 public:
  explicit FdLines(int fd) : fd_(fd) {}
  // The next line without its '\n', or nullopt at EOF.
  std::optional<std::string> next() {
    for (;;) {
      std::size_t nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        std::string line = buf_.substr(pos_, nl - pos_);
        pos_ = nl + 1;
        if (pos_ > 65536) {
          buf_.erase(0, pos_);
          pos_ = 0;
        }
        return line;
      }
      char chunk[65536];
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  // Reads and drops everything up to EOF.
  void drain() {
    char chunk[65536];
    for (;;) {
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
    }
  }

 private:
  int fd_;
  std::string buf_;
  std::size_t pos_ = 0;
};

// Waits for `pid` (which must be > 0) and returns its wait status.
inline int reap(pid_t pid) {
  if (pid <= 0) throw std::logic_error("reap: bad pid");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail_errno("waitpid");
  }
  return status;
}

// Sends SIGKILL to one positive pid; never to 0 or -1.
inline void kill_one(pid_t pid) {
  if (pid > 0) ::kill(pid, SIGKILL);
}

// fork + execve with the given stdio fds (-1: /dev/null). Returns the pid.
inline pid_t spawn(const std::vector<std::string> &argv, const std::vector<std::string> &env, int in, int out, int err,
                   const char *cwd = nullptr) {
  std::vector<char *> args, envp;
  for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  for (const auto &e : env) envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) fail_errno("fork");
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDWR);
    int fds[3] = {in < 0 ? null : in, out < 0 ? null : out, err < 0 ? null : err};
    for (int i = 0; i < 3; ++i)
      if (::dup2(fds[i], i) < 0) ::_exit(126);
    if (cwd && ::chdir(cwd) != 0) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Rss and Pss of a process from /proc/PID/smaps_rollup, KiB (self when pid is
// 0).
struct Memory {
  double rss_kib = 0, pss_kib = 0;
};
inline Memory memory_of(pid_t pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/smaps_rollup")
                            : "/proc/" + std::to_string(pid) + "/smaps_rollup");
  Memory m;
  std::string key;
  double value;
  std::string unit;
  while (in >> key) {
    if (key == "Rss:" && in >> value >> unit)
      m.rss_kib = value;
    else if (key == "Pss:" && in >> value >> unit)
      m.pss_kib = value;
  }
  return m;
}

}  // namespace bench
