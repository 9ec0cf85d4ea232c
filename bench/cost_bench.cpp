// cost_bench: input tokens and the input bill of a scripted 40-step explore session, against the floor.
//
// Runs the real `subagent-supervisor run` (the explore preset, the real sandboxed subagent-child) against
// the loopback fake model server (tests/programs/fake_model_server, scenario loop:40:4:0), for both wire
// formats, in four configurations: no prompt caching and no trimming (the behaviour before issue 15),
// caching without trimming, caching with the child's context trimming as issue 15 left it (the boundary
// moved in blocks of 4 tool turns: `--trim-block 4`), and caching with the child's default trimming.
// The fake server counts 4 bytes a token and simulates each vendor's documented prompt caching (see the
// scenario's comment there).
//
// The explore preset is copied with an 8,000,000-token budget so that the baseline can finish.
//
// The floor is every distinct token sent once at the full input price: the input of the last request
// of the untrimmed run (each request extends the one before it). The bill is uncached input + cache
// reads + cache writes at the list prices of the issue (Anthropic Sonnet-class $3/M input, $0.30/M
// cache read, $3.75/M cache write; OpenAI gpt-4.1-class $2/M input, $0.50/M cached input).
// A second, looser floor adds what no client of a stateless API can avoid: the first request's input
// (system prompt, tools, brief) sent again on every later request, read from the cache.
//
//   cost_bench [--build DIR] [--source DIR] [--steps N] [--json FILE] [--child-arg ARG]...
// (--child-arg: trimming flags for the "cache + trim" runs, e.g. --child-arg --trim-keep-turns --child-arg 2)
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Proc {
  pid_t pid = -1;
  int in = -1, out = -1;
};

Proc spawn(const std::vector<std::string>& argv, bool keep_stdin_open) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  Proc p;
  if (posix_spawn(&p.pid, args[0], &fa, nullptr, args.data(), environ) != 0)
    throw std::runtime_error("cannot start " + argv[0]);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  p.in = in[1];
  p.out = out[0];
  if (!keep_stdin_open) {
    ::close(p.in);
    p.in = -1;
  }
  return p;
}

