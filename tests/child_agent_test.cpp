#include "child/agent.hpp"

#include <doctest/doctest.h>

using namespace child;

TEST_CASE("a final message in the required shape is parsed section by section") {
  Report r = parse_report(
      "## Summary\nShort.\n\n## What I did or found\nRead things.\n## Evidence\n- a.c:3 — x\n* b.c:9 — y\n"
      "## Files changed\n- none\n## Commands and tests run\n- make → exit 0\n## Remaining risks\nSome.");
  CHECK(r.summary == "Short.");
  CHECK(r.found == "Read things.");
  REQUIRE(r.evidence.size() == 2);
  CHECK(r.evidence[1] == "b.c:9 — y");
  CHECK(r.files_changed.empty());
  CHECK(r.commands == std::vector<std::string>{"make → exit 0"});
  CHECK(r.risks == "Some.");
}

TEST_CASE("free text without sections still yields the fixed shape") {
  Report r = parse_report("First paragraph here.\n\nMore detail.");
  CHECK(r.summary == "First paragraph here.");
  CHECK(r.found == "First paragraph here.\n\nMore detail.");
  std::string out = render_report(r);
  for (const char* h : {"## Summary", "## What I did or found", "## Evidence", "## Files changed",
                        "## Commands and tests run", "## Remaining risks"})
    CHECK_MESSAGE(out.find(h) != std::string::npos, h);
}

TEST_CASE("the system prompt names the tools and the answer shape") {
  std::string p = system_prompt("explore", "/ws", {"grep", "read_file"});
  CHECK(p.find("grep, read_file") != std::string::npos);
  CHECK(p.find("## Evidence") != std::string::npos);
  CHECK(p.find("stub") == std::string::npos);
  // A child that trims tells its model so: seen results become stubs, note what you need or repeat.
  std::string t = system_prompt("explore", "/ws", {"grep", "read_file"}, true);
  CHECK(t.find("replaced by a short stub") != std::string::npos);
  CHECK(t.find("repeat the call") != std::string::npos);
  CHECK(t.find("## Evidence") != std::string::npos);
}

