// bench_floor_loop: the floor of the spawn-load benchmark, run beside the supervisor in the same run.
//
//   bench_floor_loop SECONDS BENCH_CHILD
//
// A trivial epoll loop in a process of its own: a 2 ms timer (how late each expiry runs is its
// lateness, computed as the supervisor's LatenessProbe does) and one unsandboxed
// `BENCH_CHILD paced SECONDS 1000 --raw` whose tool requests it answers with a prepared decision,
// nothing decoded, checked or recorded. It allocates nothing per event, forks nothing after the
// start and holds no locks: whatever makes it late while eight children spawn is the machine (two
// CPUs shared with the children's start-up), not a broker. When the child ends, it prints two lines
// on stdout: "late" followed by DUE_US:LATE_US pairs (CLOCK_MONOTONIC, the supervisor's
// steady_clock), then the child's final line verbatim (its answer lists START_NS:RTT_NS pairs).
#include <fcntl.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace {

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "bench_floor_loop: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("write");
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

void arm(int tfd, std::int64_t due_ns) {
  itimerspec at{};
  at.it_value.tv_sec = due_ns / 1'000'000'000;
  at.it_value.tv_nsec = due_ns % 1'000'000'000;
  if (::timerfd_settime(tfd, TFD_TIMER_ABSTIME, &at, nullptr) != 0) die("timerfd_settime");
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bench_floor_loop SECONDS BENCH_CHILD\n");
    return 64;
  }
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) die("pipe2");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], STDOUT_FILENO);
  std::string seconds = argv[1];
  char *child_argv[] = {
      argv[2], const_cast<char *>("paced"), seconds.data(), const_cast<char *>("1000"), const_cast<char *>("--raw"),
      nullptr};
  char *child_env[] = {const_cast<char *>("PATH=/usr/bin:/bin"), nullptr};
  pid_t pid = -1;
  if ((errno = ::posix_spawn(&pid, argv[2], &fa, nullptr, child_argv, child_env)) != 0) die("posix_spawn");
  posix_spawn_file_actions_destroy(&fa);
  ::close(to_child[0]);
  ::close(from_child[1]);

  std::string decision = protocol::encode_line(protocol::ToolDecision{"t0000000", true, "allowed"});
  const std::size_t id_at = decision.find("t0000000");

  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  const int tfd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (ep < 0 || tfd < 0) die("epoll/timerfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = tfd;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev) != 0) die("epoll_ctl");
  ev.data.fd = from_child[0];
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, from_child[0], &ev) != 0) die("epoll_ctl");

  const double secs = std::atof(argv[1]);
  std::vector<std::int64_t> samples;  // due, late (ns), in pairs
  samples.reserve(static_cast<std::size_t>(secs * 1000) + 64);
  std::int64_t due = now_ns() + 2'000'000;
  arm(tfd, due);

  std::string buf, final_line;
  buf.reserve(1 << 16);
  std::vector<char> chunk(1 << 16);
  bool open = true;
  while (open) {
    epoll_event got[2];
    const int n = ::epoll_wait(ep, got, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      if (got[i].data.fd == tfd) {
        std::uint64_t expiries;
        if (::read(tfd, &expiries, sizeof expiries) < 0 && errno != EAGAIN) die("read timerfd");
        const std::int64_t now = now_ns();
        samples.push_back(due);
        samples.push_back(now - due);
        due = std::max(due + 2'000'000, now);
        arm(tfd, due);
        continue;
      }
      const ssize_t r = ::read(from_child[0], chunk.data(), chunk.size());
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        open = false;
        break;
      }
      const std::size_t scanned = buf.size();
      buf.append(chunk.data(), static_cast<std::size_t>(r));
      std::size_t from = 0, nl = buf.find('\n', scanned);
      for (; nl != std::string::npos; from = nl + 1, nl = buf.find('\n', from)) {
        const std::string_view line(buf.data() + from, nl - from);
        if (line.find("\"tool_request\"") != std::string_view::npos) {
          const std::size_t at = line.find("\"id\":\"");
          if (at != std::string_view::npos) decision.replace(id_at, 8, line.substr(at + 6, 8));
          write_all(to_child[1], decision);
        } else if (line.find("\"final\"") != std::string_view::npos) {
          final_line.assign(line);
        }
      }
      buf.erase(0, from);
    }
  }
  ::close(to_child[1]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || final_line.empty()) {
    std::fprintf(stderr, "bench_floor_loop: the paced child failed (status %d)\n", status);
    return 3;
  }
  std::string out = "late";
  for (std::size_t i = 0; i + 1 < samples.size(); i += 2)
    out += " " + std::to_string(samples[i] / 1000) + ":" + std::to_string(samples[i + 1] / 1000);
  out += "\n" + final_line + "\n";
  write_all(STDOUT_FILENO, out);
  return 0;
}