std::string read_all(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Row {
  std::string provider, config;
  std::uint64_t requests = 0, first_input = 0, last_input = 0, input = 0, cache_read = 0, cache_write = 0;
  double bill = 0;
  std::string answer;
};

struct Prices {
  double input, read, write;
};

std::vector<std::string> g_trim_args;  // --child-arg values for the trimming runs

Row run(const std::string& supervisor, const std::string& base, const std::string& type, const std::string& config,
        int steps, const fs::path& tmp, const std::string& source, const Prices& price) {
  static int n = 0;
  const std::string token = "bench" + std::to_string(++n);
  const bool cache = config != "no cache, no trim";
  const bool trim = config.rfind("cache + trim", 0) == 0;
  json cfg = {
      {"providers",
       {{"fake",
         {{"type", type},
          {"base_url", base + "/s/loop:" + std::to_string(steps) + ":4:0/" + token + (type == "openai" ? "/v1" : "")},
          {"model", "fake-model"},
          {"prompt_caching", cache}}}}}};
  if (type == "anthropic") cfg["providers"]["fake"]["thinking"] = false;
  const fs::path cfg_path = tmp / (token + ".json");
  std::ofstream(cfg_path) << cfg.dump();
  ::setenv("SUBAGENT_MODEL_CONFIG", cfg_path.c_str(), 1);
  std::vector<std::string> argv = {
      supervisor,
      "run",
      "--preset",
      "explore",
      "--workspace",
      source,
      "--brief",
      "Explore the supervisor's session, HTTP and protocol code and say how a model call flows.",
      "--model",
      "fake",
      "--quiet",
      "--transcript-dir",
      (tmp / "transcripts").string(),
      "--max-steps",
      std::to_string(steps + 5),
      "--policy-dir",
      (tmp / "policies").string()};
  if (!trim)
    argv.insert(argv.end(), {"--child-arg", "--no-trim"});
  else
    for (const auto& a : g_trim_args) argv.insert(argv.end(), {"--child-arg", a});
  if (config == "cache + trim, block 4") argv.insert(argv.end(), {"--child-arg", "--trim-block", "--child-arg", "4"});
  Proc p = spawn(argv, false);
  std::string out = read_all(p.out);
  ::close(p.out);
  int st = 0;
  ::waitpid(p.pid, &st, 0);
  json env = json::parse(out, nullptr, false);
  if (!env.is_object() || env["status"] != "completed")
    throw std::runtime_error(type + " / " + config + ": the run did not complete: " + out.substr(0, 400));
  json t = json::parse(slurp(env["transcript"].get<std::string>()));
  Row r;
  r.provider = type;
  r.config = config;
  r.answer = env["answer"].get<std::string>();
  for (const auto& e : t["events"]) {
    if (e["event"] != "model_response") continue;
    const auto& u = e["usage"];
    const std::uint64_t in = u["input_tokens"], rd = u["cache_read_input_tokens"], wr = u["cache_write_input_tokens"];
    if (r.requests == 0) r.first_input = in;
    r.last_input = in;
    ++r.requests;
    r.input += in;
    r.cache_read += rd;
    r.cache_write += wr;
    r.bill += (static_cast<double>(in - rd - wr) * price.input + static_cast<double>(rd) * price.read +
               static_cast<double>(wr) * price.write) /
              1e6;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string build, source = SUBAGENT_SOURCE_DIR, json_out;
  int steps = 40;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--build")
      build = value();
    else if (a == "--source")
      source = value();
    else if (a == "--steps")
      steps = std::stoi(value());
    else if (a == "--json")
      json_out = value();
    else if (a == "--child-arg")
      g_trim_args.push_back(value());
    else {
      std::fprintf(stderr,
                   "usage: cost_bench [--build DIR] [--source DIR] [--steps N] [--json FILE] [--child-arg ARG]...\n");
      return 64;
    }
  }
  if (build.empty()) build = fs::canonical("/proc/self/exe").parent_path().parent_path().string();
  const std::string supervisor = build + "/bin/subagent-supervisor";
  const std::string fake = build + "/tests/programs/fake_model_server";
  for (const auto& f : {supervisor, fake})
    if (!fs::exists(f)) {
      std::fprintf(stderr,
                   "cost_bench: %s is missing (build subagent-supervisor, subagent-child and fake_model_server)\n",
                   f.c_str());
      return 1;
    }
  const fs::path tmp = fs::temp_directory_path() / ("cost-bench-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  // The explore preset with a token budget the untrimmed, uncached baseline can finish in.
  fs::create_directories(tmp / "policies");
  for (const auto& f : fs::directory_iterator(fs::path(source) / "policies")) {
    std::string text = slurp(f.path());
    if (f.path().filename() == "explore.json") {
      const std::string from = "\"max_tokens\": 1000000";
      if (auto p = text.find(from); p != std::string::npos) text.replace(p, from.size(), "\"max_tokens\": 8000000");
    }
    std::ofstream(tmp / "policies" / f.path().filename()) << text;
  }
  Proc server = spawn({fake}, true);
  std::string ports;
  char c;
  while (::read(server.out, &c, 1) == 1 && c != '\n') ports.push_back(c);
  const std::string base = "http://127.0.0.1:" + ports.substr(0, ports.find(' '));

  std::vector<Row> rows;
  json results = json::array();
  int status = 0;
  try {
    for (const std::string type : {"anthropic", "openai"}) {
      const Prices price = type == "anthropic" ? Prices{3.0, 0.30, 3.75} : Prices{2.0, 0.50, 2.0};
      std::vector<Row> mine;
      for (const std::string config : {"no cache, no trim", "cache, no trim", "cache + trim, block 4", "cache + trim"})
        mine.push_back(run(supervisor, base, type, config, steps, tmp, source, price));
      const std::uint64_t floor = mine[1].last_input;  // every distinct token once
      const double floor_bill = static_cast<double>(floor) * price.input / 1e6;
      // The looser floor: the fixed prefix (the first request) read from the cache on every later request.
      const double prefix_bill = floor_bill + static_cast<double>(mine[1].first_input) *
                                                  static_cast<double>(mine[1].requests - 1) * price.read / 1e6;
      for (const auto& r : mine) {
        const bool same = r.answer == mine[0].answer;
        std::printf(
            "%-9s %-18s requests %3llu  input %4llu..%6llu  sent %8llu  floor %6llu  %5.1fx tokens  "
            "read %8llu  write %7llu  bill $%.4f  floor $%.4f  %4.2fx cost  floor+prefix $%.4f  %4.2fx  answer %s\n",
            r.provider.c_str(), r.config.c_str(), (unsigned long long)r.requests, (unsigned long long)r.first_input,
            (unsigned long long)r.last_input, (unsigned long long)r.input, (unsigned long long)floor,
            static_cast<double>(r.input) / static_cast<double>(floor), (unsigned long long)r.cache_read,
            (unsigned long long)r.cache_write, r.bill, floor_bill, r.bill / floor_bill, prefix_bill,
            r.bill / prefix_bill, same ? "same" : "DIFFERENT");
        results.push_back({{"provider", r.provider},
                           {"config", r.config},
                           {"requests", r.requests},
                           {"first_input", r.first_input},
                           {"last_input", r.last_input},
                           {"input_sent", r.input},
                           {"floor_tokens", floor},
                           {"cache_read", r.cache_read},
                           {"cache_write", r.cache_write},
                           {"input_bill_usd", r.bill},
                           {"floor_bill_usd", floor_bill},
                           {"cost_ratio", r.bill / floor_bill},
                           {"floor_with_prefix_bill_usd", prefix_bill},
                           {"cost_ratio_with_prefix", r.bill / prefix_bill},
                           {"answer_same", same}});
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cost_bench: %s\n", e.what());
    status = 1;
  }
  ::close(server.in);
  int st = 0;
  ::waitpid(server.pid, &st, 0);
  if (!json_out.empty()) std::ofstream(json_out) << results.dump(2) << "\n";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return status;
}
