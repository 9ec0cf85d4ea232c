// `subagent-supervisor policy explain|check` through the real CLI: explain's summary and details
// (the full syscall table behind --syscalls, every rule with --json); check's errors, warnings and
// notes, each with its twin showing the shipped preset (or the harmless variant) passes.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

const std::string kCli = test::bin("subagent-supervisor").string();

std::string section(const std::string& text, const std::string& title) {
  auto b = text.find("\n" + title);
  if (b == std::string::npos) return "";
  auto e = text.find("\n\n", b + 1);
  return text.substr(b + 1, e == std::string::npos ? std::string::npos : e - b - 1);
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + 1;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The shipped preset's text with `from` (which must occur once) replaced by `to`.
std::string shipped_with(const std::string& preset, const std::string& from, const std::string& to) {
  std::string text = test::slurp(test::policy_dir() / (preset + ".json"));
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, preset << ".json has no " << from);
  REQUIRE_MESSAGE(text.find(from, at + 1) == std::string::npos, preset << ".json has " << from << " twice");
  return text.replace(at, from.size(), to);
}

// "LINE:COL" of the first occurrence of `what` in `text`.
std::string position(const std::string& text, const std::string& what) {
  const auto at = text.find(what);
  REQUIRE(at != std::string::npos);
  const auto line_start = text.rfind('\n', at);
  return std::to_string(1 + count(text.substr(0, at), "\n")) + ":" +
         std::to_string(at - (line_start == std::string::npos ? 0 : line_start + 1) + 1);
}

test::RunResult check(const std::vector<std::string>& files, bool strict = false) {
  std::vector<std::string> argv = {kCli, "policy", "check", "--policy-dir", test::policy_dir().string()};
  if (strict) argv.push_back("--strict");
  argv.insert(argv.end(), files.begin(), files.end());
  return test::run(argv);
}

}  // namespace

TEST_CASE("policy explain --syscalls folds the syscall allowlist into one entry per group") {
  for (const char* preset : {"explore", "worker"}) {
    INFO(preset);
    auto r = test::run({kCli, "policy", "explain", preset, "--syscalls"});
    REQUIRE(r.code == 0);
    std::string s = section(r.out, "SYSCALLS");
    INFO(s);
    REQUIRE(!s.empty());
    CHECK(lines(s) < 30);  // the table has several hundred rows (--json)
    CHECK(s.find("  allow  base ") != std::string::npos);
    CHECK(s.find("persona & READ_IMPLIES_EXEC") != std::string::npos);
    CHECK(s.find("request == TIOCSTI") != std::string::npos);
    CHECK(s.find("flags & CLONE_NEWUSER") != std::string::npos);
    CHECK(s.find("  EPERM  watch ") != std::string::npos);
    CHECK(s.find("  EPERM  always_denied ") != std::string::npos);
    CHECK(s.find("  ENOSYS (default)") != std::string::npos);
    const bool worker = std::string(preset) == "worker";
    CHECK((s.find("  allow  filesystem_write ") != std::string::npos) == worker);
    CHECK((s.find("  EPERM  filesystem_write ") != std::string::npos) == !worker);
    CHECK((s.find("allow when CLONE_THREAD") != std::string::npos) == !worker);  // threads only in explore
  }
}

