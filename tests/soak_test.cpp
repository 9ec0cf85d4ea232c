// The soak (scripts/soak.sh, tests/programs/soak_driver.cpp) shortened for every test run: 60 children,
// 8 at a time, good, hostile, model-down and cancelled ones mixed; then zero zombies, zero survivors,
// zero leaked fds and resident memory flat within 10% after the warm-up (both measured when nothing
// runs, after the supervisor's idle trim: the check compares like with like).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "serve_driver.hpp"

using nlohmann::json;

TEST_CASE("soak, shortened: 60 children, 8 at a time, random faults and cancels, nothing leaks") {
  test::TempDir work;
  auto r = test::run({test::program("soak_driver").string(), "--supervisor", test::bin("subagent-supervisor").string(),
                      "--fake-child", test::program("fake_child").string(), "--policy-dir", test::policy_dir().string(),
                      "--work", (work.path() / "soak").string(), "--children", "60", "--warmup", "20", "--seed", "9",
                      // A sanitizer's quarantine and shadow memory make resident size meaningless there.
                      "--max-rss-growth", test::kSanitized ? "1000" : "10"});
  json report = json::parse(r.out, nullptr, false);
  REQUIRE_MESSAGE(!report.is_discarded(), "no report; stderr: " << r.err);
  MESSAGE(r.err);
  CHECK_MESSAGE(r.code == 0, report["problems"].dump());
  CHECK(report["zombies"] == 0);
  CHECK(report["survivors"] == 0);
  CHECK(report["fds"]["end"] == report["fds"]["after_warmup"]);
  if (!test::kSanitized) {
    CHECK(report["rss_growth_after_warmup_percent"].get<double>() <= 10.0);
  }
  // The mix really had hostile children in it, not only good ones.
  CHECK(report["statuses"].size() >= 8);
}

TEST_CASE("a long-lived serve remembers the newest 256 finished children, not every one (flat memory)") {
  // Before the fix the hub kept every finished child, its records and its full preset: +17 KB a child.
  test::TempDir progs, scripts, ws;
  const auto child = test::private_program(progs, "fake_child", "kf");
  test::Serve s(test::Serve::Options{std::vector<std::string>{
      "--child", child.string(), "--child-arg", "good", "--workspace", ws.path().string(), "--model",
      test::replay(scripts, "m", R"({"content":"## Summary\nok"})"), "--max-per-turn", "256"}});
  REQUIRE(s.hello().value("type", "") == "hello");
  std::vector<std::string> ids;
  for (int i = 0; i < 260; ++i) {
    if (i == 200) {
      s.send({{"type", "turn"}, {"id", "turn"}});
      REQUIRE(s.reply("turn").is_object());
    }
    ids.push_back(s.spawn_bg("s" + std::to_string(i), json::object()));
  }
  for (const auto& id : ids) {
    json d = s.child_done(id);
    REQUIRE(d.is_object());
    CHECK(d["envelope"]["status"] == "completed");
  }
  json l = s.list("l");
  REQUIRE(l.is_object());
  CHECK(l["children"].size() == 256);
  CHECK(l["children"][0]["child_id"] == ids[4]);  // the four oldest are forgotten
  s.send({{"type", "output"}, {"id", "old"}, {"child_id", ids[0]}});
  CHECK(s.reply("old")["code"] == "unknown_child");
  s.send({{"type", "output"}, {"id", "new"}, {"child_id", ids[259]}});
  CHECK(s.reply("new")["envelope"]["status"] == "completed");
  s.close_input();
  CHECK(s.wait_exit() == 0);
}
