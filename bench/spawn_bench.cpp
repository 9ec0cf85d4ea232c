// Spawn latency of /bin/true: fully sandboxed (explore preset) vs a bare fork/exec vs bwrap.
//
// One run, the three variants interleaved round by round (rotating which goes first), so that
// frequency scaling, page-cache state and background load hit them alike. Reports p50/p99 and the
// ratios of the medians; asserts nothing about absolute times.
//
//   spawn_bench [--iterations N] [--warmup N] [--policy FILE] [--json FILE]
//
// Measured per iteration, on CLOCK_MONOTONIC:
//   exec  fork/clone until the child has exec'd (EOF on a close-on-exec pipe; for the sandbox that
//         is launch() returning, which waits for exactly that);
//   exit  fork/clone until /bin/true has exited and been reaped (what bwrap can be compared on).
#include <fcntl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kTrue = "/bin/true";

struct Sample {
  double exec_us = 0, exit_us = 0;
};

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void reap(pid_t pid) {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "spawn_bench: child %d did not exit 0 (status %#x)\n", pid, status);
    std::exit(1);
  }
}

// fork + execve, with a close-on-exec pipe whose EOF marks the exec.
Sample spawn_plain(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char* envp[] = {nullptr};
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) std::exit(1);
  Sample s;
  auto t0 = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(args[0], args.data(), envp);
    ::_exit(127);
  }
  ::close(p[1]);
  char c;
  while (::read(p[0], &c, 1) < 0 && errno == EINTR) {
  }
  s.exec_us = us_since(t0);
  reap(pid);
  s.exit_us = us_since(t0);
  ::close(p[0]);
  return s;
}

Sample spawn_sandboxed(const sandbox::Plan& plan) {
  Sample s;
  auto t0 = Clock::now();
  sandbox::Child child = sandbox::launch(plan);
  s.exec_us = us_since(t0);
  reap(child.pid);
  s.exit_us = us_since(t0);
  ::close(child.pidfd);
  sandbox::release(child);
  return s;
}

struct Stats {
  double p50 = 0, p99 = 0, mean = 0, min = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()))]; };
  Stats s;
  s.p50 = at(0.50);
  s.p99 = at(0.99);
  s.min = v.front();
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  return s;
}

std::string first_line_with(const std::string& file, const std::string& prefix) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) {
      auto colon = line.find(':');
      std::string v = colon == std::string::npos ? line : line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "unknown";
}

