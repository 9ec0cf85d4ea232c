// The shared process runner (process/): output kept as head and tail or up to a cap, the poll loop
// over one or two pipes, a deadline that kills the program and its process group, a sink that stops
// it, the grace after exit, and the exit status or signal, for a forked pid and for a pidfd.
#include "process/runner.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "process/output.hpp"

namespace {

using namespace std::chrono_literals;

// /bin/sh -c script, in its own process group, stdout and stderr on two pipes (or merged).
struct Started {
  pid_t pid = -1;
  int out = -1, err = -1;
  ~Started() {
    if (out >= 0) ::close(out);
    if (err >= 0) ::close(err);
  }
};

void start(Started& s, const std::string& script, bool merged) {
  int o[2], e[2];
  REQUIRE(::pipe2(o, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(e, O_CLOEXEC) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(o[1], 1);
    ::dup2(merged ? o[1] : e[1], 2);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(o[1]);
  ::close(e[1]);
  s.pid = pid;
  s.out = o[0];
  if (merged)
    ::close(e[0]);
  else
    s.err = e[0];
}

// Alive and not a zombie.
bool running(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(st, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

auto into(std::string& s) {
  return [&s](std::string_view c) {
    s.append(c);
    return true;
  };
}

}  // namespace

TEST_CASE("HeadTailKeeper: everything under the cap; head, a count of what was left out, and tail over it") {
  process::HeadTailKeeper small(100);
  small.add("hello\n");
  bool cut = true;
  CHECK(small.finish(&cut) == "hello\n");
  CHECK_FALSE(cut);

  process::HeadTailKeeper k(20);
  std::string all;
  for (int i = 0; i < 100; ++i) all += static_cast<char>('a' + i % 26);
  k.add(std::string_view(all).substr(0, 37));
  k.add(std::string_view(all).substr(37));
  CHECK(k.total() == 100);
  std::string got = k.finish(&cut);
  CHECK(cut);
  CHECK(got == all.substr(0, 10) + "\n[... 80 bytes of output omitted ...]\n" + all.substr(90));
}

TEST_CASE("HeadTailKeeper: the tail starts on a UTF-8 character, and the count covers the bytes dropped") {
  process::HeadTailKeeper k(10);
  std::string e = "\xc3\xa9";  // é
  std::string text;
  for (int i = 0; i < 20; ++i) text += e;
  k.add(text);
  bool cut = false;
  std::string got = k.finish(&cut);
  CHECK(cut);
  // The last 5 bytes begin with a continuation byte, which is dropped (and counted as omitted).
  std::string end = "[... 31 bytes of output omitted ...]\n" + e + e;
  REQUIRE(got.size() > end.size());
  CHECK(got.substr(got.size() - end.size()) == end);
}

TEST_CASE("CappedBuffer: keeps the first cap bytes and says when a chunk did not fit") {
  process::CappedBuffer b(8);
  CHECK(b.add("abcd"));
  CHECK(b.add("efgh"));
  CHECK_FALSE(b.truncated());
  CHECK_FALSE(b.add("i"));
  CHECK(b.truncated());
  CHECK_FALSE(b.add("j"));
  CHECK(b.str() == "abcdefgh");
}

TEST_CASE("collect: two pipes kept apart, the exit status; a signal is reported as the signal") {
  Started s;
  start(s, "echo out; echo err >&2; exit 3", false);
  std::string out, err;
  process::Pipe pipes[2] = {{s.out, into(out)}, {s.err, into(err)}};
  auto o = process::collect({s.pid, -1, true}, pipes, {});
  CHECK(out == "out\n");
  CHECK(err == "err\n");
  CHECK(o.exit_code == 3);
  CHECK(o.term_signal == 0);
  CHECK_FALSE(o.timed_out);
  CHECK_FALSE(o.stopped);

  Started k;
  start(k, "kill -TERM $$", true);
  std::string ko;
  process::Pipe one[1] = {{k.out, into(ko)}};
  auto ok = process::collect({k.pid, -1, true}, one, {});
  CHECK(ok.term_signal == SIGTERM);
  CHECK(ok.exit_code == -1);
}

TEST_CASE("collect: a deadline kills a sleeping program and its whole group; twin: a quick one beats it") {
  Started s;
  start(s, "sleep 30 & echo $!; sleep 30", true);
  std::string out;
  process::Pipe pipes[1] = {{s.out, into(out)}};
  process::Limits lim;
  auto t0 = process::Clock::now();
  lim.deadline = t0 + 300ms;
  auto o = process::collect({s.pid, -1, true}, pipes, lim);
  auto took = process::Clock::now() - t0;
  CHECK(o.timed_out);
  CHECK(took >= 300ms);
  CHECK(took < 5s);
  CHECK(o.term_signal == SIGKILL);
  REQUIRE(!out.empty());
  pid_t background = std::stoi(out);
  CHECK_FALSE(running(s.pid));
  for (int i = 0; i < 100 && running(background); ++i) ::usleep(10000);
  CHECK_FALSE(running(background));  // the group's other member is gone too

  Started q;
  start(q, "echo quick", true);
  std::string qo;
  process::Pipe qp[1] = {{q.out, into(qo)}};
  process::Limits ql;
  ql.deadline = process::Clock::now() + 5s;
  auto qr = process::collect({q.pid, -1, true}, qp, ql);
  CHECK_FALSE(qr.timed_out);
  CHECK(qr.exit_code == 0);
  CHECK(qo == "quick\n");
}

TEST_CASE("collect: a sink that returns false stops the program; twin: a sink that accepts reads to the end") {
  Started s;
  start(s, "while :; do echo yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy; done", true);
  std::size_t seen = 0;
  int calls = 0;
  process::Pipe pipes[1] = {{s.out, [&](std::string_view c) {
                               ++calls;
                               seen += c.size();
                               return seen < 4096;
                             }}};
  auto t0 = process::Clock::now();
  auto o = process::collect({s.pid, -1, true}, pipes, {});
  CHECK(process::Clock::now() - t0 < 5s);
  CHECK(o.stopped);
  CHECK_FALSE(o.timed_out);
  CHECK(o.term_signal == SIGKILL);
  int calls_at_stop = calls;
  CHECK(calls_at_stop >= 1);

  Started t;
  start(t, "i=0; while [ $i -lt 300 ]; do echo yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy; i=$((i+1)); done", true);
  std::size_t all = 0;
  process::Pipe tp[1] = {{t.out, [&](std::string_view c) {
                            all += c.size();
                            return true;
                          }}};
  auto to = process::collect({t.pid, -1, true}, tp, {});
  CHECK_FALSE(to.stopped);
  CHECK(to.exit_code == 0);
  CHECK(all == 300u * 36u);
}

TEST_CASE("collect: after exit, a background holder of the pipe gets only the grace") {
  Started s;
  start(s, "sleep 20 & echo done", true);
  std::string out;
  process::Pipe pipes[1] = {{s.out, into(out)}};
  auto t0 = process::Clock::now();
  auto o = process::collect({s.pid, -1, true}, pipes, {});
  CHECK(process::Clock::now() - t0 < 3s);
  CHECK(o.exit_code == 0);
  CHECK(out == "done\n");
}

TEST_CASE("collect through a pidfd: the deadline kills with pidfd_send_signal, waitid reaps; twin: an exit") {
  Started s;
  start(s, "exec sleep 30", true);
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, s.pid, 0));
  REQUIRE(pidfd >= 0);
  std::string out;
  process::Pipe pipes[1] = {{s.out, into(out)}};
  process::Limits lim;
  lim.deadline = process::Clock::now() + 200ms;
  auto o = process::collect({s.pid, pidfd, false}, pipes, lim);
  ::close(pidfd);
  CHECK(o.timed_out);
  CHECK(o.term_signal == SIGKILL);
  CHECK_FALSE(running(s.pid));
  int st;
  CHECK(::waitpid(s.pid, &st, WNOHANG) < 0);  // already reaped through the pidfd

  Started e;
  start(e, "echo bye; exit 5", true);
  int efd = static_cast<int>(::syscall(SYS_pidfd_open, e.pid, 0));
  REQUIRE(efd >= 0);
  std::string eo;
  process::Pipe ep[1] = {{e.out, into(eo)}};
  auto eo2 = process::collect({e.pid, efd, false}, ep, {});
  ::close(efd);
  CHECK_FALSE(eo2.timed_out);
  CHECK(eo2.exit_code == 5);
  CHECK(eo == "bye\n");
}