TEST_CASE("policy explain --json keeps every rule with its origin, and the groups") {
  auto r = test::run({kCli, "policy", "explain", "explore", "--json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  int allowed = 0, ioctl_rules = 0;
  bool inotify = false;
  for (const auto& row : j["syscalls"]) {
    allowed += row["action"] == "allow";
    ioctl_rules += row["syscall"] == "ioctl";
    if (row["syscall"] == "inotify_init1")
      inotify = row["action"] == "errno EPERM" && row["origin"] == "group watch not allowed";
  }
  CHECK(allowed > 150);
  CHECK(ioctl_rules > 20);  // the aligned ranges around TIOCSTI and TIOCLINUX, each a row
  CHECK(inotify);
  bool base_allowed = false, watch_allowed = true;
  for (const auto& g : j["syscall_groups"]) {
    if (g["group"] == "base") base_allowed = g["allowed"];
    if (g["group"] == "watch") watch_allowed = g["allowed"];
  }
  CHECK(base_allowed);
  CHECK(!watch_allowed);
}

TEST_CASE("policy check: a read-only preset with filesystem_write is an error, watch a warning") {
  test::TempDir d;
  std::string text = test::slurp(test::policy_dir() / "explore.json");
  const std::string from = "\"groups\": [\"base\"]";
  REQUIRE(text.find(from) != std::string::npos);
  // The twin: the shipped file is clean.
  auto clean = test::run({kCli, "policy", "check", (test::policy_dir() / "explore.json").string()});
  CHECK(clean.code == 0);
  std::string widened = text;
  widened.replace(widened.find(from), from.size(), "\"groups\": [\"base\", \"filesystem_write\", \"watch\"]");
  auto file = d.write("explore.json", widened);
  auto r = test::run({kCli, "policy", "check", "--policy-dir", test::policy_dir().string(), file});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("error: read-only preset (no tool that writes) allows the syscall group "
                   "\"filesystem_write\"") != std::string::npos);
  CHECK(r.out.find("warning: sandbox.syscalls.groups allows \"watch\"") != std::string::npos);
  std::string unknown = text;
  unknown.replace(unknown.find(from), from.size(), "\"groups\": [\"base\", \"inotify\"]");
  auto bad = test::run(
      {kCli, "policy", "check", "--policy-dir", test::policy_dir().string(), d.write("explore.json", unknown)});
  CHECK(bad.code == 1);
  CHECK(bad.out.find("sandbox.syscalls.groups[1] names an unknown syscall group 'inotify'") != std::string::npos);
}

TEST_CASE("policy explain starts with a summary of at most 12 lines, and keeps the syscall table behind --syscalls") {
  auto kernel = nlohmann::json::parse(test::run({kCli, "policy", "explain", "explore", "--json"}).out)["kernel"];
  for (const char* preset : {"explore", "reviewer", "research", "worker", "implementation"}) {
    INFO(preset);
    auto r = test::run({kCli, "policy", "explain", preset});
    REQUIRE(r.code == 0);
    std::string s = section(r.out, "SUMMARY");
    INFO(s);
    REQUIRE(!s.empty());
    CHECK(lines(s) - 1 <= 12);  // the title line, then the summary
    for (const char* label : {"  reads ", "  writes ", "  executes ", "  network ", "  web ", "  no asking ",
                              "  commands ", "  later-run ", "  kernel "})
      CHECK(s.find(label) != std::string::npos);
    // The layers this kernel lacks, from the same probe as THIS KERNEL.
    const std::string kernel_line = s.substr(s.find("  kernel "));
    for (const auto& l : kernel) {
      const std::string name = " " + l["layer"].get<std::string>();
      const bool named =
          kernel_line.find(name + ",") != std::string::npos || kernel_line.find(name + " ") != std::string::npos;
      CHECK_MESSAGE(named == !l["available"].get<bool>(), name);
    }
    const bool writer = std::string(preset) == "worker" || std::string(preset) == "implementation";
    CHECK((s.find("build and test commands run code the child can write") != std::string::npos) == writer);
    CHECK((s.find("later-execution paths (**/.git .gitmodules") != std::string::npos) == writer);
    CHECK((s.find("  writes     nothing; /dev/null (discarded)") != std::string::npos) == !writer);
    // Compact by default: the argument filters are --syscalls' (and the same for every preset).
    CHECK(r.out.find("argument filters") == std::string::npos);
    CHECK(section(r.out, "SYSCALLS").find("  allow  base (") != std::string::npos);
    CHECK(lines(r.out) < 140);
    auto full = test::run({kCli, "policy", "explain", preset, "--syscalls"});
    CHECK(full.out.find("argument filters") != std::string::npos);
    CHECK(lines(full.out) > lines(r.out));
  }
}

TEST_CASE("policy explain shows research's web access in text: hosts, bytes and time per fetch") {
  auto r = test::run({kCli, "policy", "explain", "research"});
  REQUIRE(r.code == 0);
  std::string web = section(r.out, "WEB");
  INFO(r.out);
  CHECK(web.find("every public host") != std::string::npos);
  CHECK(web.find("2000000 bytes, 20 s") != std::string::npos);
  CHECK(section(r.out, "SUMMARY").find("2000000 B and 20 s per fetch") != std::string::npos);
  // The twin: a preset without web tools has no WEB section, and says so in its summary.
  auto e = test::run({kCli, "policy", "explain", "explore"});
  CHECK(section(e.out, "WEB").empty());
  CHECK(section(e.out, "SUMMARY").find("  web        none (no web tool)") != std::string::npos);
}

TEST_CASE("policy check policies/*.json, the README's own command, passes: schema.json is skipped") {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(test::policy_dir()))
    if (e.path().extension() == ".json") files.push_back("policies/" + e.path().filename().string());
  REQUIRE(files.size() >= 6);
  auto r = test::run([&] {
    std::vector<std::string> argv = {kCli, "policy", "check", "--strict"};
    argv.insert(argv.end(), files.begin(), files.end());
    return argv;
  }());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("policies/schema.json: skipped: a JSON Schema (it has \"$schema\"), not a preset") !=
        std::string::npos);
  for (const char* preset : {"explore", "reviewer", "research", "worker", "implementation"})
    CHECK(r.out.find("policies/" + std::string(preset) + ".json: ok\n") != std::string::npos);
  CHECK(r.out.find("warning") == std::string::npos);
  CHECK(r.out.find("error") == std::string::npos);
  // The twin: the same schema without "$schema" is checked as a preset, and is none.
  test::TempDir d;
  std::string schema = test::slurp(test::policy_dir() / "schema.json");
  schema.replace(schema.find("\"$schema\""), 9, "\"$comment\"");
  auto bad = check({d.write("schema.json", schema)});
  CHECK(bad.code == 1);
  CHECK(bad.out.find("is not a known field") != std::string::npos);
}