sandbox::Policy load_policy(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  auto doc = json::parse(text.str(), nullptr, true, /*ignore_comments=*/true);
  return sandbox::parse_policy(doc.at("sandbox"), file.filename().string());
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 300, warmup = 20;
  fs::path policy_file = fs::path(SUBAGENT_SOURCE_DIR) / "policies" / "explore.json";
  std::string json_out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "spawn_bench: %s needs a value\n", a.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (a == "--iterations")
      iterations = std::atoi(value().c_str());
    else if (a == "--warmup")
      warmup = std::atoi(value().c_str());
    else if (a == "--policy")
      policy_file = value();
    else if (a == "--json")
      json_out = value();
    else {
      std::fprintf(stderr, "usage: spawn_bench [--iterations N] [--warmup N] [--policy FILE] [--json FILE]\n");
      return 64;
    }
  }
  if (iterations < 10) iterations = 10;

  char ws_template[] = "/tmp/spawn-bench-XXXXXX";
  if (!::mkdtemp(ws_template)) return 1;
  const fs::path workspace = ws_template;

  sandbox::Policy policy = load_policy(policy_file);
  sandbox::LaunchRequest req;
  req.executable = kTrue;
  req.argv = {kTrue};
  req.workspace = workspace;
  req.child_dir = kTrue;
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  req.stdin_fd = req.stdout_fd = req.stderr_fd = null;
  auto prepare_t0 = Clock::now();
  sandbox::PlanPtr plan = sandbox::prepare(policy, req);
  const double prepare_us = us_since(prepare_t0);
  std::vector<std::string> layers_applied, layers_missing;
  for (const auto& l : sandbox::layers(*plan)) (l.applied ? layers_applied : layers_missing).push_back(l.name);

  const std::string bwrap = fs::exists("/usr/bin/bwrap") ? "/usr/bin/bwrap" : "";
  const std::vector<std::string> bwrap_argv = {
      bwrap,  "--unshare-all", "--die-with-parent", "--ro-bind", "/usr",      "/usr",    "--symlink", "usr/lib",
      "/lib", "--symlink",     "usr/lib64",         "/lib64",    "--symlink", "usr/bin", "/bin",      kTrue};

  using Variant = std::pair<std::string, std::function<Sample()>>;
  std::vector<Variant> variants = {
      {"bare", [] { return spawn_plain({kTrue}); }},
      {"sandbox", [&] { return spawn_sandboxed(*plan); }},
  };
  if (!bwrap.empty()) variants.push_back({"bwrap", [&] { return spawn_plain(bwrap_argv); }});

  std::map<std::string, std::vector<double>> exec_us, exit_us;
  for (int round = 0; round < warmup + iterations; ++round) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const Variant& v = variants[(k + static_cast<std::size_t>(round)) % variants.size()];
      Sample s = v.second();
      if (round < warmup) continue;
      exec_us[v.first].push_back(s.exec_us);
      exit_us[v.first].push_back(s.exit_us);
    }
  }
  fs::remove_all(workspace);

  struct utsname uts {};
  ::uname(&uts);
  json out;
  out["machine"] = {{"nproc", static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))},
                    {"kernel", std::string(uts.release)},
                    {"cpu", first_line_with("/proc/cpuinfo", "model name")},
                    {"euid", static_cast<int>(::geteuid())}};
  out["iterations"] = iterations;
  out["warmup"] = warmup;
  out["policy"] = policy_file.filename().string();
  out["prepare_us"] = prepare_us;
  out["layers_applied"] = layers_applied;
  out["layers_missing"] = layers_missing;
  out["bwrap_command"] = bwrap.empty() ? json(nullptr) : json(bwrap_argv);

  std::printf("spawn latency of %s, %d interleaved iterations (after %d warm-up), microseconds\n", kTrue, iterations,
              warmup);
  std::printf("%-8s %10s %10s %10s %10s\n", "variant", "exec p50", "exec p99", "exit p50", "exit p99");
  std::map<std::string, Stats> exit_stats, exec_stats;
  for (const auto& [name, unused] : variants) {
    exec_stats[name] = stats(exec_us[name]);
    exit_stats[name] = stats(exit_us[name]);
    const Stats& e = exec_stats[name];
    const Stats& x = exit_stats[name];
    std::printf("%-8s %10.0f %10.0f %10.0f %10.0f\n", name.c_str(), e.p50, e.p99, x.p50, x.p99);
    out["results"][name] = {{"exec", {{"p50_us", e.p50}, {"p99_us", e.p99}, {"mean_us", e.mean}, {"min_us", e.min}}},
                            {"exit", {{"p50_us", x.p50}, {"p99_us", x.p99}, {"mean_us", x.mean}, {"min_us", x.min}}}};
  }
  const double vs_bare = exit_stats["sandbox"].p50 / exit_stats["bare"].p50;
  const double vs_bare_exec = exec_stats["sandbox"].p50 / exec_stats["bare"].p50;
  out["ratios"]["sandbox_vs_bare_exit_p50"] = vs_bare;
  out["ratios"]["sandbox_vs_bare_exec_p50"] = vs_bare_exec;
  out["targets"]["sandbox_vs_bare_max"] = 2.5;
  out["targets"]["sandbox_vs_bwrap_max"] = 0.5;
  std::printf(
      "\nratio of medians, sandbox / bare fork+exec: %.2fx to exit, %.2fx to exec (target <= "
      "2.5x)\n",
      vs_bare, vs_bare_exec);
  if (!bwrap.empty()) {
    const double vs_bwrap = exit_stats["sandbox"].p50 / exit_stats["bwrap"].p50;
    out["ratios"]["sandbox_vs_bwrap_exit_p50"] = vs_bwrap;
    std::printf("ratio of medians, sandbox / bwrap --unshare-all: %.2fx to exit (target <= 0.5x)\n", vs_bwrap);
  } else {
    std::printf("bwrap is not installed: no bwrap comparison\n");
  }
  std::printf("(prepare, once: %.0f us; layers missing: %zu)\n", prepare_us, layers_missing.size());
  if (!json_out.empty()) {
    std::ofstream(json_out) << out.dump(2) << "\n";
    std::printf("wrote %s\n", json_out.c_str());
  }
  return 0;
}
