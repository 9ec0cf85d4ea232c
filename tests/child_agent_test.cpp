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
}
