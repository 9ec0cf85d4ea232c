#include "process/runner.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace process {

namespace {

// The program's end, however it is watched.
struct Exit {
  bool seen = false;
  Clock::time_point at;
  int exit_code = -1;
  int term_signal = 0;
};

void record_wait_status(Exit& e, int wstatus) {
  e.seen = true;
  e.at = Clock::now();
  if (WIFEXITED(wstatus)) e.exit_code = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) e.term_signal = WTERMSIG(wstatus);
}

void record_siginfo(Exit& e, const siginfo_t& info) {
  e.seen = true;
  e.at = Clock::now();
  if (info.si_code == CLD_EXITED)
    e.exit_code = info.si_status;
  else
    e.term_signal = info.si_status;
}

// Reaps the program if it has ended (block: wait for it).
void try_reap(const Program& p, Exit& e, bool block) {
  if (e.seen) return;
  if (p.pidfd >= 0) {
    siginfo_t info{};
    int r;
    do {
      r = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(p.pidfd), &info, WEXITED | (block ? 0 : WNOHANG));
    } while (r != 0 && errno == EINTR);
    if (r == 0 && info.si_pid != 0) record_siginfo(e, info);
    return;
  }
  int st = 0;
  pid_t w;
  do {
    w = ::waitpid(p.pid, &st, block ? 0 : WNOHANG);
  } while (w < 0 && errno == EINTR);
  if (w == p.pid) record_wait_status(e, st);
}

}  // namespace

void kill(const Program& p) noexcept {
  if (p.pidfd >= 0)
    (void)::syscall(SYS_pidfd_send_signal, p.pidfd, SIGKILL, nullptr, 0);
  else if (p.pid > 0)
    (void)::kill(p.group ? -p.pid : p.pid, SIGKILL);
}

void kill_group_and_reap(pid_t pgid) noexcept {
  ::kill(-pgid, SIGKILL);
  // Members of the group that were reparented to us (we may be a namespace's init) are reaped
  // here; others belong to whoever reaps them. Never block: a stuck process must not hang us.
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

Outcome collect(const Program& p, std::span<Pipe> pipes, const Limits& limits) {
  Outcome out;
  Exit ex;
  std::vector<bool> open(pipes.size(), true), muted(pipes.size(), false);
  std::size_t open_count = pipes.size();
  std::vector<pollfd> fds;
  std::vector<std::size_t> which;  // fds[i] belongs to pipes[which[i]]
  fds.reserve(pipes.size() + 1);
  which.reserve(pipes.size());
  static thread_local char buf[65536];
  for (;;) {
    try_reap(p, ex, false);
    auto now = Clock::now();
    // After the program exits, background processes holding a pipe get a short grace.
    if (ex.seen && (open_count == 0 || now >= ex.at + limits.grace)) break;
    if (limits.deadline && now >= *limits.deadline) {
      out.timed_out = true;
      break;
    }
    // A pidfd wakes poll when the program ends; a bare pid is checked every 50 ms.
    long long wait_ms = p.pidfd >= 0 ? -1 : 50;
    if (ex.seen) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ex.at + limits.grace - now).count() + 1;
      wait_ms = p.pidfd >= 0 ? left : std::min<long long>(left, 20);
    }
    if (limits.deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*limits.deadline - now).count() + 1;
      wait_ms = wait_ms < 0 ? left : std::min<long long>(wait_ms, left);
    }
    fds.clear();
    which.clear();
    for (std::size_t i = 0; i < pipes.size(); ++i) {
      if (!open[i]) continue;
      fds.push_back({pipes[i].fd, POLLIN, 0});
      which.push_back(i);
    }
    if (p.pidfd >= 0 && !ex.seen) fds.push_back({p.pidfd, POLLIN, 0});
    if (open_count == 0 && p.pidfd < 0) {
      // Output closed but the program has not been reaped yet: look again shortly.
      ::poll(nullptr, 0, static_cast<int>(std::min<long long>(wait_ms, 5)));
      continue;
    }
    int pr = ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) continue;
    for (std::size_t k = 0; k < which.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      std::size_t i = which[k];
      ssize_t n = ::read(pipes[i].fd, buf, sizeof buf);
      if (n > 0) {
        if (muted[i]) continue;
        if (!pipes[i].sink(std::string_view(buf, static_cast<std::size_t>(n)))) {
          muted[i] = true;
          if (!out.stopped) kill(p);
          out.stopped = true;
        }
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        open[i] = false;
        // The usual end: output closed because the program exited; reap it without a delay.
        if (--open_count == 0) try_reap(p, ex, false);
      }
    }
  }
  if (!ex.seen) {
    kill(p);
    try_reap(p, ex, true);
  }
  if (p.group && p.pid > 0) kill_group_and_reap(p.pid);
  out.exit_code = ex.exit_code;
  out.term_signal = ex.term_signal;
  return out;
}

}  // namespace process
