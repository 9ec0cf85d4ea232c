// `subagent-supervisor serve` as a real subprocess, driven the way a parent agent drives it (JSON lines
// on its stdin and stdout), plus the /proc views the hostile-child, fault and soak tests check after it:
// survivors by name, zombies and children of a pid, open fds, resident memory.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace test {

using nlohmann::json;

// Sanitizer builds: resident memory says nothing there (shadow memory, ASan's quarantine).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// A copy of a built test program under a name no other test binary uses, so that a /proc scan for
// survivors counts only this test's processes (tests run in parallel).
inline fs::path private_program(const TempDir& dir, const std::string& name, const std::string& prefix) {
  fs::path p = dir.path() / (prefix + std::to_string(::getpid() % 1000000));
  fs::copy_file(program(name), p, fs::copy_options::overwrite_existing);
  // Readable and executable by others: under a root supervisor the child runs as an id of its own.
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                         fs::perms::others_exec);
  return p;
}

// Direct children of `pid`, zombies included.
inline std::vector<ProcInfo> children_of(pid_t pid) {
  std::vector<ProcInfo> out;
  for (const auto& p : processes())
    if (p.ppid == pid) out.push_back(p);
  return out;
}

inline int zombies_of(pid_t pid) {
  int n = 0;
  for (const auto& p : children_of(pid)) n += p.state == 'Z';
  return n;
}

// Waits (up to `limit`) until no live process is named `name`; returns how many are left.
inline int wait_none_named(const std::string& name, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int n = processes_named(name);
  while (n != 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    n = processes_named(name);
  }
  return n;
}

// Pids of live processes named `name`.
inline std::vector<pid_t> pids_named(const std::string& name) {
  std::vector<pid_t> out;
  for (const auto& p : processes())
    if (p.comm == name && p.state != 'Z') out.push_back(p.pid);
  return out;
}

inline int open_fds(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    ++n;
  return ec ? -1 : n;
}

// A field of /proc/<pid>/status in kB (VmRSS, VmHWM), or -1.
inline long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  return -1;
}

// A replay model script (one assistant turn per line) as a --model spec.
inline std::string replay(const TempDir& d, const std::string& name, const std::string& body) {
  return "replay:" + d.write(name, body + "\n");
}

class Serve {
 public:
  struct Options {
    Options(std::vector<std::string> a, bool t = false, std::vector<std::string> e = {},
            std::function<std::string()> b = nullptr)
        : args(std::move(a)), transcripts(t), env(std::move(e)), before_exec(std::move(b)) {}
    std::vector<std::string> args;             // after `serve`
    bool transcripts = false;                  // else --no-transcript
    std::vector<std::string> env;              // NAME=VALUE added to the supervisor's environment
    std::function<std::string()> before_exec;  // runs in the forked child; a non-empty result aborts
  };

