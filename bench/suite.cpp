// subagent_bench: the benchmark suite of issue 8. Every figure is a ratio of
// medians (or of per-message costs) measured in the same run, subject and
// baseline interleaved; nothing asserts a time. Each benchmark writes
// RESULTS_DIR/<name>.json; the suite prints one table at the end and writes
// RESULTS_DIR/summary.json.
//
//   subagent_bench [--results DIR] [--only NAME[,NAME...]] [--quick]
//
// Benchmarks (names for --only): spawn, broker, concurrent, memory,
// enforcement, tools, spawnload, many, sibling. The subjects use the project's real code:
// supervisor::ChildSession (prepare + launch + protocol), the real
// subagent-child, and child::run_tool inside sandbox::launch.
#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "protocol/tools.hpp"
#include "common.hpp"
#include "min_launcher.h"
#include "protocol/messages.hpp"
#include "sandbox/launch.hpp"
#include "sandbox/protect.hpp"
#include "seccomp.hpp"  // sandbox/seccomp.hpp: the same BPF program for the minimal C launcher
#include "models/model.hpp"
#include "policy/decide.hpp"
#include "policy/preset.hpp"
#include "session/session.hpp"
#include "scheduling/hub.hpp"
#include "records/transcript.hpp"
#include "runtime/in_process_runtime.hpp"

namespace fs = std::filesystem;
namespace proto = protocol;
namespace asio = boost::asio;
using namespace bench;
using supervisor::ChildSession;
using supervisor::SessionConfig;

