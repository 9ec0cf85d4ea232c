// Collecting a started program: its pipes polled until they close (one sink per pipe, which may
// stop the program), a deadline, a short grace after it exits for background processes that still
// hold a pipe, then kill and reaping. Whoever started the program (fork/execve in the child's tools,
// sandbox::launch for the supervisor's git steps) hands it over as a Program.
//
// Syscalls, so that a seccomp filter can allow them: poll, read, wait4 (waitpid), kill, nanosleep, and
// for a pidfd also waitid and pidfd_send_signal. Single-threaded: collect blocks until the program is
// gone (and its process group, when it leads one).
//
// Errors: none thrown by collect; a poll failure ends the collection like a deadline would, without
// timed_out (the program is killed and reaped).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

namespace process {

using Clock = std::chrono::steady_clock;

struct Program {
  pid_t pid = -1;      // a child of ours; reaped with waitpid when there is no pidfd
  int pidfd = -1;      // when >= 0: signalled with pidfd_send_signal, reaped with waitid(P_PIDFD); not owned
  bool group = false;  // pid leads its own process group: kills reach the whole group (kill(-pid))
};

// A pipe's read end (owned by the caller) and where its bytes go. A sink that returns false stops
// the program (SIGKILL); that pipe's later bytes are read and dropped.
struct Pipe {
  int fd = -1;
  std::function<bool(std::string_view)> sink;
};

struct Limits {
  std::optional<Clock::time_point> deadline;  // none: as long as it runs
  std::chrono::milliseconds grace{200};       // after exit, while something else still holds a pipe
};

struct Outcome {
  bool timed_out = false;  // the deadline passed first: the program was killed
  bool stopped = false;    // a sink returned false: the program was killed
  int exit_code = -1;      // when it exited
  int term_signal = 0;     // when a signal ended it (SIGKILL after a stop or the deadline)
};

Outcome collect(const Program& program, std::span<Pipe> pipes, const Limits& limits);

// SIGKILL to the program: through its pidfd, else to its group (when it leads one) or its pid.
void kill(const Program& program) noexcept;

// SIGKILL to the process group `pgid`, reaping those of its members that are our children (we may
// be a namespace's init and have inherited them). Never blocks long: a stuck process must not hang us.
void kill_group_and_reap(pid_t pgid) noexcept;

}  // namespace process