  explicit Serve(Options o) {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);  // the supervisor must not hold its own stdin open
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    std::vector<std::string> argv = {
        bin("subagent-supervisor").string(), "serve", "--state-dir", state.path().string(), "--lock-dir",
        (state.path() / "locks").string()};
    if (o.transcripts) {
      argv.push_back("--transcript-dir");
      argv.push_back(transcript_dir().string());
    } else {
      argv.push_back("--no-transcript");
      argv.push_back("--audit-log");
      argv.push_back((state.path() / "audit.jsonl").string());
    }
    argv.insert(argv.end(), o.args.begin(), o.args.end());
    const std::string err = (state.path() / "stderr").string();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (e >= 0) ::dup2(e, 2);
      for (auto& v : o.env) ::putenv(v.data());
      if (o.before_exec) {
        std::string why = o.before_exec();
        if (!why.empty()) {
          std::string msg = "{\"type\":\"setup_failed\",\"message\":" + json(why).dump() + "}\n";
          (void)!::write(1, msg.data(), msg.size());
          ::_exit(126);
        }
      }
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Serve() {
    if (to_ >= 0) ::close(to_);
    if (pid_ > 0) {  // never kill(-1) or kill(0)
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (from_ >= 0) ::close(from_);
  }
  Serve(const Serve&) = delete;
  Serve& operator=(const Serve&) = delete;

  pid_t pid() const { return pid_; }
  fs::path transcript_dir() const { return state.path() / "transcripts"; }
  std::string stderr_text() const { return slurp(state.path() / "stderr"); }

  void send(const json& j) { send_raw(j.dump() + "\n"); }
  void send_raw(const std::string& s) {
    REQUIRE(to_ >= 0);
    REQUIRE(::write(to_, s.data(), s.size()) == static_cast<ssize_t>(s.size()));
  }
  void close_input() {
    if (to_ >= 0) ::close(to_);
    to_ = -1;
  }
  void close_output() {
    if (from_ >= 0) ::close(from_);
    from_ = -1;
  }
  void signal(int sig) {
    REQUIRE(pid_ > 0);
    ::kill(pid_, sig);
  }
  // Sends `sig` and reaps the supervisor (nothing is signalled again later); returns its wait status.
  int kill_and_reap(int sig) {
    REQUIRE(pid_ > 0);
    ::kill(pid_, sig);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  // The next message matching `pred` (others are kept for later), or null after `limit`.
  json next(const std::function<bool(const json&)>& pred, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    for (auto it = seen_.begin(); it != seen_.end(); ++it)
      if (pred(*it)) {
        json j = *it;
        seen_.erase(it);
        return j;
      }
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        json j = json::parse(buf_.substr(0, nl), nullptr, false);
        buf_.erase(0, nl + 1);
        if (j.is_discarded()) j = {{"type", "unparseable_line"}};
        ++received_;
        if (j.value("type", "") == "log") {
          const std::string line = j.value("line", "");
          if (++logs_ <= 2000 || j.value("child_id", "x").empty()) log_lines_.push_back(line);
          continue;  // counted (the first 2,000 and the supervisor's own kept), never returned
        }
        if (pred(j)) return j;
        seen_.push_back(j);
        continue;
      }
      if (from_ < 0 || std::chrono::steady_clock::now() >= deadline) return nullptr;
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char b[65536];
      ssize_t n = ::read(from_, b, sizeof b);
      if (n <= 0) {
        eof_ = true;
        return nullptr;
      }
      buf_.append(b, static_cast<std::size_t>(n));
    }
  }
  json reply(const json& id, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    return next([&](const json& j) { return j.contains("id") && j["id"] == id; }, limit);
  }
  json hello(json extra = json::object()) {
    json h = {{"type", "hello"}, {"id", "hello"}, {"protocol", 1}, {"parent", "test"}};
    h.update(extra);
    send(h);
    return reply("hello");
  }
  // Background spawn; returns the child id ("" when refused).
  std::string spawn_bg(const std::string& request_id, json fields) {
    json m = {{"type", "spawn"}, {"id", request_id}, {"background", true}, {"brief", "test brief"}};
    if (fields.is_object()) m.update(fields);
    if (!m.contains("preset")) m["preset"] = "explore";
    send(m);
    json r = reply(request_id);
    if (!r.is_object() || r.value("type", "") != "spawned") {
      MESSAGE("spawn refused: " << r.dump());
      return "";
    }
    return r["child_id"];
  }
  json child_done(const std::string& child, std::chrono::milliseconds limit = std::chrono::seconds(90)) {
    return next([&](const json& j) { return j.value("type", "") == "child_done" && j.value("child_id", "") == child; },
                limit);
  }
  // `list` answered within `limit`: the supervisor is responsive.
  json list(const std::string& request_id, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    send({{"type", "list"}, {"id", request_id}});
    return reply(request_id, limit);
  }
  // Exit code (or 128 + signal), or -1 when it did not exit within `limit`.
  int wait_exit(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() >= end) return -1;
      // Keep reading so a full stdout pipe never blocks its exit.
      if (from_ >= 0 && !eof_)
        next([](const json&) { return false; }, std::chrono::milliseconds(20));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::size_t logs() const { return logs_; }
  const std::vector<std::string>& log_lines() const { return log_lines_; }
  std::size_t received() const { return received_; }
  const std::vector<json>& unclaimed() const { return seen_; }

  TempDir state;

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  bool eof_ = false;
  std::string buf_;
  std::vector<json> seen_;
  std::vector<std::string> log_lines_;
  std::size_t logs_ = 0, received_ = 0;
};

}  // namespace test