TEST_CASE("policy check: a key given twice is an error with its line and column; run refuses it too") {
  test::TempDir d;
  const std::string text =
      shipped_with("explore", "\"network\": \"none\",", "\"network\": \"host\",\n    \"network\": \"none\",");
  const std::string file = d.write("explore.json", text);
  auto r = check({file});
  INFO(r.out);
  CHECK(r.code == 1);
  const std::string second = position(text, "\"network\": \"none\"");
  CHECK(r.out.find(file + ":" + second + ": error: /sandbox/network is given twice (first at line " +
                   position(text, "\"network\": \"host\"") + ")") != std::string::npos);
  auto explain = test::run({kCli, "policy", "explain", file});
  CHECK(explain.code != 0);
  CHECK(explain.err.find("explore.json:" + second + ": /sandbox/network is given twice") != std::string::npos);
  // The twin: the shipped file, with the key once.
  CHECK(check({(test::policy_dir() / "explore.json").string()}, true).code == 0);
}

TEST_CASE("policy check: errors name the line and column, and an unknown key lists the valid names once") {
  test::TempDir d;
  std::string text = shipped_with("explore", "\"network\": \"none\"", "\"netwrok\": \"none\"");
  auto r = check({d.write("explore.json", text)});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("explore.json:" + position(text, "\"netwrok\"") +
                   ": error: sandbox.netwrok is not a known field "
                   "(expected one of: filesystem, network,") != std::string::npos);
  CHECK(count(r.out, "expected one of") == 1);
  text = shipped_with("explore", "\"network\": \"none\"", "\"network\": \"wifi\"");
  r = check({d.write("explore.json", text)});
  CHECK(r.code == 1);
  CHECK(r.out.find("explore.json:" + position(text, "\"network\"") + ": error: sandbox.network must be \"none\"") !=
        std::string::npos);
  // Text that is no JSON: the position where the parser stopped.
  text = shipped_with("explore", "\"network\": \"none\"", "\"network\": none");
  r = check({d.write("explore.json", text)});
  CHECK(r.code == 1);
  const std::string at = position(text, "\"network\": none");  // nlohmann's column: the last character read, "no"
  CHECK(r.out.find("explore.json:" + at.substr(0, at.find(':')) + ":" +
                   std::to_string(std::stoi(at.substr(at.find(':') + 1)) + 12) + ": error: not valid JSON: ") !=
        std::string::npos);
}

