// `subagent-supervisor policy explain|check` for the seccomp allowlist: the text shows the groups
// compactly, --json keeps every rule, and check lints groups that widen a preset.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>

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

}  // namespace

TEST_CASE("policy explain folds the syscall allowlist into one entry per group") {
  for (const char* preset : {"explore", "worker"}) {
    INFO(preset);
    auto r = test::run({kCli, "policy", "explain", preset});
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
  auto bad = test::run({kCli, "policy", "check", "--policy-dir", test::policy_dir().string(),
                        d.write("explore.json", unknown)});
  CHECK(bad.code == 1);
  CHECK(bad.out.find("sandbox.syscalls.groups[1] names an unknown syscall group 'inotify'") !=
        std::string::npos);
}