namespace {
nlohmann::json history(std::size_t turns, std::size_t result_bytes = 3000) {
  nlohmann::json m =
      nlohmann::json::array({{{"role", "system"}, {"content", "sys"}}, {{"role", "user"}, {"content", "task"}}});
  for (std::size_t k = 0; k < turns; ++k) {
    const std::string id = "c" + std::to_string(k);
    m.push_back(
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls", {{{"id", id}, {"name", "read_file"}, {"arguments", {{"path", "f" + std::to_string(k)}}}}}}});
    m.push_back(
        {{"role", "tool"}, {"tool_call_id", id}, {"name", "read_file"}, {"content", std::string(result_bytes, 'x')}});
  }
  return m;
}
std::size_t stubs(const nlohmann::json& m) {
  std::size_t n = 0;
  for (const auto& x : m)
    if (x["role"] == "tool" && x["content"].get<std::string>().rfind("[trimmed", 0) == 0) ++n;
  return n;
}
}  // namespace

TEST_CASE("trimming: old tool results become stubs in blocks; the newest turns stay whole") {
  Trimmer t(TrimOptions{true, 24'000, 2, 4, 300});
  auto m = history(5);  // 15 KB: under the threshold
  CHECK(t.trim(m) == 0);
  m = history(10);  // 30 KB: every turn but the newest 2 trimmed
  CHECK(t.trim(m) == 8);
  CHECK(t.boundary() == 8);
  CHECK(stubs(m) == 8);
  CHECK(m[3]["content"] == trim_stub("read_file", 3000));
  CHECK(m[3]["content"] == "[trimmed 3000 bytes: repeat this read_file call]");
  CHECK(m[2]["tool_calls"][0]["arguments"]["path"] == "f0");  // the call the stub points at stays
  CHECK(m[19]["content"].get<std::string>().size() == 3000);  // turn 8: kept
  CHECK(m[21]["content"].get<std::string>().size() == 3000);  // turn 9: kept
  // The prefix stays byte-for-byte the same until the boundary can move a whole block (the threshold
  // was passed once: trimming goes on even though the trimmed history is under it).
  const std::string before = m.dump();
  for (std::size_t k = 10; k < 13; ++k) {
    auto more = history(k + 1);
    for (std::size_t i = 0; i < m.size(); ++i) more[i] = m[i];
    m = more;
    CHECK(t.trim(m) == 0);
    CHECK(m.dump().rfind(before.substr(0, before.size() - 1), 0) == 0);
  }
  auto more = history(16);
  for (std::size_t i = 0; i < m.size(); ++i) more[i] = m[i];
  m = more;
  CHECK(t.trim(m) == 6);  // 16 turns: a whole block past the boundary, which moves to 14
  CHECK(t.boundary() == 14);
  CHECK(stubs(m) == 14);
}

TEST_CASE("trimming: off by a flag; small results kept; bad flags named") {
  auto m = history(20);
  Trimmer off(parse_trim_flags({"--no-trim"}));
  CHECK(off.trim(m) == 0);
  auto small = history(200, 100);  // every result under 300 bytes
  Trimmer t;                       // the defaults
  CHECK(t.options().keep_turns == 1);
  t.trim(small);
  CHECK(stubs(small) == 0);
  auto o = parse_trim_flags({"--trim-threshold-bytes", "1000", "--trim-keep-turns", "5", "--trim-block", "2"});
  CHECK(o.threshold_bytes == 1000);
  CHECK(o.keep_turns == 5);
  CHECK(o.block == 2);
  CHECK_THROWS_WITH(parse_trim_flags({"--trim-block", "0"}), doctest::Contains("--trim-block"));
  CHECK_THROWS_WITH(parse_trim_flags({"--trim-keep-turns", "0"}), doctest::Contains("at least 1"));
  CHECK(parse_trim_flags({"--trim-keep-turns", "1"}).keep_turns == 1);
  CHECK_THROWS_WITH(parse_trim_flags({"--trim-keep-turns", "x"}), doctest::Contains("whole number"));
  CHECK_THROWS_WITH(parse_trim_flags({"--frobnicate"}), doctest::Contains("unknown option '--frobnicate'"));
}

TEST_CASE("trimming with the defaults: each result whole in exactly one request; the prefix never changes") {
  // The agent loop: before each request the child trims, then sends everything; the model answers with
  // one tool call, whose result is appended.
  Trimmer t;
  CHECK(t.options().block == 1);
  auto m = history(0);
  std::vector<std::string> sent;  // each request's messages, serialized one by one
  std::vector<std::size_t> whole(40, 0);
  std::size_t last_assistant = 0;  // index of the previous request's last assistant message
  std::size_t wide = 0;            // trims that replaced more than one result
  for (std::size_t k = 0; k < 40; ++k) {
    auto next = history(k + 1);
    for (std::size_t i = 0; i < m.size(); ++i) next[i] = m[i];
    m = next;
    const std::size_t replaced = t.trim(m);
    if (replaced > 1) ++wide;
    for (std::size_t i = 0; i < m.size(); ++i)
      if (m[i]["role"] == "tool" && m[i]["content"].get<std::string>().size() == 3000) ++whole[(i - 3) / 2];
    std::vector<std::string> now;
    for (const auto& x : m) now.push_back(x.dump());
    // After the first trim, everything up to the previous request's last assistant turn is sent again
    // unchanged: the trim starts only at that turn's result, which the previous request sent whole.
    if (!sent.empty() && replaced <= 1)
      for (std::size_t i = 0; i <= last_assistant; ++i)
        CHECK_MESSAGE(now[i] == sent[i], "request " << k << " message " << i);
    sent = now;
    last_assistant = m.size() - 2;
  }
  // The history passes 8,000 bytes with the third result; from then on a result is whole only in the
  // request after its call, although the trimmed history is far under the threshold; the newest is
  // always whole.
  for (std::size_t k = 0; k < 40; ++k) {
    CAPTURE(k);
    CHECK(whole[k] >= 1);
    if (k == 0) CHECK(whole[k] == 2);  // before the threshold was passed
    if (k >= 1) CHECK(whole[k] == 1);
  }
  CHECK(m[m.size() - 1]["content"].get<std::string>().size() == 3000);
  CHECK(stubs(m) == 39);
  CHECK(wide == 1);  // only the first trim reached back further than the previous request's result
}
