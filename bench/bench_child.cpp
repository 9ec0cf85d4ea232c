// bench_child: a protocol-v1 child for the benchmarks, run inside the sandbox
// like subagent-child.
//
//   bench_child pingpong N [--raw]   hello/welcome (skipped with --raw), then N
//   sequential
//                                    tool_request -> tool_decision round trips,
//                                    each followed by a tool_done; ends with a
//                                    final whose answer lists the round-trip
//                                    times in nanoseconds. Lines are encoded
//                                    before the timed loop, so the timed window
//                                    holds one write and the reads of one line.
//   bench_child stubborn [--raw]     hello/welcome (skipped with --raw), forks
//   a grandchild that
//                                    keeps stdout open, then both sleep and
//                                    ignore the supervisor. With --raw it
//                                    writes "r\n" once the grandchild exists.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace proto = protocol;

namespace {

std::int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void write_all(std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      std::_Exit(3);
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Reads stdin up to and including the next '\n'; bytes after it stay buffered
// for the next call.
class Lines {
public:
  std::string_view next() {
    if (consumed_) {
      buf_.erase(0, consumed_);
      consumed_ = 0;
    }
    for (;;) {
      std::size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        consumed_ = nl + 1;
        return std::string_view(buf_).substr(0, nl);
      }
      char chunk[65536];
      ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        std::_Exit(3); // the supervisor went away
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

private:
  std::string buf_;
  std::size_t consumed_ = 0;
};

void handshake(Lines &in) {
  write_all(
      proto::encode_line(proto::Hello{{proto::kVersion}, "bench-child/1"}));
  std::string_view welcome = in.next();
  if (welcome.find("\"welcome\"") == std::string_view::npos)
    std::_Exit(3);
}

std::string request_id(long i) {
  char id[24];
  std::snprintf(id, sizeof id, "t%07ld",
                i); // fixed width: every decision has the same size
  return id;
}

int pingpong(long n, bool raw) {
  Lines in;
  if (!raw)
    handshake(in);
  std::vector<std::string> requests, dones;
  requests.reserve(static_cast<std::size_t>(n));
  dones.reserve(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    std::string id = request_id(i);
    requests.push_back(proto::encode_line(proto::ToolRequest{
        id, "grep", {{"pattern", "TODO"}, {"path", "src"}}}));
    dones.push_back(proto::encode_line(proto::ToolDone{id, true, 120, ""}));
  }
  std::vector<std::int64_t> rtt(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    const std::int64_t t0 = now_ns();
    write_all(requests[static_cast<std::size_t>(i)]);
    std::string_view reply = in.next();
    rtt[static_cast<std::size_t>(i)] = now_ns() - t0;
    if (reply.find("\"allow\":true") == std::string_view::npos &&
        reply.find("\"decision\":\"allow\"") == std::string_view::npos) {
      std::fprintf(stderr, "bench_child: request %ld not allowed: %.*s\n", i,
                   static_cast<int>(reply.size()), reply.data());
      return 3;
    }
    write_all(dones[static_cast<std::size_t>(i)]);
  }
  std::string samples;
  for (std::int64_t v : rtt)
    samples += std::to_string(v) + " ";
  write_all(proto::encode_line(
      proto::Final{"pingpong done", samples, proto::json::object()}));
  return 0;
}

[[noreturn]] void stubborn(bool raw) {
  Lines in;
  if (!raw)
    handshake(in);
  pid_t pid = ::fork();
  if (pid < 0)
    std::_Exit(5);
  if (raw && pid > 0)
    write_all("r\n");
  for (;;)
    ::pause(); // the grandchild too: it holds stdout, so EOF there means it is
               // dead
}

} // namespace

int main(int argc, char **argv) {
  ::signal(SIGPIPE, SIG_DFL);
  const std::string mode = argc > 1 ? argv[1] : "";
  bool raw = false;
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--raw") == 0)
      raw = true;
  if (mode == "pingpong" && argc > 2)
    return pingpong(std::atol(argv[2]), raw);
  if (mode == "stubborn")
    stubborn(raw);
  std::fprintf(stderr,
               "usage: bench_child pingpong N [--raw] | stubborn [--raw]\n");
  return 64;
}