namespace {

struct Options {
  fs::path results;
  std::vector<std::string> only;
  bool quick = false;
  bool wants(const std::string &name) const {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  }
};

struct Env {
  fs::path bin_dir;
  fs::path subagent_child, subagent_child_static, bench_child, tool_runner;
  std::shared_ptr<const supervisor::Preset> explore;
  // The enforcement benchmark's stubborn child forks a grandchild, which explore's seccomp allowlist
  // refuses (no process group): it runs under worker, whose tree is what a kill has to end.
  std::shared_ptr<const supervisor::Preset> worker;
  fs::path workspace;  // a small read-only workspace
  std::string bwrap, rg;
  std::vector<std::string> child_env;  // what the sandbox gives the child, for the raw variants
};

// One row of the final table.
struct Row {
  std::string bench, measure, subject, baseline, ratio, target;
  std::string met;  // "yes", "no" or "-"
};
std::vector<Row> g_rows;

std::string fmt(const char *f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string us(double v) { return v >= 10000 ? fmt("%.1f ms", v / 1000) : fmt("%.0f us", v); }

void add_row(Row r) {
  std::printf("  %-26s %-44s %s vs %s = %s (target %s) %s\n", r.bench.c_str(), r.measure.c_str(), r.subject.c_str(),
              r.baseline.c_str(), r.ratio.c_str(), r.target.c_str(), r.met.c_str());
  std::fflush(stdout);
  g_rows.push_back(std::move(r));
}

void write_json(const Options &o, const std::string &name, const json &j) {
  fs::create_directories(o.results);
  std::ofstream(o.results / (name + ".json")) << j.dump(2) << "\n";
}

// ---- the supervisor side
// -------------------------------------------------------------------------

// A model that is called and never answers (or counts calls): the child waits
// for its first turn.
class StubProvider : public supervisor::ModelProvider {
 public:
  explicit StubProvider(std::function<void()> on_call) : on_call_(std::move(on_call)) {}
  std::string describe() const override { return "bench-stub"; }
  void start(supervisor::ModelCall, std::function<void(supervisor::ModelReply)>) override {
    if (on_call_) on_call_();
  }
  void cancel() override {}

 private:
  std::function<void()> on_call_;
};

SessionConfig session_config(const Env &env, const fs::path &exe, std::vector<std::string> args) {
  SessionConfig c;
  c.id = supervisor::new_child_id();
  c.preset = env.explore;
  c.budgets = env.explore->budgets;
  c.budgets.max_tool_calls = 1'000'000'000;
  c.budgets.answer_bytes = 16u << 20;
  c.brief = "benchmark";
  c.description = "benchmark";
  c.workspace = env.workspace;
  c.child_executable = exe;
  c.child_args = std::move(args);
  c.on_log = [](const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return c;
}

void run_until(asio::io_context &io, const std::function<bool()> &done) {
  while (!done()) {
    if (io.stopped()) io.restart();
    if (io.run_one() == 0 && !done()) throw std::runtime_error("the event loop ran out of work");
  }
}

std::string welcome_line(const Env &env) {
  proto::Welcome w;
  w.child_id = "000000000000";
  w.task.brief = "benchmark";
  w.task.description = "benchmark";
  w.task.preset = env.explore->name;
  w.task.workspace = env.workspace.string();
  w.task.tools = protocol::tool_specs(supervisor::offered_tools(*env.explore));
  w.task.limits = supervisor::child_limits(env.explore->budgets);
  return proto::encode_line(w);
}

// A launch of `exe` (argv[0] included in `argv`) in `workspace`, with `exe` as the one program the
// child may run, as the supervisor asks for its children.
sandbox::LaunchRequest launch_request(const fs::path &exe, std::vector<std::string> argv, const fs::path &workspace,
                                      int in, int out, int err) {
  sandbox::LaunchRequest req;
  req.executable = exe.string();
  req.argv = std::move(argv);
  req.workspace = workspace;
  req.child_dir = exe;
  req.stdin_fd = in;
  req.stdout_fd = out;
  req.stderr_fd = err;
  return req;
}

// ---- 1. spawn to ready
// ---------------------------------------------------------------------------

// Launches through `launch(stdin, stdout, stderr)`, does the handshake as the
// supervisor would (hello -> welcome) and stops the clock at the child's first
// model_request. Teardown is untimed. `setup(stdin, stdout)`, when given, runs
// before the clock starts (to prepare a plan). Where the time went: launch
// returned, hello read, ready.
struct Phases {
  double launch = 0, hello = 0, ready = 0;
};

double spawn_raw(const std::function<pid_t(int, int, int)> &launch, const std::string &welcome,
                 const std::function<void(int, int)> &setup = nullptr, Phases *phases = nullptr) {
  Pipe in, out;
  if (setup) setup(in.read, out.write);
  const auto t0 = Clock::now();
  pid_t pid = launch(in.read, out.write, -1);
  const auto t_launched = Clock::now();
  in.close_read();
  out.close_write();
  if (pid <= 0) fail_errno("launch");
  FdLines lines(out.read);
  auto hello = lines.next();
  if (!hello || hello->find("\"hello\"") == std::string::npos)
    throw std::runtime_error("spawn: no hello from the child");
  const auto t_hello = Clock::now();
  write_all(in.write, welcome);
  for (;;) {
    auto l = lines.next();
    if (!l) throw std::runtime_error("spawn: the child ended before asking for a model turn");
    if (l->find("\"model_request\"") != std::string::npos) break;
  }
  const auto t1 = Clock::now();
  const double t = us_between(t0, t1);
  if (phases) *phases = {us_between(t0, t_launched), us_between(t_launched, t_hello), us_between(t_hello, t1)};
  in.close_write();  // EOF: the child stops (protocol failure, exit 3)
  lines.drain();
  reap(pid);
  return t;
}

double spawn_session(asio::io_context &io, const Env &env, const fs::path &exe, Phases *phases = nullptr) {
  bool ready = false, done = false;
  Clock::time_point t1, t_started, t_hello;
  std::string reason;
  SessionConfig cfg = session_config(env, exe, {});
  cfg.on_event = [&](const json &e) {
    if (e["event"] == "started")
      t_started = Clock::now();
    else if (e["event"] == "hello")
      t_hello = Clock::now();
  };
  const auto t0 = Clock::now();
  auto s = ChildSession::create(io, std::move(cfg), std::make_unique<StubProvider>([&] {
                                  t1 = Clock::now();
                                  ready = true;
                                }));
  s->start([&](const proto::Envelope &e) {
    done = true;
    reason = e.reason;
  });
  run_until(io, [&] { return ready || done; });
  if (!ready) throw std::runtime_error("spawn: the sandboxed child ended early: " + reason);
  if (phases) *phases = {us_between(t0, t_started), us_between(t_started, t_hello), us_between(t_hello, t1)};
  s->cancel("benchmark teardown");
  run_until(io, [&] { return done; });
  return us_between(t0, t1);
}

void bench_spawn(const Options &o, const Env &env, asio::io_context &io) {
  std::printf(
      "[spawn] spawn to ready: the child said hello, got its task and "
      "asked for a model turn\n");
  const int iterations = o.quick ? 20 : 80, warmup = 5;
  const std::string welcome = welcome_line(env);
  const std::string exe = env.subagent_child.string();

  // (b) the minimal C launcher: the same paths and BPF program as the explore
  // plan.
  const auto bpf = sandbox::compile_seccomp(env.explore->sandbox);
  sock_fprog prog{static_cast<unsigned short>(bpf.size()), const_cast<sock_filter *>(bpf.data())};
  const std::string home = sandbox::kHomePath;
  auto substitute = [&](std::vector<std::string> v) {
    std::vector<std::string> out;
    for (auto &p : v) {
      for (auto [key, value] : {std::pair<std::string, std::string>{"${workspace}", env.workspace.string()},
                                {"${child}", exe},
                                {"${home}", home}}) {
        auto pos = p.find(key);
        if (pos != std::string::npos) p.replace(pos, key.size(), value);
      }
      if (p.find("${") == std::string::npos) out.push_back(p);  // ${interpreter}: none for a binary
    }
    return out;
  };
  auto read_paths = substitute(env.explore->sandbox.read_paths);
  auto exec_paths = substitute(env.explore->sandbox.exec_paths);
  // The new root, from the same paths: a top-level symlink (/lib -> usr/lib) is made as a link, the
  // home is a tmpfs, anything else a read-only clone of its canonical path (once, outermost first).
  std::vector<std::string> binds, links, link_targets;
  {
    std::vector<std::string> all = read_paths;
    all.insert(all.end(), exec_paths.begin(), exec_paths.end());
    std::vector<std::string> canonical;
    for (const auto &p : all) {
      if (p == home) continue;
      std::error_code ec;
      if (fs::is_symlink(p, ec) && fs::path(p).parent_path() == "/") {
        if (std::find(links.begin(), links.end(), p) == links.end()) {
          links.push_back(p);
          link_targets.push_back(fs::read_symlink(p).string());
        }
        continue;
      }
      const auto c = fs::canonical(p, ec);
      if (!ec) canonical.push_back(c.string());
    }
    std::sort(canonical.begin(), canonical.end());
    for (const auto &c : canonical) {
      const bool covered = std::any_of(binds.begin(), binds.end(), [&](const std::string &b) {
        return c == b || (c.size() > b.size() && c.compare(0, b.size(), b) == 0 && c[b.size()] == '/');
      });
      if (!covered) binds.push_back(c);
    }
  }
  // Landlock rules name the paths the child sees: the home's rule is added in the child.
  std::erase(read_paths, home);
  std::vector<const char *> rp, ep, bp, lp, lt;
  for (const auto &p : read_paths) rp.push_back(p.c_str());
  for (const auto &p : exec_paths) ep.push_back(p.c_str());
  for (const auto &p : binds) bp.push_back(p.c_str());
  for (const auto &p : links) lp.push_back(p.c_str());
  for (const auto &p : link_targets) lt.push_back(p.c_str());
  // The per-launch cgroups, as the supervisor makes them as root: a v1 hierarchy per controller.
  auto v1_hierarchy = [](const std::string &controller) -> std::string {
    if (::geteuid() != 0) return "";
    std::ifstream mounts("/proc/self/mounts");
    std::string dev, dir, type, opts, rest;
    while (mounts >> dev >> dir >> type >> opts && std::getline(mounts, rest)) {
      if (type != "cgroup") continue;
      std::stringstream ss(opts);
      for (std::string option; std::getline(ss, option, ',');)
        if (option == controller) return dir;
    }
    return "";
  };
  const std::string cg_pids = v1_hierarchy("pids"), cg_memory = v1_hierarchy("memory"), cg_cpu = v1_hierarchy("cpu");
  std::printf("  min_c: %zu read-only clones, %zu links, home, /proc; cgroups v1:%s%s%s\n", binds.size(), links.size(),
              cg_pids.empty() ? "" : " pids", cg_memory.empty() ? "" : " memory", cg_cpu.empty() ? "" : " cpu");
  std::vector<std::string> argv_store = {exe};
  std::vector<char *> argv = {argv_store[0].data(), nullptr};
  std::vector<std::string> env_store = env.child_env;
  std::vector<char *> envp;
  for (auto &e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const auto &rl = env.explore->sandbox.rlimits;
  const auto &tl = env.explore->sandbox.tree_limits;
  min_launch_state min_state{};
  auto min_c = [&](int in, int out, int err) {
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    min_launch cfg{};
    cfg.exe = exe.c_str();
    cfg.argv = argv.data();
    cfg.envp = envp.data();
    cfg.workspace = env.workspace.c_str();
    cfg.read_paths = rp.data();
    cfg.n_read = static_cast<int>(rp.size());
    cfg.exec_paths = ep.data();
    cfg.n_exec = static_cast<int>(ep.size());
    cfg.binds = bp.data();
    cfg.n_binds = static_cast<int>(bp.size());
    cfg.links = lp.data();
    cfg.link_targets = lt.data();
    cfg.n_links = static_cast<int>(lp.size());
    cfg.home = home.c_str();
    cfg.filter = &prog;
    cfg.stdio[0] = in;
    cfg.stdio[1] = out;
    cfg.stdio[2] = err < 0 ? null : err;
    cfg.as_bytes = rl.address_space_mb << 20;
    cfg.cpu_seconds = rl.cpu_seconds;
    cfg.open_files = rl.open_files;
    cfg.processes = rl.processes;
    cfg.cgroup_pids = cg_pids.empty() ? nullptr : cg_pids.c_str();
    cfg.cgroup_memory = cg_memory.empty() || tl.memory_mb == 0 ? nullptr : cg_memory.c_str();
    cfg.cgroup_cpu = cg_cpu.empty() || tl.cpu_percent == 0 ? nullptr : cg_cpu.c_str();
    cfg.memory_bytes = static_cast<unsigned long>(tl.memory_mb) << 20;
    cfg.cpu_quota_us = static_cast<unsigned long>(tl.cpu_percent) * 1000;
    pid_t pid = min_launch_start(&cfg, &min_state);
    ::close(null);
    return pid;
  };
  const std::string static_exe = env.subagent_child_static.string();
  auto bare = [&](const std::string &program) {
    return [&env, program](int in, int out, int err) {
      return spawn({program}, env.child_env, in, out, err, env.workspace.c_str());
    };
  };
  const std::string bin_dir = env.bin_dir.string(), ws = env.workspace.string();
  auto bwrap_argv = [&](const std::string &program) {
    return std::vector<std::string>{
        env.bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr",      "/usr",    "--symlink", "usr/lib",
        "/lib",    "--symlink",     "usr/lib64",         "/lib64",    "--symlink", "usr/bin", "/bin",      "--ro-bind",
        bin_dir,   bin_dir,         "--ro-bind",         ws,          ws,          "--chdir", ws,          program};
  };
  auto bwrap = [&](const std::string &program) {
    return [&env, argv = bwrap_argv(program)](int in, int out, int err) {
      return spawn(argv, env.child_env, in, out, err);
    };
  };

  // The launch layer alone: sandbox::launch of a plan prepared before the clock
  // starts, with the handshake done here as for the raw variants. Splits the
  // supervisor's cost into launch and the rest (prepare, session).
  sandbox::PlanPtr plan;
  std::vector<double> prepare_us;
  auto prepare_plan = [&](int in, int out) {
    sandbox::LaunchRequest req =
        launch_request(exe, {exe}, env.workspace, in, out, ::open("/dev/null", O_RDWR | O_CLOEXEC));
    req.extra_env = {"SUBAGENT_CHILD_ID=000000000000"};
    const auto t0 = Clock::now();
    plan = sandbox::prepare(env.explore->sandbox, req);
    prepare_us.push_back(us_between(t0, Clock::now()));
    ::close(req.stderr_fd);
  };
  std::map<std::string, std::vector<Phases>> phases;
  Phases ph;
  sandbox::Child launched;
  auto launch_only = [&](int, int, int) {
    launched = sandbox::launch(*plan);
    return launched.pid;
  };
  auto launch_variant = [&] {
    double t = spawn_raw(launch_only, welcome, prepare_plan, &ph);
    ::close(launched.pidfd);
    sandbox::release(launched);
    return t;
  };

  using Variant = std::pair<std::string, std::function<double()>>;
  std::vector<Variant> variants = {
      {"supervisor", [&] { return spawn_session(io, env, env.subagent_child, &ph); }},
      {"launch_only", launch_variant},
      {"bare", [&] { return spawn_raw(bare(exe), welcome, nullptr, &ph); }},
      {"min_c",
       [&] {
         const double t = spawn_raw(min_c, welcome, nullptr, &ph);
         min_launch_cleanup(&min_state);  // after the reap, untimed like the supervisor's teardown
         return t;
       }},
  };
  const bool have_static = fs::exists(env.subagent_child_static);
  if (have_static) {
    variants.push_back({"supervisor_static", [&] { return spawn_session(io, env, env.subagent_child_static, &ph); }});
    variants.push_back({"bare_static", [&] { return spawn_raw(bare(static_exe), welcome, nullptr, &ph); }});
  }
  if (!env.bwrap.empty()) {
    variants.push_back({"bwrap", [&] { return spawn_raw(bwrap(exe), welcome, nullptr, &ph); }});
    if (have_static)
      variants.push_back({"bwrap_static", [&] { return spawn_raw(bwrap(static_exe), welcome, nullptr, &ph); }});
  }
  std::map<std::string, std::vector<double>> samples, cpu;
  for (int round = 0; round < warmup + iterations; ++round) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const Variant &v = variants[(k + static_cast<std::size_t>(round)) % variants.size()];
      ph = {};
      // The whole process: the supervisor prepares and clones on its worker pool.
      const double cpu0 = process_cpu_us() + children_cpu_us();
      double t = v.second();
      const double cpu_used = process_cpu_us() + children_cpu_us() - cpu0;
      if (round < warmup) continue;
      samples[v.first].push_back(t);
      cpu[v.first].push_back(cpu_used);
      phases[v.first].push_back(ph);
    }
  }
  json j;
  j["iterations"] = iterations;
  j["warmup"] = warmup;
  j["what"] =
      "microseconds from the start of the launch until the child's "
      "first model_request";
  j["bwrap_command"] = env.bwrap.empty() ? json(nullptr) : json(bwrap_argv(exe));
  std::map<std::string, Stats> st;
  for (auto &[name, v] : samples) {
    st[name] = stats(v);
    j["results"][name] = to_json(st[name]);
    std::vector<double> l, h, r;
    for (const Phases &p : phases[name]) {
      l.push_back(p.launch);
      h.push_back(p.hello);
      r.push_back(p.ready);
    }
    const Stats sl = stats(l), sh = stats(h), sr = stats(r), sc = stats(cpu[name]);
    j["results"][name]["phases_p50_us"] = {{"launch", sl.p50}, {"to_hello", sh.p50}, {"to_ready", sr.p50}};
    j["results"][name]["cpu_us_per_spawn"] = to_json(sc);
    std::printf(
        "  %-17s p50 %6.0f us  p99 %6.0f us  (phases p50: launch "
        "%5.0f, to hello %5.0f, to ready %4.0f)  CPU p50 %5.0f us\n",
        name.c_str(), st[name].p50, st[name].p99, sl.p50, sh.p50, sr.p50, sc.p50);
  }
  const Stats prep = stats(prepare_us);
  j["prepare_us"] = to_json(prep);
  std::printf("  (sandbox::prepare alone, per spawn: p50 %.0f us)\n", prep.p50);
  const double cpu_vs_min = stats(cpu["supervisor"]).p50 / stats(cpu["min_c"]).p50;
  j["ratios"]["cpu_supervisor_vs_min_c_p50"] = cpu_vs_min;
  const double vs_bare = st["supervisor"].p50 / st["bare"].p50;
  const double vs_min = st["supervisor"].p50 / st["min_c"].p50;
  j["ratios"] = {{"supervisor_vs_bare_p50", vs_bare}, {"supervisor_vs_min_c_p50", vs_min}};
  j["targets"] = {{"supervisor_vs_min_c_max", 1.3}, {"supervisor_vs_bwrap_max", 0.5}};
  add_row({"1 spawn to ready", "sandboxed child vs bare fork/exec (a), p50", us(st["supervisor"].p50),
           us(st["bare"].p50), fmt("%.2fx", vs_bare), "-", "-"});
  add_row({"1 spawn to ready", "vs minimal C launcher, same recipe (b), p50", us(st["supervisor"].p50),
           us(st["min_c"].p50), fmt("%.2fx", vs_min), "<= 1.1x", vs_min <= 1.1 ? "yes" : "NO"});
  add_row({"1 spawn to ready", "(b) in CPU time per spawn (parent + children), p50", us(stats(cpu["supervisor"]).p50),
           us(stats(cpu["min_c"]).p50), fmt("%.2fx", cpu_vs_min), "-", "-"});
  if (!env.bwrap.empty()) {
    const double vs_bwrap = st["supervisor"].p50 / st["bwrap"].p50;
    j["ratios"]["supervisor_vs_bwrap_p50"] = vs_bwrap;
    add_row({"1 spawn to ready", "vs bwrap --unshare-all (c), p50", us(st["supervisor"].p50), us(st["bwrap"].p50),
             fmt("%.2fx", vs_bwrap), "<= 0.5x", vs_bwrap <= 0.5 ? "yes" : "NO"});
    if (have_static) {
      const double vs_bwrap_static = st["supervisor_static"].p50 / st["bwrap_static"].p50;
      j["ratios"]["static_child_supervisor_vs_bwrap_p50"] = vs_bwrap_static;
      add_row({"1 spawn to ready", "(c) with a static-pie child in both, p50", us(st["supervisor_static"].p50),
               us(st["bwrap_static"].p50), fmt("%.2fx", vs_bwrap_static), "<= 0.5x",
               vs_bwrap_static <= 0.5 ? "yes" : "NO"});
    }
  }
  if (have_static) {
    const double static_vs_bare = st["supervisor_static"].p50 / st["bare_static"].p50;
    j["ratios"]["static_child_supervisor_vs_bare_p50"] = static_vs_bare;
    add_row({"1 spawn to ready", "(a) with a static-pie child in both, p50", us(st["supervisor_static"].p50),
             us(st["bare_static"].p50), fmt("%.2fx", static_vs_bare), "-", "-"});
  }
  write_json(o, "spawn_ready", j);
}

// ---- 2. broker round trip
// ------------------------------------------------------------------------

std::vector<double> parse_samples_us(const std::string &text) {
  std::vector<double> v;
  std::istringstream in(text);
  double ns;
  while (in >> ns) v.push_back(ns / 1000.0);
  return v;
}

// The raw floor's answer: the decision line the supervisor sends, with the
// request's id copied in.
struct RawPeer {
  std::string decision;   // template, id "t0000000"
  std::size_t id_at = 0;  // offset of the id in the template

  explicit RawPeer(const Env &env) {
    std::string why;
    supervisor::decide(*env.explore, "grep", {{"pattern", "TODO"}, {"path", "src"}}, why);
    decision = proto::encode_line(proto::ToolDecision{"t0000000", true, why});
    id_at = decision.find("t0000000");
  }
  // Handles one line from a raw child; returns the reply to write (or empty),
  // sets *final.
  std::string_view answer(const std::string &line, bool *is_done, bool *is_final) {
    *is_done = *is_final = false;
    if (line.find("\"tool_request\"") != std::string::npos) {
      auto at = line.find("\"id\":\"");
      if (at != std::string::npos) decision.replace(id_at, 8, line, at + 6, 8);
      return decision;
    }
    if (line.find("\"tool_done\"") != std::string::npos)
      *is_done = true;
    else if (line.find("\"final\"") != std::string::npos)
      *is_final = true;
    return {};
  }
};

std::vector<double> rtt_session(asio::io_context &io, const Env &env, long n) {
  bool done = false;
  proto::Envelope env_out;
  auto s = ChildSession::create(io, session_config(env, env.bench_child, {"pingpong", std::to_string(n)}),
                                std::make_unique<StubProvider>(nullptr));
  s->start([&](const proto::Envelope &e) {
    env_out = e;
    done = true;
  });
  run_until(io, [&] { return done; });
  if (env_out.status != proto::Status::completed)
    throw std::runtime_error("broker: the child did not complete: " + env_out.reason);
  return parse_samples_us(env_out.answer.text);
}

std::vector<double> rtt_raw(const Env &env, long n) {
  Pipe in, out;
  pid_t pid =
      spawn({env.bench_child.string(), "pingpong", std::to_string(n), "--raw"}, env.child_env, in.read, out.write, -1);
  in.close_read();
  out.close_write();
  RawPeer peer(env);
  FdLines lines(out.read);
  std::vector<double> samples;
  while (auto l = lines.next()) {
    bool is_done, is_final;
    std::string_view reply = peer.answer(*l, &is_done, &is_final);
    if (!reply.empty()) write_all(in.write, reply);
    if (is_final) {
      auto d = proto::decode_child_message(*l);
      if (d) samples = parse_samples_us(std::get<proto::Final>(*d.message).answer);
    }
  }
  reap(pid);
  return samples;
}

void bench_broker(const Options &o, const Env &env, asio::io_context &io) {
  std::printf(
      "[broker] tool_request -> policy decision -> tool_decision, "
      "timed in the child\n");
  const int chunks = o.quick ? 3 : 8;
  const long per_chunk = 500,
             skip = 50;  // the first round trips of each chunk warm caches
  std::vector<double> sup, raw;
  for (int c = 0; c < chunks; ++c) {
    auto run_sup = [&] {
      auto v = rtt_session(io, env, per_chunk);
      sup.insert(sup.end(), v.begin() + std::min<long>(skip, static_cast<long>(v.size())), v.end());
    };
    auto run_raw = [&] {
      auto v = rtt_raw(env, per_chunk);
      raw.insert(raw.end(), v.begin() + std::min<long>(skip, static_cast<long>(v.size())), v.end());
    };
    if (c % 2) {
      run_sup();
      run_raw();
    } else {
      run_raw();
      run_sup();
    }
  }
  Stats s = stats(sup), r = stats(raw);
  const double ratio = s.p50 / r.p50, ratio99 = s.p99 / r.p99;
  std::printf(
      "  supervisor p50 %.1f us p99 %.1f us; raw pipes p50 %.1f us p99 "
      "%.1f us\n",
      s.p50, s.p99, r.p50, r.p99);
  json j = {{"what",
             "microseconds per tool_request/tool_decision round trip, "
             "measured in the child"},
            {"chunks", chunks},
            {"round_trips_per_chunk", per_chunk},
            {"skipped_per_chunk", skip},
            {"supervisor", to_json(s)},
            {"raw_pipes", to_json(r)},
            {"ratios", {{"p50", ratio}, {"p99", ratio99}}},
            {"targets", {{"p50_max", 2.0}}}};
  write_json(o, "broker", j);
  add_row({"2 broker round trip", "tool request via policy vs raw pipe ping-pong, p50", fmt("%.1f us", s.p50),
           fmt("%.1f us", r.p50), fmt("%.2fx", ratio), "<= 2x", ratio <= 2.0 ? "yes" : "NO"});
  add_row({"2 broker round trip", "same, p99", fmt("%.1f us", s.p99), fmt("%.1f us", r.p99), fmt("%.2fx", ratio99), "-",
           "-"});
}

// ---- 3. eight concurrent children
// ----------------------------------------------------------------

// The loop thread's clock and counters at one edge of the window. User and system time and the
// context switches come from getrusage(RUSAGE_THREAD), so the account can say where a gap is: in
// our code, in the kernel, or in waiting.
struct Window {
  Clock::time_point t;
  double cpu_us = 0, user_us = 0, sys_us = 0;
  long voluntary_switches = 0, involuntary_switches = 0;
  std::uint64_t round_trips = 0;
  double queued_us = 0;                  // the loop thread's time runnable but not running (schedstat run_delay)
  double idle_ticks = 0, all_ticks = 0;  // every CPU's, from /proc/stat
};
// The second field of /proc/thread-self/schedstat: nanoseconds this thread waited on a run queue.
double thread_queued_us() {
  double run_ns = 0, wait_ns = 0;
  if (FILE *f = std::fopen("/proc/thread-self/schedstat", "r")) {
    if (std::fscanf(f, "%lf %lf", &run_ns, &wait_ns) != 2) wait_ns = 0;
    std::fclose(f);
  }
  return wait_ns / 1e3;
}
// Idle and total ticks of the "cpu" line of /proc/stat (idle plus iowait count as idle).
void machine_ticks(double &idle, double &all) {
  idle = all = 0;
  FILE *f = std::fopen("/proc/stat", "r");
  if (!f) return;
  double v[8] = {};
  if (std::fscanf(f, "cpu %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) ==
      8) {
    idle = v[3] + v[4];
    for (double x : v) all += x;
  }
  std::fclose(f);
}
Window window_now(std::uint64_t round_trips) {
  Window w;
  w.t = Clock::now();
  w.cpu_us = thread_cpu_us();
  struct rusage ru {};
  ::getrusage(RUSAGE_THREAD, &ru);
  w.user_us = static_cast<double>(ru.ru_utime.tv_sec) * 1e6 + static_cast<double>(ru.ru_utime.tv_usec);
  w.sys_us = static_cast<double>(ru.ru_stime.tv_sec) * 1e6 + static_cast<double>(ru.ru_stime.tv_usec);
  w.voluntary_switches = ru.ru_nvcsw;
  w.involuntary_switches = ru.ru_nivcsw;
  w.round_trips = round_trips;
  w.queued_us = thread_queued_us();
  machine_ticks(w.idle_ticks, w.all_ticks);
  return w;
}
struct FloodResult {
  double msgs_per_s = 0, cpu_us_per_msg = 0, user_us_per_msg = 0, sys_us_per_msg = 0;
  double voluntary_switches_per_msg = 0, involuntary_switches_per_msg = 0;
  double queued_us_per_msg = 0;  // the loop runnable but waiting for a CPU
  double machine_idle = -1;      // the fraction of every CPU's time idle in the window (-1: unknown)
  std::uint64_t msgs = 0;
  bool valid = true;  // false: a child finished before the last one started, so no window
};
FloodResult invalid_flood() {
  FloodResult r;
  r.valid = false;
  return r;
}
FloodResult flood_result(const Window &a, const Window &b) {
  FloodResult r;
  r.msgs = (b.round_trips - a.round_trips) * 3;  // tool_request, tool_decision, tool_done
  const double secs = us_between(a.t, b.t) / 1e6, msgs = static_cast<double>(r.msgs);
  r.msgs_per_s = msgs / secs;
  r.cpu_us_per_msg = (b.cpu_us - a.cpu_us) / msgs;
  r.user_us_per_msg = (b.user_us - a.user_us) / msgs;
  r.sys_us_per_msg = (b.sys_us - a.sys_us) / msgs;
  r.voluntary_switches_per_msg = static_cast<double>(b.voluntary_switches - a.voluntary_switches) / msgs;
  r.involuntary_switches_per_msg = static_cast<double>(b.involuntary_switches - a.involuntary_switches) / msgs;
  r.queued_us_per_msg = (b.queued_us - a.queued_us) / msgs;
  if (b.all_ticks > a.all_ticks) r.machine_idle = (b.idle_ticks - a.idle_ticks) / (b.all_ticks - a.all_ticks);
  return r;
}
json to_json(const FloodResult &r) {
  return {{"msgs_per_s", r.msgs_per_s},
          {"cpu_us_per_msg", r.cpu_us_per_msg},
          {"user_us_per_msg", r.user_us_per_msg},
          {"sys_us_per_msg", r.sys_us_per_msg},
          {"voluntary_switches_per_msg", r.voluntary_switches_per_msg},
          {"involuntary_switches_per_msg", r.involuntary_switches_per_msg},
          {"queued_us_per_msg", r.queued_us_per_msg},
          {"machine_idle_fraction", r.machine_idle},
          {"msgs", r.msgs}};
}

// The window opens when every child is talking (its first tool request decided, as the relay's
// opens at its first reply: after the hello, bench_child encodes its lines before the first
// request) and closes when the first one finishes; a round where one finished before the last one
// started has none.
FloodResult flood_session(asio::io_context &io, const Env &env, int children, long n) {
  std::uint64_t dones = 0;
  int talking = 0, finished = 0;
  bool closed = false, early = false;
  std::vector<bool> talked(static_cast<std::size_t>(children), false);
  Window start, stop;
  std::vector<std::shared_ptr<ChildSession>> sessions;
  for (int k = 0; k < children; ++k) {
    SessionConfig cfg = session_config(env, env.bench_child, {"pingpong", std::to_string(n)});
    cfg.on_event = [&, k](const json &e) {
      const auto &ev = e["event"].get_ref<const std::string &>();
      if (ev == "tool_done") {
        ++dones;
      } else if (ev == "tool_decision") {
        if (!talked[static_cast<std::size_t>(k)]) {
          talked[static_cast<std::size_t>(k)] = true;
          if (++talking == children) start = window_now(dones);
        }
      } else if (ev == "final" && !closed) {
        closed = true;
        early = talking < children;
        stop = window_now(dones);
      }
    };
    sessions.push_back(ChildSession::create(io, std::move(cfg), std::make_unique<StubProvider>(nullptr)));
  }
  std::string failure;
  for (auto &s : sessions)
    s->start([&](const proto::Envelope &e) {
      ++finished;
      if (e.status != proto::Status::completed) failure = e.reason;
    });
  run_until(io, [&] { return finished == children; });
  if (!failure.empty()) throw std::runtime_error("concurrent: a child failed: " + failure);
  if (!closed) throw std::runtime_error("concurrent: no measurement window");
  if (early) return invalid_flood();
  return flood_result(start, stop);
}

// The floor: one thread relaying the same bytes for every child with poll(2),
// no parsing. With `sandboxed`, each child runs under the explore preset's sandbox (prepared and
// launched as the supervisor does, its CPU cgroup and new session included) rather than as a plain
// process: the relay then differs from the supervisor only in the broker, not in how the kernel
// schedules the children.
FloodResult flood_raw(const Env &env, int children, long n, bool sandboxed = false) {
  struct Kid {
    std::unique_ptr<Pipe> in, out;
    pid_t pid = -1;
    sandbox::Child launched;
    std::unique_ptr<FdLines> lines;
    std::string buf;
    bool seen = false, eof = false;
  };
  RawPeer peer(env);
  std::vector<Kid> kids(static_cast<std::size_t>(children));
  for (auto &k : kids) {
    k.in = std::make_unique<Pipe>();
    k.out = std::make_unique<Pipe>();
    std::vector<std::string> argv = {env.bench_child.string(), "pingpong", std::to_string(n), "--raw"};
    if (sandboxed) {
      sandbox::LaunchRequest req = launch_request(env.bench_child, argv, env.workspace, k.in->read, k.out->write,
                                                  ::open("/dev/null", O_RDWR | O_CLOEXEC));
      req.extra_env = {"SUBAGENT_CHILD_ID=000000000000"};
      sandbox::Launched l = sandbox::prepare_and_launch(env.explore->sandbox, req);
      ::close(req.stderr_fd);
      k.launched = std::move(l.child);
      k.pid = k.launched.pid;
    } else {
      k.pid = spawn(argv, env.child_env, k.in->read, k.out->write, -1);
    }
    k.in->close_read();
    k.out->close_write();
  }
  std::uint64_t dones = 0;
  int seen = 0, open_kids = children;
  bool closed = false, early = false;
  Window start, stop;
  std::vector<pollfd> fds(kids.size());
  while (open_kids > 0) {
    for (std::size_t i = 0; i < kids.size(); ++i) fds[i] = {kids[i].eof ? -1 : kids[i].out->read, POLLIN, 0};
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      fail_errno("poll");
    }
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      Kid &k = kids[i];
      char chunk[65536];
      ssize_t got = ::read(k.out->read, chunk, sizeof chunk);
      if (got <= 0) {
        k.eof = true;
        --open_kids;
        continue;
      }
      k.buf.append(chunk, static_cast<std::size_t>(got));
      std::size_t pos = 0, nl;
      while ((nl = k.buf.find('\n', pos)) != std::string::npos) {
        std::string line = k.buf.substr(pos, nl - pos);
        pos = nl + 1;
        bool is_done, is_final;
        std::string_view reply = peer.answer(line, &is_done, &is_final);
        if (!reply.empty()) {
          if (!k.seen) {
            k.seen = true;
            if (++seen == children) start = window_now(dones);
          }
          write_all(k.in->write, reply);
        }
        if (is_done) ++dones;
        if (is_final && !closed) {
          closed = true;
          early = seen < children;
          stop = window_now(dones);
        }
      }
      k.buf.erase(0, pos);
    }
  }
  for (auto &k : kids) {
    reap(k.pid);
    if (k.launched.pidfd >= 0) ::close(k.launched.pidfd);
    sandbox::release(k.launched);
  }
  if (!closed || seen != children) throw std::runtime_error("concurrent raw: no measurement window");
  if (early) return invalid_flood();
  return flood_result(start, stop);
}

void bench_concurrent(const Options &o, const Env &env, asio::io_context &io) {
  std::printf(
      "[concurrent] 8 children, each doing sequential tool round trips "
      "as fast as it can\n");
  const int children = 8, rounds = o.quick ? 1 : 3;
  const long n = o.quick ? 1500 : 3000;
  std::vector<double> sup_rate, sup_cpu, raw_rate, raw_cpu, sbx_rate;
  json runs = json::array();
  int skipped = 0;
  for (int r = 0; r < rounds; ++r) {
    FloodResult a = flood_session(io, env, children, n);
    FloodResult b = flood_raw(env, children, n);
    FloodResult c = flood_raw(env, children, n, /*sandboxed=*/true);
    if (!a.valid || !b.valid || !c.valid) {
      // A loaded machine can start the last child after the first is done: the round measures
      // nothing, so it is left out (and said), and one more is run in its place, up to twice.
      std::printf("  round %d: left out, a child of the %s finished before the last one started\n", r,
                  !a.valid   ? "supervisor"
                  : !b.valid ? "raw relay"
                             : "sandboxed raw relay");
      if (++skipped <= 2) --r;
      continue;
    }
    sup_rate.push_back(a.msgs_per_s);
    sup_cpu.push_back(a.cpu_us_per_msg);
    raw_rate.push_back(b.msgs_per_s);
    raw_cpu.push_back(b.cpu_us_per_msg);
    sbx_rate.push_back(c.msgs_per_s);
    runs.push_back(
        {{"supervisor", to_json(a)}, {"raw_relay", to_json(b)}, {"raw_relay_sandboxed_children", to_json(c)}});
    std::printf(
        "  round %d: supervisor %.0f msg/s, %.2f us CPU/msg (user %.2f, sys %.2f; %.2f+%.2f switches/msg; "
        "queued %.2f us/msg; machine idle %.0f%%)\n"
        "           raw relay %.0f msg/s, %.2f us CPU/msg (user %.2f, sys %.2f; %.2f+%.2f switches/msg; "
        "queued %.2f us/msg; machine idle %.0f%%)\n",
        r, a.msgs_per_s, a.cpu_us_per_msg, a.user_us_per_msg, a.sys_us_per_msg, a.voluntary_switches_per_msg,
        a.involuntary_switches_per_msg, a.queued_us_per_msg, 100 * a.machine_idle, b.msgs_per_s, b.cpu_us_per_msg,
        b.user_us_per_msg, b.sys_us_per_msg, b.voluntary_switches_per_msg, b.involuntary_switches_per_msg,
        b.queued_us_per_msg, 100 * b.machine_idle);
    std::printf(
        "           raw relay, sandboxed children %.0f msg/s, %.2f us CPU/msg (%.2f+%.2f switches/msg; queued %.2f "
        "us/msg; machine idle %.0f%%)\n",
        c.msgs_per_s, c.cpu_us_per_msg, c.voluntary_switches_per_msg, c.involuntary_switches_per_msg,
        c.queued_us_per_msg, 100 * c.machine_idle);
  }
  if (sup_rate.empty()) throw std::runtime_error("concurrent: every round was left out (is the machine loaded?)");
  const double rate = stats(sup_rate).p50, cpu = stats(sup_cpu).p50;
  const double rrate = stats(raw_rate).p50, rcpu = stats(raw_cpu).p50, srate = stats(sbx_rate).p50;
  const double capacity = 1e6 / cpu;  // messages per second one core of loop could carry
  json j = {
      {"children", children},
      {"round_trips_per_child", n},
      {"runs", runs},
      {"supervisor", {{"msgs_per_s_p50", rate}, {"cpu_us_per_msg_p50", cpu}, {"loop_capacity_msgs_per_s", capacity}}},
      {"raw_relay", {{"msgs_per_s_p50", rrate}, {"cpu_us_per_msg_p50", rcpu}}},
      {"raw_relay_sandboxed_children", {{"msgs_per_s_p50", srate}}},
      {"ratios",
       {{"cpu_per_msg_vs_raw", cpu / rcpu}, {"rate_vs_raw", rate / rrate}, {"rate_vs_raw_sandboxed", rate / srate}}},
      {"targets", {{"loop_capacity_min_msgs_per_s", 50000}, {"rate_vs_raw_min", 0.6}}}};
  write_json(o, "concurrent", j);
  add_row({"3 eight children", "aggregate messages/s vs one-thread raw relay", fmt("%.0f/s", rate),
           fmt("%.0f/s", rrate), fmt("%.2fx", rate / rrate), ">= 0.6x", rate / rrate >= 0.6 ? "yes" : "NO"});
  add_row({"3 eight children", "same, the relay's children in the preset's sandbox", fmt("%.0f/s", rate),
           fmt("%.0f/s", srate), fmt("%.2fx", rate / srate), "-", "-"});
  add_row({"3 eight children", "supervisor CPU per message vs raw relay", fmt("%.2f us", cpu), fmt("%.2f us", rcpu),
           fmt("%.2fx", cpu / rcpu), "-", "-"});
  add_row({"3 eight children", "loop capacity (1 core / CPU per message)", fmt("%.0f/s", capacity), "50000/s",
           fmt("%.2fx", capacity / 50000), ">= 1x", capacity >= 50000 ? "yes" : "NO"});
}

// ---- 4. memory
// -----------------------------------------------------------------------------------

void bench_memory(const Options &o, const Env &env, asio::io_context &io) {
  std::printf("[memory] live children waiting for their first model turn\n");
  const int k = o.quick ? 8 : 16, rounds = o.quick ? 2 : 4;
  std::vector<double> rss_per_child, heap_per_child, child_rss, child_pss;
  // Warm-up: one child, so one-time state (probes, caches) is not charged to
  // the children.
  spawn_session(io, env, env.subagent_child);
  for (int r = 0; r < rounds; ++r) {
    ::malloc_trim(0);
    const Memory before = memory_of(0);
    const std::size_t heap_before = ::mallinfo2().uordblks;
    int ready = 0, finished = 0;
    std::vector<pid_t> pids;
    std::vector<std::shared_ptr<ChildSession>> sessions;
    for (int i = 0; i < k; ++i) {
      SessionConfig cfg = session_config(env, env.subagent_child, {});
      cfg.on_event = [&](const json &e) {
        if (e["event"] == "started") pids.push_back(e["pid"].get<pid_t>());
      };
      sessions.push_back(ChildSession::create(io, std::move(cfg), std::make_unique<StubProvider>([&] { ++ready; })));
      sessions.back()->start([&](const proto::Envelope &) { ++finished; });
    }
    run_until(io, [&] { return ready == k || finished > 0; });
    if (ready != k) throw std::runtime_error("memory: a child ended early");
    const Memory after = memory_of(0);
    const std::size_t heap_after = ::mallinfo2().uordblks;
    rss_per_child.push_back((after.rss_kib - before.rss_kib) / k);
    heap_per_child.push_back((static_cast<double>(heap_after) - static_cast<double>(heap_before)) / 1024.0 / k);
    for (pid_t p : pids) {
      Memory m = memory_of(p);
      child_rss.push_back(m.rss_kib);
      child_pss.push_back(m.pss_kib);
    }
    for (auto &s : sessions) s->cancel("benchmark teardown");
    run_until(io, [&] { return finished == k; });
    sessions.clear();
    std::printf("  round %d: supervisor +%.0f KiB RSS, +%.0f KiB heap per child\n", r, rss_per_child.back(),
                heap_per_child.back());
  }
  const double rss = stats(rss_per_child).max;  // the first (coldest) round charges the most
  const double heap = stats(heap_per_child).p50;
  const double per_child = std::max(rss, heap);
  const Stats crss = stats(child_rss), cpss = stats(child_pss);
  json j = {{"children_per_round", k},
            {"rounds", rounds},
            {"supervisor_rss_kib_per_child", rss_per_child},
            {"supervisor_heap_kib_per_child", heap_per_child},
            {"supervisor_kib_per_child_reported", per_child},
            {"child_rss_kib", to_json(crss)},
            {"child_pss_kib", to_json(cpss)},
            {"targets", {{"supervisor_kib_per_child_max", 256}, {"child_rss_kib_max", 8192}}}};
  write_json(o, "memory", j);
  add_row({"4 memory", "supervisor per live child (max of RSS, heap)", fmt("%.0f KiB", per_child), "256 KiB",
           fmt("%.2fx", per_child / 256), "<= 1x", per_child <= 256 ? "yes" : "NO"});
  add_row({"4 memory", "child baseline RSS, p50 (PSS " + fmt("%.0f KiB", cpss.p50) + ")", fmt("%.0f KiB", crss.p50),
           "8192 KiB", fmt("%.2fx", crss.p50 / 8192), "<= 1x", crss.p50 <= 8192 ? "yes" : "NO"});
}

// ---- 5. enforcement precision
// --------------------------------------------------------------------

struct Enforced {
  double late_us = 0;  // envelope time minus the moment enforcement was due
  double kill_late_us = 0;
};

SessionConfig stubborn_config(const Env &env) {
  SessionConfig cfg = session_config(env, env.bench_child, {"stubborn"});
  cfg.preset = env.worker;
  cfg.budgets = env.worker->budgets;
  return cfg;
}

Enforced deadline_once(asio::io_context &io, const Env &env, std::uint64_t timeout_ms, std::uint64_t grace_ms) {
  SessionConfig cfg = stubborn_config(env);
  cfg.budgets.timeout_ms = timeout_ms;
  cfg.budgets.wrap_up_grace_ms = grace_ms;
  Clock::time_point started, killed, enveloped;
  bool done = false;
  proto::Status status{};
  std::string reason;
  cfg.on_event = [&](const json &e) {
    if (e["event"] == "started")
      started = Clock::now();
    else if (e["event"] == "kill")
      killed = Clock::now();
  };
  auto s = ChildSession::create(io, std::move(cfg), std::make_unique<StubProvider>(nullptr));
  s->start([&](const proto::Envelope &e) {
    enveloped = Clock::now();
    status = e.status;
    reason = e.reason;
    done = true;
  });
  run_until(io, [&] { return done; });
  if (status != proto::Status::timeout)
    throw std::runtime_error("enforcement: expected a timeout, got " + std::string(proto::to_string(status)) + ": " +
                             reason);
  const auto due = started + std::chrono::milliseconds(timeout_ms + grace_ms);
  return {us_between(due, enveloped), us_between(due, killed)};
}

double cancel_once(asio::io_context &io, const Env &env) {
  SessionConfig cfg = stubborn_config(env);
  bool hello = false, done = false;
  Clock::time_point enveloped;
  cfg.on_event = [&](const json &e) {
    if (e["event"] == "hello") hello = true;
  };
  auto s = ChildSession::create(io, std::move(cfg), std::make_unique<StubProvider>(nullptr));
  s->start([&](const proto::Envelope &e) {
    enveloped = Clock::now();
    done = e.status == proto::Status::cancelled;
  });
  run_until(io, [&] { return hello; });
  asio::steady_timer settle(io, std::chrono::milliseconds(20));  // let it fork its grandchild
  bool settled = false;
  settle.async_wait([&](boost::system::error_code) { settled = true; });
  run_until(io, [&] { return settled; });
  const auto t0 = Clock::now();
  s->cancel("benchmark");
  run_until(io, [&] { return enveloped != Clock::time_point{}; });
  if (!done) throw std::runtime_error("enforcement: cancel did not give a cancelled envelope");
  return us_between(t0, enveloped);
}

// The kernel floor: SIGKILL to the same sandboxed tree (launched directly with
// the same plan), until the pid is reaped and the grandchild's copy of stdout
// is closed.
double kill_floor_once(const Env &env) {
  Pipe out;
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  sandbox::LaunchRequest req = launch_request(env.bench_child, {env.bench_child.string(), "stubborn", "--raw"},
                                              env.workspace, null, out.write, null);
  sandbox::PlanPtr plan = sandbox::prepare(env.worker->sandbox, req);
  sandbox::Child c = sandbox::launch(*plan);
  ::close(null);
  out.close_write();  // from here, EOF on stdout means the whole tree is gone
  if (c.pid <= 0) throw std::runtime_error("enforcement: launch gave no pid");
  FdLines lines(out.read);
  auto ready = lines.next();
  ::usleep(20'000);  // as for cancel: the tree has settled
  const auto t0 = Clock::now();
  ::kill(-c.pid, SIGKILL);  // c.pid > 0: its process group
  kill_one(c.pid);
  siginfo_t info{};
  while (::waitid(P_PIDFD, static_cast<id_t>(c.pidfd), &info, WEXITED) < 0 && errno == EINTR) {
  }
  lines.drain();
  const double t = us_between(t0, Clock::now());
  ::close(c.pidfd);
  sandbox::release(c);
  if (!ready) throw std::runtime_error("enforcement: the raw stubborn child did not start");
  return t;
}

void bench_enforcement(const Options &o, const Env &env, asio::io_context &io) {
  std::printf(
      "[enforcement] deadline+grace -> envelope (tree dead), cancel -> "
      "envelope\n");
  const int iterations = o.quick ? 8 : 30;
  const std::uint64_t timeout_ms = 100, grace_ms = 50;
  std::vector<double> deadline, kill_late, cancel, floor;
  for (int i = 0; i < iterations + 2; ++i) {
    Enforced d = deadline_once(io, env, timeout_ms, grace_ms);
    double c = cancel_once(io, env);
    double f = kill_floor_once(env);
    if (i < 2) continue;  // warm-up
    deadline.push_back(d.late_us);
    kill_late.push_back(d.kill_late_us);
    cancel.push_back(c);
    floor.push_back(f);
  }
  const Stats d = stats(deadline), k = stats(kill_late), c = stats(cancel), f = stats(floor);
  json j = {{"iterations", iterations},
            {"timeout_ms", timeout_ms},
            {"grace_ms", grace_ms},
            {"what",
             "microseconds: deadline = envelope time minus (start + "
             "timeout + grace); kill = the kill "
             "event minus the same; cancel = envelope minus cancel(); "
             "floor = SIGKILL of the same "
             "sandboxed tree until reaped and its stdout closed"},
            {"deadline_to_envelope", to_json(d)},
            {"deadline_to_kill", to_json(k)},
            {"cancel_to_envelope", to_json(c)},
            {"kill_floor", to_json(f)},
            {"ratios", {{"deadline_vs_floor_p50", d.p50 / f.p50}, {"cancel_vs_floor_p50", c.p50 / f.p50}}},
            {"targets", {{"p99_max_us", 50000}}}};
  write_json(o, "enforcement", j);
  std::printf("  kill event lateness p50 %.0f us p99 %.0f us\n", k.p50, k.p99);
  add_row({"5 enforcement", "deadline+grace to dead tree+envelope, p50", us(d.p50), us(f.p50) + " (kill floor)",
           fmt("%.2fx", d.p50 / f.p50), "-", "-"});
  add_row({"5 enforcement", "deadline+grace to dead tree+envelope, p99", us(d.p99), "50 ms",
           fmt("%.2fx", d.p99 / 50000), "< 1x", d.p99 < 50000 ? "yes" : "NO"});
  add_row({"5 enforcement", "cancel to envelope, p50", us(c.p50), us(f.p50) + " (kill floor)",
           fmt("%.2fx", c.p50 / f.p50), "-", "-"});
  add_row({"5 enforcement", "cancel to envelope, p99", us(c.p99), "50 ms", fmt("%.2fx", c.p99 / 50000), "< 1x",
           c.p99 < 50000 ? "yes" : "NO"});
}

// ---- 6. tools inside the sandbox
// -----------------------------------------------------------------

// bench_tool_runner under the explore sandbox, with `workspace` as its
// workspace.
class ToolRunner {
 public:
  ToolRunner(const Env &env, const fs::path &workspace) {
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    sandbox::LaunchRequest req =
        launch_request(env.tool_runner, {env.tool_runner.string()}, workspace, in_.read, out_.write, null);
    // The grep benchmark searches /usr/include, a system directory the workspace guard refuses by
    // default; explore only reads it, which is what the guard's exception is for.
    req.allow_unsafe_workspace = true;
    sandbox::PlanPtr plan = sandbox::prepare(env.explore->sandbox, req);
    child_ = sandbox::launch(*plan);
    ::close(null);
    in_.close_read();
    out_.close_write();
    lines_ = std::make_unique<FdLines>(out_.read);
  }
  ~ToolRunner() {
    in_.close_write();
    if (child_.pid > 0) {
      lines_->drain();
      reap(child_.pid);
      ::close(child_.pidfd);
      sandbox::release(child_);
    }
  }
  json run(const std::string &tool, const json &args) {
    write_all(in_.write, tool + " " + args.dump() + "\n");
    auto l = lines_->next();
    if (!l) throw std::runtime_error("tools: the runner died");
    return json::parse(*l);
  }

 private:
  Pipe in_, out_;
  sandbox::Child child_;
  std::unique_ptr<FdLines> lines_;
};

// Runs a peer command with stdout drained through a pipe; returns microseconds
// and the output size.
std::pair<double, std::size_t> run_peer(const std::vector<std::string> &argv, const fs::path &cwd) {
  Pipe out;
  const auto t0 = Clock::now();
  pid_t pid = spawn(argv, {"PATH=/usr/bin:/bin", "LC_ALL=C"}, -1, out.write, -1, cwd.c_str());
  out.close_write();
  std::size_t bytes = 0;
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(out.read, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes += static_cast<std::size_t>(n);
  }
  reap(pid);
  return {us_between(t0, Clock::now()), bytes};
}

fs::path make_file_tree() {
  const fs::path root = "/tmp/subagent-bench-files";
  if (fs::exists(root / ".complete")) return root;
  fs::remove_all(root);
  std::printf("  creating 2 x 100,000 files under %s (once)\n", root.c_str());
  std::fflush(stdout);
  for (int d = 0; d < 100; ++d) {
    char dir[64];
    std::snprintf(dir, sizeof dir, "tree/d%03d", d);
    fs::create_directories(root / dir);
    for (int f = 0; f < 1000; ++f) {
      char name[96];
      std::snprintf(name, sizeof name, "%s/f%05d.%s", dir, d * 1000 + f, f % 2 ? "h" : "c");
      int fd = ::open((root / name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
    }
  }
  fs::create_directories(root / "flat");
  for (int f = 0; f < 100000; ++f) {
    char name[64];
    std::snprintf(name, sizeof name, "flat/e%06d.txt", f);
    int fd = ::open((root / name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  std::ofstream(root / ".complete") << "ok\n";
  return root;
}

void bench_tools(const Options &o, const Env &env) {
  std::printf("[tools] the child's tools inside the sandbox vs ripgrep / find / ls\n");
  const int iterations = o.quick ? 3 : 9, warmup = 1;
  const fs::path include = "/usr/include";
  const fs::path files = make_file_tree();
  struct Case {
    std::string name, tool;
    json args;
    fs::path workspace;
    std::vector<std::string> peer_argv;
    std::string peer_name;
    std::string target;  // "" for none
    double target_max = 0;
  };
  const std::vector<std::string> rg_common = {env.rg,          "--no-config", "--no-ignore", "--hidden",
                                              "--no-messages", "-n",          "-s"};
  auto rg = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = rg_common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string lit = "EPOLLEXCLUSIVE", re = R"(define\s+[A-Z_]+_MAGIC\s+0x)";
  std::vector<Case> cases;
  if (!env.rg.empty()) {
    cases.push_back({"grep literal",
                     "grep",
                     {{"pattern", lit}, {"max_matches", 10000}, {"max_per_file", 10000}},
                     include,
                     rg({"-e", lit, "."}),
                     "rg",
                     "<= 2x",
                     2.0});
    cases.push_back({"grep literal",
                     "grep",
                     {{"pattern", lit}, {"max_matches", 10000}, {"max_per_file", 10000}},
                     include,
                     rg({"-j1", "-e", lit, "."}),
                     "rg -j1",
                     "",
                     0});
    cases.push_back({"grep regex",
                     "grep",
                     {{"pattern", re}, {"max_matches", 10000}, {"max_per_file", 10000}},
                     include,
                     rg({"-e", re, "."}),
                     "rg",
                     "<= 2x",
                     2.0});
    cases.push_back({"grep regex",
                     "grep",
                     {{"pattern", re}, {"max_matches", 10000}, {"max_per_file", 10000}},
                     include,
                     rg({"-j1", "-e", re, "."}),
                     "rg -j1",
                     "",
                     0});
  }
  cases.push_back({"glob **/*.c, 100k files",
                   "glob",
                   {{"pattern", "**/*.c"}, {"max_results", 200}},
                   files / "tree",
                   {"/usr/bin/find", ".", "-name", "*.c"},
                   "find",
                   "",
                   0});
  cases.push_back({"list_dir, 100k entries",
                   "list_dir",
                   {{"path", "."}, {"max_entries", 100000}},
                   files / "flat",
                   {"/bin/ls", "-l"},
                   "ls -l",
                   "",
                   0});

  json j = {{"iterations", iterations}, {"cases", json::array()}};
  std::map<fs::path, std::unique_ptr<ToolRunner>> runners;
  for (const Case &c : cases) {
    auto &runner = runners[c.workspace];
    if (!runner) runner = std::make_unique<ToolRunner>(env, c.workspace);
    std::vector<double> tool_us, peer_us;
    std::string tail;
    std::size_t peer_bytes = 0;
    for (int i = 0; i < warmup + iterations; ++i) {
      auto one_tool = [&] {
        json r = runner->run(c.tool, c.args);
        tail = r.value("tail", "");
        return r["ns"].get<double>() / 1000.0;
      };
      auto one_peer = [&] {
        auto [t, b] = run_peer(c.peer_argv, c.workspace);
        peer_bytes = b;
        return t;
      };
      double a, b;
      if (i % 2) {
        a = one_tool();
        b = one_peer();
      } else {
        b = one_peer();
        a = one_tool();
      }
      if (i < warmup) continue;
      tool_us.push_back(a);
      peer_us.push_back(b);
    }
    const Stats t = stats(tool_us), p = stats(peer_us);
    const double ratio = t.p50 / p.p50;
    std::printf("  %-26s tool p50 %.1f ms; %s p50 %.1f ms; tool says: %s\n", c.name.c_str(), t.p50 / 1000,
                c.peer_name.c_str(), p.p50 / 1000, tail.c_str());
    j["cases"].push_back({{"name", c.name},
                          {"tool", c.tool},
                          {"args", c.args},
                          {"workspace", c.workspace.string()},
                          {"peer", c.peer_argv},
                          {"tool_us", to_json(t)},
                          {"peer_us", to_json(p)},
                          {"tool_summary", tail},
                          {"peer_output_bytes", peer_bytes},
                          {"ratio_p50", ratio}});
    add_row({"6 tools", c.name + " vs " + c.peer_name + ", p50", us(t.p50), us(p.p50), fmt("%.2fx", ratio),
             c.target.empty() ? "-" : c.target, c.target.empty() ? "-" : (ratio <= c.target_max ? "yes" : "NO")});
  }
  runners.clear();
  write_json(o, "tools", j);
}

// ---- 7. broker round trip while eight children spawn
// ---------------------------------------------

// Runs a command (absolute path) to completion; throws when it fails.
void run_checked(const std::vector<std::string> &argv, const fs::path &cwd) {
  pid_t pid = spawn(argv, {"PATH=/usr/bin:/bin", "HOME=" + cwd.string(), "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C"}, -1, -1,
                    -1, cwd.c_str());
  int status = reap(pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("spawnload: '" + argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + "' failed");
}

// A git repository of `files` files of about 2 KiB in 40 directories, one
// commit: what an implementation child's worktree is created from.
void make_repository(const fs::path &repo, int files) {
  fs::create_directories(repo);
  for (int f = 0; f < files; ++f) {
    char rel[64];
    std::snprintf(rel, sizeof rel, "src/d%02d/f%04d.c", f % 40, f);
    fs::create_directories((repo / rel).parent_path());
    std::ofstream out(repo / rel);
    for (int line = 0; line < 40; ++line)
      out << "int f" << f << "_" << line << "(int x) { return x * " << line << "; } /* padding padding */\n";
  }
  const std::string git = "/usr/bin/git";
  run_checked({git, "init", "-q"}, repo);
  run_checked({git, "add", "-A"}, repo);
  run_checked({git, "-c", "user.name=bench", "-c", "user.email=bench@invalid", "commit", "-q", "-m", "bench"}, repo);
}

// The policy directory with explore and implementation copied, explore's
// tool-call and answer budgets raised so that one child can make a round trip
// every millisecond for the whole run and report every sample.
void copy_policies(const fs::path &to) {
  fs::create_directories(to);
  for (const auto &f : fs::directory_iterator(fs::path(SUBAGENT_SOURCE_DIR) / "policies")) {
    std::ifstream in(f.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (f.path().filename() == "explore.json") {
      for (auto [from, repl] :
           {std::pair<std::string, std::string>{"\"max_tool_calls\": 200", "\"max_tool_calls\": 10000000"},
            {"\"answer_bytes\": 48000", "\"answer_bytes\": 8000000"}}) {
        auto at = text.find(from);
        if (at == std::string::npos) throw std::runtime_error("spawnload: explore.json has no " + from);
        text.replace(at, from.size(), repl);
      }
    }
    std::ofstream(to / f.path().filename()) << text;
  }
}

struct Sample {
  double start_us;  // steady_clock, microseconds since its epoch
  double value_us;
};

double steady_us(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

// A fresh directory /tmp/subagent-bench-NAME-XXXXXX, removed with everything in it when this goes
// (also when a benchmark throws).
struct TempRoot {
  explicit TempRoot(const std::string &name) {
    std::string tmpl = "/tmp/subagent-bench-" + name + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) fail_errno("mkdtemp");
    path = fs::canonical(tmpl);
  }
  TempRoot(const TempRoot &) = delete;
  TempRoot &operator=(const TempRoot &) = delete;
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

// What a bench_child that ran `paced` answers: one sample per round trip, its start and its duration.
std::vector<Sample> paced_samples(const std::string &answer) {
  std::vector<Sample> out;
  std::istringstream in(answer);
  std::string item;
  while (in >> item) {
    auto colon = item.find(':');
    if (colon == std::string::npos) continue;
    out.push_back({std::stod(item.substr(0, colon)) / 1000.0, std::stod(item.substr(colon + 1)) / 1000.0});
  }
  return out;
}

std::vector<double> values_of(const std::vector<Sample> &v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (const Sample &x : v) out.push_back(x.value_us);
  return out;
}

// A Hub's configuration for bench_child children (they do what their brief says) in `root`: the
// policies with explore's budgets raised, a replay model no child calls, locks and state under root.
// Transcripts are the caller's to set.
supervisor::HubConfig brief_hub_config(const Env &env, const fs::path &root, std::size_t max_concurrent) {
  copy_policies(root / "policies");
  std::ofstream(root / "model.jsonl") << "{\"content\": \"unused: bench_child never asks for a turn\"}\n";
  supervisor::HubConfig cfg;
  cfg.policy_dir = root / "policies";
  cfg.child_executable = env.bench_child;
  cfg.child_args = {"brief"};
  cfg.max_concurrent = max_concurrent;
  cfg.max_per_turn = supervisor::kMaxPerTurnCeiling;
  cfg.default_model = "replay:" + (root / "model.jsonl").string();
  cfg.parent = "bench";
  cfg.workspaces = {root / "locks", root / "state"};
  cfg.on_log = [](const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return cfg;
}

// The loop's own lateness: a timer due every 2 ms; how late each one ran goes into `into` while
// the probe runs.
class LatenessProbe {
 public:
  explicit LatenessProbe(asio::io_context &io) : timer_(io) {}
  void start(std::vector<Sample> *into) {
    into_ = into;
    arm(Clock::now());
  }
  void stop() {
    into_ = nullptr;
    timer_.cancel();
  }

 private:
  void arm(Clock::time_point due) {
    timer_.expires_at(due);
    timer_.async_wait([this, due](boost::system::error_code ec) {
      if (ec || !into_) return;
      const auto now = Clock::now();
      into_->push_back({steady_us(due), us_between(due, now)});
      arm(std::max(due + std::chrono::milliseconds(2), now));
    });
  }
  asio::steady_timer timer_;
  std::vector<Sample> *into_ = nullptr;
};

void bench_spawnload(const Options &o, const Env &env, asio::io_context &io) {
  std::printf(
      "[spawnload] one child's broker round trip while eight others "
      "spawn at once, all through one Hub\n");
  const double seconds = o.quick ? 10 : 30;
  const auto quiet = std::chrono::milliseconds(600);
  const int burst = 8;
  const TempRoot temp("load");
  const fs::path &root = temp.path;
  const fs::path repo = root / "repo";
  make_repository(repo, 1000);
  supervisor::HubConfig cfg = brief_hub_config(env, root, burst + 1);
  supervisor::TranscriptOptions topt;
  topt.dir = root / "transcripts";  // the real path: transcripts written and fsync'd as in serve,
  topt.background = true;           // on the store's writer thread, as serve, mcp and run set it
  cfg.transcripts = std::make_shared<supervisor::TranscriptStore>(topt, supervisor::default_scrubber());
  cfg.max_line = 16u << 20;
  std::string pinger_id;
  bool pinger_hello = false;
  cfg.on_event = [&](const json &e) {
    if (!pinger_id.empty() && e.value("child", "") == pinger_id && e.value("event", "") == "hello") pinger_hello = true;
  };
  supervisor::Hub hub(io, cfg);

  std::vector<Sample> lateness;
  LatenessProbe probe(io);

  std::optional<proto::Envelope> pinger_env;
  supervisor::SpawnRequest pinger;
  pinger.preset = "explore";
  pinger.brief = fmt("paced %.0f 1000", seconds);
  pinger.description = "bench: the child whose round trips are timed";
  pinger.workspace = repo;
  pinger_id = hub.spawn(pinger, [&](const proto::Envelope &e) { pinger_env = e; });
  run_until(io, [&] { return pinger_hello || pinger_env.has_value(); });
  probe.start(&lateness);
  // The floor, in the same run: a trivial epoll loop in a process of its own (floor_loop.cpp) with
  // the same 2 ms timer and a raw relayed child paced as the timed one is, under the same bursts.
  Pipe floor_out;
  const pid_t floor_pid =
      spawn({(env.bin_dir / "bench_floor_loop").string(), fmt("%.1f", seconds + 1.0), env.bench_child.string()},
            env.child_env, -1, floor_out.write, -1);
  floor_out.close_write();

  auto run_for = [&](Clock::duration d) {
    asio::steady_timer t(io);
    bool fired = false;
    t.expires_after(d);
    t.async_wait([&](boost::system::error_code) { fired = true; });
    run_until(io, [&] { return fired; });
  };

  struct Window {
    double from, to;
  };
  std::vector<Window> bursts;
  std::vector<double> burst_ms;
  std::string failure;
  int rounds = 0;
  while (!pinger_env) {
    run_for(quiet);
    if (pinger_env) break;
    int delivered = 0;
    const auto t0 = Clock::now();
    // As a front end does: the spawn requests arrive in one handler on the
    // loop, and their checks (which read files) run on workers.
    asio::post(io, [&] {
      for (int k = 0; k < burst; ++k) {
        supervisor::SpawnRequest r;
        r.preset = "implementation";
        r.brief = "pingpong 3";
        r.description = "bench: one of eight spawned at once";
        r.workspace = repo;
        hub.spawn_async(
            r,
            [&](const std::string &, std::exception_ptr error) {
              if (!error) return;
              ++delivered;
              try {
                std::rethrow_exception(error);
              } catch (const std::exception &ex) {
                if (failure.empty()) failure = ex.what();
              }
            },
            [&](const proto::Envelope &e) {
              ++delivered;
              if (e.status != proto::Status::completed && failure.empty()) failure = e.reason;
            });
      }
    });
    run_until(io, [&] { return delivered == burst; });
    const auto t1 = Clock::now();
    bursts.push_back({steady_us(t0), steady_us(t1)});
    burst_ms.push_back(us_between(t0, t1) / 1000);
    ++rounds;
    if (!failure.empty()) throw std::runtime_error("spawnload: a spawned child failed: " + failure);
  }
  probe.stop();
  run_until(io, [&] { return pinger_env.has_value(); });
  bool hub_done = false;
  hub.shutdown("benchmark done", [&] { hub_done = true; });
  run_until(io, [&] { return hub_done; });
  if (pinger_env->status != proto::Status::completed)
    throw std::runtime_error("spawnload: the timed child did not complete: " + pinger_env->reason);

  std::string floor_text;
  {
    char chunk[65536];
    for (ssize_t n; (n = ::read(floor_out.read, chunk, sizeof chunk)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_errno("read bench_floor_loop");
      floor_text.append(chunk, static_cast<std::size_t>(n));
    }
  }
  const int floor_status = reap(floor_pid);
  if (!WIFEXITED(floor_status) || WEXITSTATUS(floor_status) != 0)
    throw std::runtime_error("spawnload: bench_floor_loop failed");
  std::vector<Sample> floor_late, floor_rtt;
  {
    const std::size_t nl = floor_text.find('\n');
    if (floor_text.rfind("late", 0) != 0 || nl == std::string::npos)
      throw std::runtime_error("spawnload: bench_floor_loop printed no samples");
    std::istringstream in(floor_text.substr(4, nl - 4));
    std::string item;
    while (in >> item) {
      const auto colon = item.find(':');
      if (colon != std::string::npos)
        floor_late.push_back({std::stod(item.substr(0, colon)), std::stod(item.substr(colon + 1))});
    }
    std::string final_line = floor_text.substr(nl + 1);
    while (!final_line.empty() && final_line.back() == '\n') final_line.pop_back();
    auto d = proto::decode_child_message(final_line);
    const auto *fin = d ? std::get_if<proto::Final>(&*d.message) : nullptr;
    if (!fin) throw std::runtime_error("spawnload: bench_floor_loop's child sent no final");
    floor_rtt = paced_samples(fin->answer);
  }

  const std::vector<Sample> rtt = paced_samples(pinger_env->answer.text);
  if (rtt.empty() || bursts.empty())
    throw std::runtime_error("spawnload: no samples (answer of " + std::to_string(pinger_env->answer.text.size()) +
                             " bytes, " + std::to_string(rounds) + " rounds)");
  // A sample belongs to a burst when it started inside one; "quiet" samples
  // are the others after the first burst began (the pinger's start is
  // dropped).
  auto split = [&](const std::vector<Sample> &v) {
    std::pair<std::vector<double>, std::vector<double>> out;
    for (const Sample &x : v) {
      if (x.start_us < bursts.front().from - 1e6 * 0.5) continue;
      bool in_burst = false;
      for (const Window &w : bursts)
        if (x.start_us >= w.from && x.start_us <= w.to) in_burst = true;
      (in_burst ? out.first : out.second).push_back(x.value_us);
    }
    return out;
  };
  auto [rtt_burst, rtt_quiet] = split(rtt);
  auto [late_burst, late_quiet] = split(lateness);
  auto [floor_rtt_burst, floor_rtt_quiet] = split(floor_rtt);
  auto [floor_late_burst, floor_late_quiet] = split(floor_late);
  const Stats rb = stats(rtt_burst), rq = stats(rtt_quiet), lb = stats(late_burst), lq = stats(late_quiet),
              bm = stats(burst_ms), frb = stats(floor_rtt_burst), frq = stats(floor_rtt_quiet),
              flb = stats(floor_late_burst), flq = stats(floor_late_quiet);
  std::printf(
      "  %d rounds of %d spawns; burst (first spawn to last envelope) "
      "p50 %.0f ms\n",
      rounds, burst, bm.p50);
  std::printf(
      "  round trip while spawning: p50 %.1f us p99 %.1f us max %.1f "
      "us (n %zu)\n",
      rb.p50, rb.p99, rb.max, rb.n);
  std::printf(
      "  round trip quiet:          p50 %.1f us p99 %.1f us max %.1f "
      "us (n %zu)\n",
      rq.p50, rq.p99, rq.max, rq.n);
  std::printf(
      "  loop lateness while spawning: p50 %.0f us p99 %.0f us max "
      "%.0f us; quiet p99 %.0f us\n",
      lb.p50, lb.p99, lb.max, lq.p99);
  std::printf(
      "  floor (a trivial epoll loop, its own process): round trip while spawning p50 %.1f us p99 %.1f us "
      "(n %zu), quiet p99 %.1f us; lateness while spawning p50 %.0f us p99 %.0f us max %.0f us, quiet p99 %.0f "
      "us\n",
      frb.p50, frb.p99, frb.n, frq.p99, flb.p50, flb.p99, flb.max, flq.p99);
  json j = {{"what",
             "microseconds per tool_request/tool_decision round trip "
             "of one explore child (one every ms, timed in the child) "
             "while 8 implementation children (git worktree, "
             "transcripts fsync'd, patch, removal) spawn at once "
             "through the same Hub, vs. the same child between the "
             "bursts; loop lateness: a 2 ms timer on the loop"},
            {"seconds", seconds},
            {"rounds", rounds},
            {"burst_ms", to_json(bm)},
            {"rtt_during_spawns", to_json(rb)},
            {"rtt_quiet", to_json(rq)},
            {"loop_lateness_during_spawns", to_json(lb)},
            {"loop_lateness_quiet", to_json(lq)},
            {"floor_rtt_during_spawns", to_json(frb)},
            {"floor_rtt_quiet", to_json(frq)},
            {"floor_loop_lateness_during_spawns", to_json(flb)},
            {"floor_loop_lateness_quiet", to_json(flq)},
            {"ratios",
             {{"p50", rb.p50 / rq.p50},
              {"p99", rb.p99 / rq.p99},
              {"rtt_p99_vs_floor", rb.p99 / frb.p99},
              {"lateness_p99_vs_floor", lb.p99 / flb.p99}}}};
  write_json(o, "spawnload", j);
  add_row({"7 spawn load", "round trip while 8 spawn vs quiet, p50", fmt("%.1f us", rb.p50), fmt("%.1f us", rq.p50),
           fmt("%.2fx", rb.p50 / rq.p50), "-", "-"});
  add_row({"7 spawn load", "round trip while 8 spawn vs quiet, p99", us(rb.p99), us(rq.p99),
           fmt("%.2fx", rb.p99 / rq.p99), "<= 3x", rb.p99 / rq.p99 <= 3 ? "yes" : "NO"});
  add_row({"7 spawn load", "loop lateness while 8 spawn vs quiet, p99", us(lb.p99), us(lq.p99),
           fmt("%.2fx", lb.p99 / lq.p99), "<= 3x", lb.p99 / lq.p99 <= 3 ? "yes" : "NO"});
  add_row({"7 spawn load", "floor: a trivial loop's lateness while 8 spawn vs quiet, p99", us(flb.p99), us(flq.p99),
           fmt("%.2fx", flb.p99 / flq.p99), "-", "-"});
  add_row({"7 spawn load", "loop lateness while 8 spawn vs the trivial loop's, p99", us(lb.p99), us(flb.p99),
           fmt("%.2fx", lb.p99 / flb.p99), "<= 2x", lb.p99 / flb.p99 <= 2 ? "yes" : "NO"});
  add_row({"7 spawn load", "floor: a raw relay's round trip while 8 spawn vs quiet, p99", us(frb.p99), us(frq.p99),
           fmt("%.2fx", frb.p99 / frq.p99), "-", "-"});
  add_row({"7 spawn load", "round trip while 8 spawn vs the raw relay's, p99", us(rb.p99), us(frb.p99),
           fmt("%.2fx", rb.p99 / frb.p99), "-", "-"});
}

// ---- 10. a hostile sibling
// ----------------------------------------------------------------------------

// One child's round trips (one every ms, timed in the child) through a Hub, alone and then beside
// a sibling in the same Hub that sends `grep` requests of about 900 KB (under the default line cap)
// as fast as they are answered; the two phases alternate, each with fresh children. The rows are
// the well-behaved child's p50 and p99 beside the sibling vs alone.
// The floor of the sibling benchmark, in the same run: one thread and poll(2) serving the same two
// children (unsandboxed, no handshake), each tool request answered with a prepared decision
// (RawPeer): nothing decoded, checked or recorded. What it cannot avoid is what any relay pays: the
// flooder's bytes read through the pipe, and the CPUs the flooder keeps busy.
struct RelayPhase {
  std::vector<double> rtt_us;
  long flood_requests = 0;
};

RelayPhase relay_phase(const Env &env, double seconds, bool hostile, long flood_bytes) {
  struct Kid {
    pid_t pid = -1;
    std::unique_ptr<Pipe> in, out;
    std::string buf;
    bool open = true;
    std::string final_line;
  };
  std::vector<Kid> kids;
  auto start = [&](const std::vector<std::string> &argv) {
    Kid k;
    k.in = std::make_unique<Pipe>();
    k.out = std::make_unique<Pipe>();
    k.pid = spawn(argv, env.child_env, k.in->read, k.out->write, -1);
    k.in->close_read();
    k.out->close_write();
    kids.push_back(std::move(k));
  };
  if (hostile)
    start({env.bench_child.string(), "flood", fmt("%.1f", seconds + 1.0), std::to_string(flood_bytes), "--raw"});
  start({env.bench_child.string(), "paced", fmt("%.1f", seconds), "1000", "--raw"});
  RawPeer peer(env);
  std::vector<char> chunk(65536);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Kid *> who;
    for (Kid &k : kids)
      if (k.open) {
        fds.push_back({k.out->read, POLLIN, 0});
        who.push_back(&k);
      }
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      fail_errno("poll");
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Kid &k = *who[i];
      const ssize_t n = ::read(k.out->read, chunk.data(), chunk.size());
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        k.open = false;
        continue;
      }
      const std::size_t scanned = k.buf.size();
      k.buf.append(chunk.data(), static_cast<std::size_t>(n));
      std::size_t from = 0, nl = k.buf.find('\n', scanned);
      for (; nl != std::string::npos; from = nl + 1, nl = k.buf.find('\n', from)) {
        const std::string line = k.buf.substr(from, nl - from);
        bool is_done = false, is_final = false;
        const std::string_view reply = peer.answer(line, &is_done, &is_final);
        if (!reply.empty()) write_all(k.in->write, reply);
        if (is_final) k.final_line = line;
      }
      k.buf.erase(0, from);
    }
  }
  RelayPhase out;
  for (Kid &k : kids) {
    reap(k.pid);
    auto d = proto::decode_child_message(k.final_line);
    if (!d) throw std::runtime_error("sibling: a relayed child sent no final");
    const std::string &answer = std::get<proto::Final>(*d.message).answer;
    if (std::get<proto::Final>(*d.message).summary == "flood done") {
      out.flood_requests = std::atol(answer.c_str());
      continue;
    }
    std::istringstream in(answer);
    std::string item;
    while (in >> item) {
      auto colon = item.find(':');
      if (colon != std::string::npos) out.rtt_us.push_back(std::stod(item.substr(colon + 1)) / 1000.0);
    }
  }
  out.rtt_us.erase(out.rtt_us.begin(), out.rtt_us.begin() + static_cast<long>(out.rtt_us.size() / 10));
  return out;
}

void bench_sibling(const Options &o, const Env &env, asio::io_context &io) {
  std::printf("[sibling] one child's round trip beside a sibling flooding ~900 KB tool requests, vs alone\n");
  const double seconds = o.quick ? 3 : 8;
  const int rounds = o.quick ? 1 : 2;
  const long flood_bytes = 900'000;
  const TempRoot temp("sibling");
  const fs::path &root = temp.path;
  const fs::path repo = root / "repo";
  make_repository(repo, 20);
  supervisor::HubConfig cfg = brief_hub_config(env, root, 2);
  supervisor::TranscriptOptions topt;
  topt.dir = root / "transcripts";  // the real path: transcripts written and fsync'd as in serve,
  topt.background = true;           // on the store's writer thread, as serve and mcp set it
  cfg.transcripts = std::make_shared<supervisor::TranscriptStore>(topt, supervisor::default_scrubber());
  supervisor::Hub hub(io, cfg);

  std::vector<double> alone, beside;
  std::vector<Sample> late_alone, late_beside;
  long flood_requests = 0;
  struct LoopShare {
    double cpu_us, queued_us, wall_us;  // the loop thread's CPU, its time waiting for a CPU, the phase
  };
  std::vector<LoopShare> loop_alone, loop_beside;
  LatenessProbe probe(io);
  auto phase = [&](bool hostile) {
    std::optional<proto::Envelope> pinger_env, flood_env;
    supervisor::SpawnRequest r;
    r.preset = "explore";
    r.workspace = repo;
    if (hostile) {
      r.brief = fmt("flood %.1f ", seconds + 1.0) + std::to_string(flood_bytes);
      r.description = "bench: the hostile sibling";
      hub.spawn(r, [&](const proto::Envelope &e) { flood_env = e; });
    }
    r.brief = fmt("paced %.1f 1000", seconds);
    r.description = "bench: the child whose round trips are timed";
    hub.spawn(r, [&](const proto::Envelope &e) { pinger_env = e; });
    probe.start(hostile ? &late_beside : &late_alone);
    const double queued0 = thread_queued_us();
    rusage ru0{}, ru1{};
    ::getrusage(RUSAGE_THREAD, &ru0);
    const auto t0 = Clock::now();
    run_until(io, [&] { return pinger_env.has_value(); });
    ::getrusage(RUSAGE_THREAD, &ru1);
    const double wall = us_between(t0, Clock::now());
    auto tv = [](const timeval &t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
    (hostile ? loop_beside : loop_alone)
        .push_back({tv(ru1.ru_utime) + tv(ru1.ru_stime) - tv(ru0.ru_utime) - tv(ru0.ru_stime),
                    thread_queued_us() - queued0, wall});
    probe.stop();
    run_until(io, [&] { return !hostile || flood_env.has_value(); });
    if (pinger_env->status != proto::Status::completed)
      throw std::runtime_error("sibling: the timed child did not complete: " + pinger_env->reason);
    if (hostile && flood_env->status != proto::Status::completed)
      throw std::runtime_error("sibling: the flooding child did not complete: " + flood_env->reason);
    if (hostile) flood_requests += std::atol(flood_env->answer.text.c_str());
    const std::vector<double> v = values_of(paced_samples(pinger_env->answer.text));
    // The first 10% warm up (and, beside the sibling, start before its first request lands).
    const std::size_t skip = v.size() / 10;
    (hostile ? beside : alone).insert((hostile ? beside : alone).end(), v.begin() + static_cast<long>(skip), v.end());
  };
  std::vector<double> relay_alone, relay_beside;
  long relay_flood = 0;
  auto relay = [&](bool hostile) {
    RelayPhase r = relay_phase(env, seconds, hostile, flood_bytes);
    (hostile ? relay_beside : relay_alone)
        .insert((hostile ? relay_beside : relay_alone).end(), r.rtt_us.begin(), r.rtt_us.end());
    relay_flood += r.flood_requests;
  };
  for (int k = 0; k < rounds; ++k) {
    phase(k % 2 == 1);
    relay(k % 2 == 1);
    phase(k % 2 == 0);
    relay(k % 2 == 0);
  }
  bool hub_done = false;
  hub.shutdown("benchmark done", [&] { hub_done = true; });
  run_until(io, [&] { return hub_done; });
  if (alone.empty() || beside.empty() || flood_requests == 0) throw std::runtime_error("sibling: no samples");
  if (relay_alone.empty() || relay_beside.empty() || relay_flood == 0)
    throw std::runtime_error("sibling: no relay samples");
  const Stats a = stats(alone), b = stats(beside), la = stats(values_of(late_alone)),
              lb = stats(values_of(late_beside)), ra = stats(relay_alone), rb = stats(relay_beside);
  std::printf("  alone:   p50 %.1f us p99 %.1f us (n %zu)\n", a.p50, a.p99, a.n);
  std::printf("  beside:  p50 %.1f us p99 %.1f us (n %zu); the sibling's requests answered: %ld (%.0f/s)\n", b.p50,
              b.p99, b.n, flood_requests, static_cast<double>(flood_requests) / (rounds * (seconds + 1.0)));
  std::printf(
      "  raw relay (the floor): alone p50 %.1f us p99 %.1f us; beside p50 %.1f us p99 %.1f us; the sibling's "
      "requests answered: %ld\n",
      ra.p50, ra.p99, rb.p50, rb.p99, relay_flood);
  std::printf("  loop lateness (a 2 ms timer): alone p99 %.0f us, beside p99 %.0f us max %.0f us\n", la.p99, lb.p99,
              lb.max);
  auto share = [](const std::vector<LoopShare> &v, double LoopShare::*f) {
    double x = 0, wall = 0;
    for (const auto &l : v) x += l.*f, wall += l.wall_us;
    return wall > 0 ? x / wall : 0;
  };
  std::printf("  loop thread: alone %.1f%% busy, %.1f%% waiting for a CPU; beside %.1f%% busy, %.1f%% waiting\n",
              100 * share(loop_alone, &LoopShare::cpu_us), 100 * share(loop_alone, &LoopShare::queued_us),
              100 * share(loop_beside, &LoopShare::cpu_us), 100 * share(loop_beside, &LoopShare::queued_us));
  json j = {
      {"what",
       "microseconds per tool_request/tool_decision round trip of one explore child (one every ms, timed in "
       "the child), beside a sibling in the same Hub that sends grep requests of ~900 KB as fast as answered, "
       "vs the same child alone"},
      {"seconds_per_phase", seconds},
      {"rounds", rounds},
      {"flood_request_bytes", flood_bytes},
      {"flood_requests_answered", flood_requests},
      {"alone", to_json(a)},
      {"beside", to_json(b)},
      {"relay_alone", to_json(ra)},
      {"relay_beside", to_json(rb)},
      {"relay_flood_requests_answered", relay_flood},
      {"loop_lateness_alone", to_json(la)},
      {"loop_lateness_beside", to_json(lb)},
      {"loop_busy_share",
       {{"alone", share(loop_alone, &LoopShare::cpu_us)}, {"beside", share(loop_beside, &LoopShare::cpu_us)}}},
      {"loop_waiting_for_cpu_share",
       {{"alone", share(loop_alone, &LoopShare::queued_us)}, {"beside", share(loop_beside, &LoopShare::queued_us)}}},
      {"ratios",
       {{"p50", b.p50 / a.p50},
        {"p99", b.p99 / a.p99},
        {"relay_p99_beside_vs_alone", rb.p99 / ra.p99},
        {"p99_beside_vs_relay_beside", b.p99 / rb.p99}}},
      {"targets", {{"p99_max", 3.0}}}};
  write_json(o, "sibling", j);
  add_row({"10 hostile sibling", "round trip beside a ~900 KB flooder vs alone, p50", fmt("%.1f us", b.p50),
           fmt("%.1f us", a.p50), fmt("%.2fx", b.p50 / a.p50), "-", "-"});
  add_row({"10 hostile sibling", "same, p99", us(b.p99), us(a.p99), fmt("%.2fx", b.p99 / a.p99), "<= 3x",
           b.p99 / a.p99 <= 3 ? "yes" : "NO"});
  add_row({"10 hostile sibling", "floor: the raw relay's round trip beside the flooder vs alone, p99", us(rb.p99),
           us(ra.p99), fmt("%.2fx", rb.p99 / ra.p99), "-", "-"});
  add_row({"10 hostile sibling", "round trip beside the flooder, supervisor vs the raw relay, p99", us(b.p99),
           us(rb.p99), fmt("%.2fx", b.p99 / rb.p99), "-", "-"});
  add_row({"10 hostile sibling", "loop lateness beside the flooder vs alone, p99", us(lb.p99), us(la.p99),
           fmt("%.2fx", lb.p99 / la.p99), "-", "-"});
}

// ---- main
// ----------------------------------------------------------------------------------------

std::string first_line_with(const std::string &file, const std::string &prefix) {
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

std::string which(const std::string &name) {
  for (const char *dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

}  // namespace

// ---- 9. many children on the in-process runtime
// ----------------------------------------------------------

// N children at once through one Hub, each a script on the in-process runtime (no fork: what is
// measured is the supervisor's own cost per child). Each child says hello, then asks for a `grep`
// tool call every `period` (a random phase first), `trips` times, timing each request to its
// decision; once every child has made its trips the supervisor's heap and RSS are read with all of
// them alive, and then they all send their final.
struct ManyResult {
  std::vector<double> rtt_us;
  double heap_kib_per_child = 0, rss_kib_per_child = 0, seconds = 0;
  int completed = 0;
};

ManyResult many_children(int n, int trips, std::chrono::milliseconds period) {
  asio::io_context io;
  const TempRoot temp("many");
  const fs::path &root = temp.path;
  fs::create_directories(root / "ws");
  std::ofstream(root / "model.jsonl") << "{\"content\": \"unused: the scripts never ask for a turn\"}\n";

  struct Shared {
    ManyResult r;
    int at_barrier = 0;
    std::vector<std::shared_ptr<supervisor::ScriptedChild>> waiting;
    std::function<void()> on_barrier;
    std::vector<std::function<void()>> starters;  // children welcomed, waiting for the rest
    int n = 0;
    std::mt19937 rng{42};
  };
  auto sh = std::make_shared<Shared>();
  sh->n = n;
  sh->r.rtt_us.reserve(static_cast<std::size_t>(n) * static_cast<std::size_t>(trips));
  auto script = [sh, trips, period, &io](std::shared_ptr<supervisor::ScriptedChild> c) {
    struct State {
      explicit State(asio::io_context &ctx) : timer(ctx) {}
      asio::steady_timer timer;
      int done = 0;
      Clock::time_point sent;
    };
    auto st = std::make_shared<State>(io);
    std::weak_ptr<supervisor::ScriptedChild> weak = c;
    auto ask = [weak, st] {
      auto child = weak.lock();
      if (!child || child->ended()) return;
      st->sent = Clock::now();
      child->send(proto::ToolRequest{"t" + std::to_string(st->done), "grep", json{{"pattern", "TODO"}}});
    };
    c->send(proto::Hello{{1}, "bench-script/1"});
    c->on_message([weak, st, sh, trips, period, ask](const proto::SupervisorMessage &m) {
      auto child = weak.lock();
      if (!child) return;
      if (std::holds_alternative<proto::Welcome>(m)) {
        // Round trips begin once every child runs (the steady state of N alive, not the spawning).
        auto begin = [st, sh, period, ask] {
          st->timer.expires_after(std::chrono::microseconds(
              std::uniform_int_distribution<long>(0, std::chrono::microseconds(period).count())(sh->rng)));
          st->timer.async_wait([ask](boost::system::error_code ec) {
            if (!ec) ask();
          });
        };
        sh->starters.push_back(begin);
        if (static_cast<int>(sh->starters.size()) == sh->n) {
          for (auto &f : sh->starters) f();
          sh->starters.clear();
        }
      } else if (const auto *d = std::get_if<proto::ToolDecision>(&m)) {
        sh->r.rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - st->sent).count());
        child->send(proto::ToolDone{d->id, true, 10, {}});
        if (++st->done < trips) {
          st->timer.expires_after(period);
          st->timer.async_wait([ask](boost::system::error_code ec) {
            if (!ec) ask();
          });
          return;
        }
        sh->waiting.push_back(child);
        if (++sh->at_barrier == static_cast<int>(sh->waiting.size()) && sh->on_barrier) sh->on_barrier();
      }
    });
  };

  supervisor::HubConfig cfg;
  cfg.policy_dir = fs::path(SUBAGENT_SOURCE_DIR) / "policies";
  cfg.child_executable = "/nonexistent/in-process";  // the runtime runs scripts
  cfg.max_concurrent = cfg.concurrent_ceiling = static_cast<std::size_t>(n);
  cfg.max_per_turn = cfg.per_turn_ceiling = static_cast<std::size_t>(n);
  cfg.default_model = "replay:" + (root / "model.jsonl").string();
  cfg.parent = "bench";
  cfg.workspaces = {root / "locks", root / "state"};
  cfg.runtime = std::make_shared<supervisor::InProcessRuntime>(script);
  cfg.on_log = [](const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  ::malloc_trim(0);
  const Memory before = memory_of(0);
  const std::size_t heap_before = ::mallinfo2().uordblks;
  supervisor::Hub hub(io, cfg);
  sh->on_barrier = [&] {
    if (sh->at_barrier < n) return;
    const Memory after = memory_of(0);
    sh->r.heap_kib_per_child =
        (static_cast<double>(::mallinfo2().uordblks) - static_cast<double>(heap_before)) / 1024.0 / n;
    sh->r.rss_kib_per_child = (after.rss_kib - before.rss_kib) / n;
    for (auto &c : sh->waiting) {
      c->send(proto::Final{"done", "done", json::object()});
      c->exit(0);
    }
    sh->waiting.clear();
  };
  const auto t0 = Clock::now();
  int finished = 0;
  for (int i = 0; i < n; ++i) {
    supervisor::SpawnRequest req;
    req.preset = "explore";
    req.brief = "bench";
    req.description = "many";
    req.workspace = root / "ws";
    req.limits.max_tool_calls = static_cast<std::uint64_t>(trips);
    hub.spawn(req, [&](const proto::Envelope &e) {
      ++finished;
      if (e.status == proto::Status::completed) ++sh->r.completed;
    });
  }
  run_until(io, [&] { return finished == n; });
  sh->r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return std::move(sh->r);
}

void bench_many(const Options &o, const Env &, asio::io_context &) {
  std::printf("[many] children at once through one Hub on the in-process runtime (no fork)\n");
  // One tool call a second per child: a model turn takes seconds, so a real agent asks less often.
  // At 1000 children that is 1000 round trips a second on the loop; the loop's capacity is what
  // the `concurrent` benchmark measures.
  const int many = 1000, few = 8, trips = o.quick ? 4 : 8;
  const auto period = std::chrono::milliseconds(1000);
  many_children(few, 1, std::chrono::milliseconds(10));  // warm-up: one-time state is not charged to either run
  // The baseline's few children give few samples: more rounds of it, their round trips pooled.
  ManyResult a = many_children(few, trips, period);
  for (int r = 1; r < (o.quick ? 2 : 4); ++r) {
    ManyResult more = many_children(few, trips, period);
    a.rtt_us.insert(a.rtt_us.end(), more.rtt_us.begin(), more.rtt_us.end());
    if (more.completed != few) a.completed = more.completed;
  }
  ManyResult b = many_children(many, trips, period);
  if (a.completed != few || b.completed != many)
    throw std::runtime_error("many: " + std::to_string(a.completed) + "/" + std::to_string(few) + " and " +
                             std::to_string(b.completed) + "/" + std::to_string(many) + " children completed");
  const Stats sa = stats(a.rtt_us), sb = stats(b.rtt_us);
  std::printf("  %d children: round trip p50 %.1f us p99 %.1f us (n %zu); %.1f KiB heap, %.1f KiB RSS per child\n", few,
              sa.p50, sa.p99, a.rtt_us.size(), a.heap_kib_per_child, a.rss_kib_per_child);
  std::printf(
      "  %d children: round trip p50 %.1f us p99 %.1f us (n %zu); %.1f KiB heap, %.1f KiB RSS per child; %.1f s\n",
      many, sb.p50, sb.p99, b.rtt_us.size(), b.heap_kib_per_child, b.rss_kib_per_child, b.seconds);
  const double per_child = std::max(b.heap_kib_per_child, b.rss_kib_per_child);
  json j = {{"children", many},
            {"baseline_children", few},
            {"trips_per_child", trips},
            {"period_ms", period.count()},
            {"many",
             {{"rtt_us", to_json(sb)},
              {"heap_kib_per_child", b.heap_kib_per_child},
              {"rss_kib_per_child", b.rss_kib_per_child},
              {"seconds", b.seconds}}},
            {"few",
             {{"rtt_us", to_json(sa)},
              {"heap_kib_per_child", a.heap_kib_per_child},
              {"rss_kib_per_child", a.rss_kib_per_child}}},
            {"ratios", {{"rtt_p99_many_vs_few", sb.p99 / sa.p99}}},
            {"targets", {{"rtt_p99_ratio_max", 3}, {"kib_per_child_max", 256}}}};
  write_json(o, "many", j);
  add_row({"9 many children", "round trip p99, 1000 children vs 8, 1 call/s each (in-process runtime)",
           fmt("%.1f us", sb.p99), fmt("%.1f us", sa.p99), fmt("%.2fx", sb.p99 / sa.p99), "<= 3x",
           sb.p99 / sa.p99 <= 3 ? "yes" : "NO"});
  add_row({"9 many children", "supervisor memory per child, 1000 alive (max of heap, RSS)", fmt("%.0f KiB", per_child),
           "256 KiB", fmt("%.2fx", per_child / 256), "<= 1x", per_child <= 256 ? "yes" : "NO"});
}

int main(int argc, char **argv) {
  // As the supervisor's main does: non-dumpable, no core, fds close-on-exec. The launch shares the
  // launcher's memory with the child only in a non-dumpable process (sandbox/launch.cpp).
  sandbox::protect_self();
  Options o;
  o.results = fs::path(SUBAGENT_SOURCE_DIR) / "bench" / "results";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--results" && i + 1 < argc) {
      o.results = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      std::string name;
      while (std::getline(list, name, ',')) o.only.push_back(name);
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      std::fprintf(stderr,
                   "usage: subagent_bench [--results DIR] [--only NAME[,NAME...]] "
                   "[--quick]\n"
                   "names: spawn, broker, concurrent, memory, enforcement, tools, "
                   "spawnload, many, sibling\n");
      return 64;
    }
  }
  try {
    Env env;
    env.bin_dir = fs::canonical("/proc/self/exe").parent_path();
    env.subagent_child = env.bin_dir / "subagent-child";
    env.subagent_child_static = env.bin_dir / "subagent-child-static";
    env.bench_child = env.bin_dir / "bench_child";
    env.tool_runner = env.bin_dir / "bench_tool_runner";
    env.explore = std::make_shared<supervisor::Preset>(
        supervisor::load_preset("explore", fs::path(SUBAGENT_SOURCE_DIR) / "policies"));
    env.worker = std::make_shared<supervisor::Preset>(
        supervisor::load_preset("worker", fs::path(SUBAGENT_SOURCE_DIR) / "policies"));
    env.bwrap = which("bwrap");
    env.rg = which("rg");
    char ws[] = "/tmp/subagent-bench-ws-XXXXXX";
    if (!::mkdtemp(ws)) fail_errno("mkdtemp");
    env.workspace = fs::canonical(ws);
    struct RemoveOnExit {  // also when a benchmark throws
      fs::path dir;
      ~RemoveOnExit() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } remove_workspace{env.workspace};
    fs::create_directories(env.workspace / "src");
    std::ofstream(env.workspace / "src" / "main.c") << "int main(void) { return 0; } /* TODO */\n";
    env.child_env = {"PATH=/usr/bin:/bin", "HOME=" + env.workspace.string(), "SUBAGENT_CHILD_ID=000000000000"};

    ::signal(SIGPIPE, SIG_IGN);
    asio::io_context io;
    struct utsname uts {};
    ::uname(&uts);
    std::printf(
        "subagent_bench: %ld CPUs, %s, kernel %s, euid %d, load at "
        "start %s\n",
        ::sysconf(_SC_NPROCESSORS_ONLN), first_line_with("/proc/cpuinfo", "model name").c_str(), uts.release,
        static_cast<int>(::geteuid()), first_line_with("/proc/loadavg", "").c_str());
    const std::string load_at_start = first_line_with("/proc/loadavg", "");
    const auto t0 = Clock::now();
    auto load_before = [&](const char *name) {
      if (o.wants(name)) std::printf("(load before %s: %s)\n", name, first_line_with("/proc/loadavg", "").c_str());
      return o.wants(name);
    };
    if (load_before("spawn")) bench_spawn(o, env, io);
    if (load_before("broker")) bench_broker(o, env, io);
    if (load_before("concurrent")) bench_concurrent(o, env, io);
    if (load_before("memory")) bench_memory(o, env, io);
    if (load_before("enforcement")) bench_enforcement(o, env, io);
    if (load_before("tools")) bench_tools(o, env);
    if (load_before("spawnload")) bench_spawnload(o, env, io);
    if (load_before("many")) bench_many(o, env, io);
    if (load_before("sibling")) bench_sibling(o, env, io);

    std::printf(
        "\n| benchmark | measure | subject | baseline | ratio | target "
        "| met |\n");
    std::printf("|---|---|---:|---:|---:|---|---|\n");
    json rows = json::array();
    for (const Row &r : g_rows) {
      std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.bench.c_str(), r.measure.c_str(), r.subject.c_str(),
                  r.baseline.c_str(), r.ratio.c_str(), r.target.c_str(), r.met.c_str());
      rows.push_back({{"benchmark", r.bench},
                      {"measure", r.measure},
                      {"subject", r.subject},
                      {"baseline", r.baseline},
                      {"ratio", r.ratio},
                      {"target", r.target},
                      {"met", r.met}});
    }
    // The recording rule (bench/README.md): a table taken with the 1-minute load above 1.5 per CPU
    // (3 on 2 CPUs) when it started is not recorded: every hand-off between processes then waits
    // for a CPU, and the ratios say more about the other load than about this code. The load at the
    // end is printed too; it includes this run's own (the tools and spawn-load benchmarks keep both
    // CPUs busy), so it alone does not disqualify a run.
    const std::string load_at_end = first_line_with("/proc/loadavg", "");
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    const double load_limit = 1.5 * static_cast<double>(cpus);
    const double start_load = std::atof(load_at_start.c_str());
    const bool recordable = start_load <= load_limit;
    json summary = {{"machine",
                     {{"nproc", cpus},
                      {"cpu", first_line_with("/proc/cpuinfo", "model name")},
                      {"kernel", uts.release},
                      {"euid", ::geteuid()},
                      {"loadavg_at_start", load_at_start},
                      {"loadavg_at_end", load_at_end}}},
                    {"recordable", recordable},
                    {"quick", o.quick},
                    {"seconds", us_between(t0, Clock::now()) / 1e6},
                    {"rows", rows}};
    if (o.only.empty()) write_json(o, "summary", summary);
    std::printf("\n(%.0f s; load at start %s, at end %s; results in %s)\n", us_between(t0, Clock::now()) / 1e6,
                load_at_start.c_str(), load_at_end.c_str(), o.results.c_str());
    if (!recordable)
      std::printf(
          "NOT FOR RECORDING: the 1-minute load at the start was %.2f, above %.1f (1.5 per CPU); rerun on a quiet "
          "machine (bench/README.md, \"Recording rule\")\n",
          start_load, load_limit);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "subagent_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
