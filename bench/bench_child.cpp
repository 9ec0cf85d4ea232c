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
//   bench_child brief                hello/welcome, then does what the task's
//                                    brief says (one hub starts every child
//                                    with the same argv):
//                                    "pingpong N" as above, or "paced SECONDS
//                                    GAP_US": round trips GAP_US apart for
//                                    SECONDS, the final's answer listing
//                                    "START_NS:RTT_NS" pairs (START_NS is
//                                    CLOCK_MONOTONIC, the supervisor's
//                                    steady_clock: no time namespace); or
//                                    "flood SECONDS BYTES": grep requests
//                                    with a pattern of BYTES, each sent as
//                                    soon as the last is answered, for
//                                    SECONDS (a hostile sibling).
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(3);
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
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) std::_Exit(3);  // the supervisor went away
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  std::string buf_;
  std::size_t consumed_ = 0;
};

void handshake(Lines &in) {
  write_all(proto::encode_line(proto::Hello{{proto::kVersion}, "bench-child/1"}));
  std::string_view welcome = in.next();
  if (welcome.find("\"welcome\"") == std::string_view::npos) std::_Exit(3);
}

std::string request_id(long i) {
  char id[24];
  std::snprintf(id, sizeof id, "t%07ld",
                i);  // fixed width: every decision has the same size
  return id;
}

int pingpong_after_handshake(Lines &in, long n);

int pingpong(long n, bool raw) {
  Lines in;
  if (!raw) handshake(in);
  return pingpong_after_handshake(in, n);
}

int pingpong_after_handshake(Lines &in, long n) {
  std::vector<std::string> requests, dones;
  requests.reserve(static_cast<std::size_t>(n));
  dones.reserve(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    std::string id = request_id(i);
    requests.push_back(proto::encode_line(proto::ToolRequest{id, "grep", {{"pattern", "TODO"}, {"path", "src"}}}));
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
      std::fprintf(stderr, "bench_child: request %ld not allowed: %.*s\n", i, static_cast<int>(reply.size()),
                   reply.data());
      return 3;
    }
    write_all(dones[static_cast<std::size_t>(i)]);
  }
  std::string samples;
  for (std::int64_t v : rtt) samples += std::to_string(v) + " ";
  write_all(proto::encode_line(proto::Final{"pingpong done", samples, proto::json::object()}));
  return 0;
}

bool allowed(std::string_view reply) {
  return reply.find("\"allow\":true") != std::string_view::npos ||
         reply.find("\"decision\":\"allow\"") != std::string_view::npos;
}

// Round trips `gap_us` apart for `seconds`; each sample is its start time and
// its duration, both in nanoseconds.
int paced(Lines &in, double seconds, long gap_us) {
  std::string samples;
  const std::int64_t end = now_ns() + static_cast<std::int64_t>(seconds * 1e9);
  for (long i = 0; now_ns() < end; ++i) {
    const std::string id = request_id(i);
    const std::string request =
        proto::encode_line(proto::ToolRequest{id, "grep", {{"pattern", "TODO"}, {"path", "src"}}});
    const std::string done = proto::encode_line(proto::ToolDone{id, true, 120, ""});
    const std::int64_t t0 = now_ns();
    write_all(request);
    std::string_view reply = in.next();
    const std::int64_t rtt = now_ns() - t0;
    if (!allowed(reply)) {
      std::fprintf(stderr, "bench_child: request %ld not allowed: %.*s\n", i, static_cast<int>(reply.size()),
                   reply.data());
      return 3;
    }
    write_all(done);
    samples += std::to_string(t0) + ":" + std::to_string(rtt) + " ";
    timespec gap{gap_us / 1'000'000, (gap_us % 1'000'000) * 1000};
    while (::nanosleep(&gap, &gap) != 0 && errno == EINTR) {
    }
  }
  write_all(proto::encode_line(proto::Final{"paced done", samples, proto::json::object()}));
  return 0;
}

// A hostile sibling: `grep` requests whose pattern is `bytes` long, each sent as soon as the last
// was answered, for `seconds`; then a final. Nothing is timed here.
int flood(Lines &in, double seconds, long bytes) {
  const std::string pattern(static_cast<std::size_t>(bytes), 'x');
  const std::int64_t end = now_ns() + static_cast<std::int64_t>(seconds * 1e9);
  long i = 0;
  for (; now_ns() < end; ++i) {
    const std::string id = request_id(i);
    write_all(proto::encode_line(proto::ToolRequest{id, "grep", {{"pattern", pattern}, {"path", "src"}}}));
    std::string_view reply = in.next();
    if (!allowed(reply)) {
      std::fprintf(stderr, "bench_child: flood request %ld not allowed: %.*s\n", i,
                   static_cast<int>(std::min<std::size_t>(reply.size(), 300)), reply.data());
      return 3;
    }
    write_all(proto::encode_line(proto::ToolDone{id, true, 120, ""}));
  }
  write_all(proto::encode_line(proto::Final{"flood done", std::to_string(i), proto::json::object()}));
  return 0;
}

// Reads the task's brief from the welcome and runs it.
int by_brief() {
  Lines in;
  write_all(proto::encode_line(proto::Hello{{proto::kVersion}, "bench-child/1"}));
  std::string_view line = in.next();
  auto decoded = proto::decode_supervisor_message(line);
  const auto *welcome = decoded ? std::get_if<proto::Welcome>(&*decoded.message) : nullptr;
  if (!welcome) std::_Exit(3);
  const std::string brief = welcome->task.brief;
  double seconds = 0;
  long a = 0;
  if (std::sscanf(brief.c_str(), "pingpong %ld", &a) == 1) return pingpong_after_handshake(in, a);
  if (std::sscanf(brief.c_str(), "paced %lf %ld", &seconds, &a) == 2) return paced(in, seconds, a);
  if (std::sscanf(brief.c_str(), "flood %lf %ld", &seconds, &a) == 2) return flood(in, seconds, a);
  std::fprintf(stderr, "bench_child: unknown brief '%s'\n", brief.c_str());
  return 64;
}

[[noreturn]] void stubborn(bool raw) {
  Lines in;
  if (!raw) handshake(in);
  pid_t pid = ::fork();
  if (pid < 0) std::_Exit(5);
  if (raw && pid > 0) write_all("r\n");
  for (;;)
    ::pause();  // the grandchild too: it holds stdout, so EOF there means it is
                // dead
}

}  // namespace

int main(int argc, char **argv) {
  ::signal(SIGPIPE, SIG_DFL);
  const std::string mode = argc > 1 ? argv[1] : "";
  bool raw = false;
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--raw") == 0) raw = true;
  if (mode == "pingpong" && argc > 2) return pingpong(std::atol(argv[2]), raw);
  if (mode == "stubborn") stubborn(raw);
  if (mode == "brief") return by_brief();
  // The same two as a brief gives them, for the raw relay of the sibling benchmark: no handshake.
  if ((mode == "paced" || mode == "flood") && argc > 3 && raw) {
    Lines in;
    return mode == "paced" ? paced(in, std::atof(argv[2]), std::atol(argv[3]))
                           : flood(in, std::atof(argv[2]), std::atol(argv[3]));
  }
  std::fprintf(stderr,
               "usage: bench_child pingpong N [--raw] | stubborn [--raw] | brief | paced SECONDS GAP_US --raw | "
               "flood SECONDS BYTES --raw\n");
  return 64;
}