TEST_CASE("policy check: a \"preset\" that differs from the file name is an error") {
  test::TempDir d;
  const std::string text = test::slurp(test::policy_dir() / "worker.json");
  auto r = check({d.write("my-worker.json", text)});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("my-worker.json:" + position(text, "\"preset\"") +
                   ": error: preset is 'worker', but the file name says "
                   "'my-worker'") != std::string::npos);
  // The twin: the same bytes under the preset's own name are an exact copy of the shipped preset: clean.
  auto same = check({d.write("worker.json", text)}, true);
  INFO(same.out);
  CHECK(same.code == 0);
  CHECK(same.out.find(": ok") != std::string::npos);
}

TEST_CASE("policy check: a copy that grants more than the shipped preset says so, and fails with --strict") {
  test::TempDir d;
  std::string text = shipped_with("worker", "\"make\", \"cmake\"", "\"make\", \"bash\", \"cmake\"");
  text.replace(text.find("\"network\": \"none\""), 17, "\"network\": \"loopback\"");
  text.replace(text.find("\"max_steps\": 100"), 16, "\"max_steps\": 500");
  const std::string file = d.write("worker.json", text);
  auto r = check({file});
  INFO(r.out);
  CHECK(r.code == 0);  // legal: warnings
  CHECK(r.out.find(": warning: wider than the shipped preset: tools.rules[0] makes 'run_command' \"allow\" for "
                   "command_prefix 'bash'") != std::string::npos);
  CHECK(r.out.find(file + ":" + position(text, "\"network\": \"loopback\"") +
                   ": warning: wider than the shipped preset: sandbox.network is \"loopback\"") != std::string::npos);
  CHECK(r.out.find("budgets.max_steps is 500 (shipped worker: 100)") != std::string::npos);
  CHECK(check({file}, true).code == 1);
  // Research's web section: bytes per fetch and a denied domain dropped.
  auto web = check({d.write("research.json",
                            shipped_with("research", "\"max_fetch_bytes\": 2000000", "\"max_fetch_bytes\": 9000000"))});
  INFO(web.out);
  CHECK(web.out.find(
            "warning: wider than the shipped preset: web.max_fetch_bytes is 9000000 (shipped research: 2000000)") !=
        std::string::npos);
  // The twins: a copy that only narrows (fewer prefixes, fewer steps) is clean, even with --strict.
  auto small = check(
      {d.write("research.json", shipped_with("research", "\"max_fetch_bytes\": 2000000", "\"max_fetch_bytes\": 1000"))},
      true);
  CHECK(small.code == 0);
  std::string narrower = shipped_with("worker", "\"make\", \"cmake\"", "\"cmake\"");
  narrower.replace(narrower.find("\"max_steps\": 100"), 16, "\"max_steps\": 50");
  auto n = check({d.write("worker.json", narrower)}, true);
  INFO(n.out);
  CHECK(n.code == 0);
  CHECK(n.out.find("warning") == std::string::npos);
}

TEST_CASE(
    "policy check: dangerous roots — write roots as launch refuses them (error), read and execute roots (warning)") {
  test::TempDir d;
  auto r = check(
      {d.write("worker.json", shipped_with("worker", "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\"]",
                                           "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\", \"/etc\"]"))});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("error: sandbox.filesystem.write[3] '/etc' is refused at launch: it is a system directory (/etc)") !=
        std::string::npos);
  const char* home = std::getenv("HOME");
  REQUIRE(home);
  for (const std::string& root : {std::string("/"), std::string(home), std::string("/etc")}) {
    INFO(root);
    auto w = check({d.write("worker.json", shipped_with("worker", "\"read\": [\"${workspace}\", ",
                                                        "\"read\": [\"${workspace}\", \"" + root + "\", "))});
    INFO(w.out);
    CHECK(w.code == 0);
    CHECK(w.out.find("warning: sandbox.filesystem.read[1] '" + root + "': ") != std::string::npos);
    auto x = check({d.write("worker.json", shipped_with("worker", "\"execute\": [\"${child}\", ",
                                                        "\"execute\": [\"" + root + "\", \"${child}\", "))});
    CHECK(x.out.find("warning: sandbox.filesystem.execute[0] '" + root + "': ") != std::string::npos);
  }
  // The twins: a project directory is fine as a root of every kind (no finding but the widening ones).
  test::TempDir project;
  const std::string p = project.path().string();
  auto fine = check({d.write(
      "worker.json", shipped_with("worker", "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\"]",
                                  "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\", \"" + p + "\"]"))});
  INFO(fine.out);
  CHECK(fine.code == 0);
  CHECK(fine.out.find("refused at launch") == std::string::npos);
  CHECK(fine.out.find("wider than the shipped preset: sandbox.filesystem.write grants '" + p + "'") !=
        std::string::npos);
}

TEST_CASE("policy check: network host, empty required, missing namespaces, run_command with no write root warn") {
  test::TempDir d;
  struct Case {
    const char* preset;
    std::string from, to, says;
  };
  const std::vector<Case> cases = {
      {"explore", "\"network\": \"none\"", "\"network\": \"host\"", "sandbox.network is \"host\""},
      {"explore",
       "\"required\": [\"no_new_privs\", \"capabilities\", \"seccomp\", \"landlock\", \"rlimits\", \"read_only_host\"]",
       "\"required\": []", "sandbox.required is empty"},
      {"explore", "\"namespaces\": [\"user\", \"pid\", \"net\", \"ipc\", \"uts\", \"mount\"]", "\"namespaces\": []",
       "sandbox.namespaces lacks user, pid, net, ipc, uts, mount"},
      {"explore", "\"namespaces\": [\"user\", \"pid\", \"net\", \"ipc\", \"uts\", \"mount\"]",
       "\"namespaces\": [\"user\", \"net\", \"ipc\", \"uts\", \"mount\"]", "sandbox.namespaces lacks pid"},
      {"reviewer", "\"ask\": [],\n    \"deny\": [\"write_file\", \"edit_file\", \"run_command\", ",
       "\"ask\": [\"run_command\"],\n    \"deny\": [\"write_file\", \"edit_file\", ",
       "run_command is granted but there is no write root"},
  };
  for (const auto& c : cases) {
    INFO(c.to);
    std::string text = shipped_with(c.preset, c.from, c.to);
    if (c.to == "\"network\": \"host\"") {  // "host" and a net namespace contradict: the parser says so
      const std::string ns = "\"user\", \"pid\", \"net\", ";
      text.replace(text.find(ns), ns.size(), "\"user\", \"pid\", ");
    }
    auto r = check({d.write(std::string(c.preset) + ".json", text)});
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find(": warning: " + c.says) != std::string::npos);
    CHECK(check({d.write(std::string(c.preset) + ".json", text)}, true).code == 1);
    // The twin: the shipped preset, untouched.
    auto shipped = check({(test::policy_dir() / (std::string(c.preset) + ".json")).string()}, true);
    CHECK(shipped.code == 0);
    CHECK(shipped.out.find(c.says) == std::string::npos);
  }
}

TEST_CASE("policy check accepts a write root below ${workspace}, as run does") {
  test::TempDir d, ws;
  std::filesystem::create_directories(ws.path() / "docs");
  const std::string file =
      d.write("worker.json", shipped_with("worker", "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\"]",
                                          "\"write\": [\"${workspace}/docs\", \"${home}\", \"/dev/null\"]"));
  auto r = check({file});
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("error") == std::string::npos);
  CHECK(r.out.find("may hold a .git") == std::string::npos);
  // What run does with the same file: the sandbox starts and a command runs in it.
  auto run = test::run({kCli, "sandbox", "--preset", file, "--workspace", ws.path().string(), "--", "/bin/true"});
  INFO(run.err);
  CHECK(run.code == 0);
  // An absolute write root has no writer mode's cover: its .git must be protected by the list.
  test::TempDir repo;
  std::filesystem::create_directories(repo.path() / ".git");
  std::string text =
      shipped_with("worker", "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\"]",
                   "\"write\": [\"${workspace}\", \"${home}\", \"/dev/null\", \"" + repo.path().string() + "\"]");
  const std::string says = "holds a .git directory that sandbox.filesystem.protected does not protect";
  auto kept = check({d.write("worker.json", text)});
  INFO(kept.out);
  CHECK(kept.out.find(says) == std::string::npos);
  text.replace(text.find("\"protected\": [\".git\", \".git/hooks\"]"), 35, "\"protected\": [\".git/hooks\"]");
  auto open = check({d.write("worker.json", text)});
  INFO(open.out);
  CHECK(open.code == 0);
  CHECK(open.out.find("warning: write root " + repo.path().string() + " " + says) != std::string::npos);
}
