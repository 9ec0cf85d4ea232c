// What a child or a model wrote, shown to a person (records/terminal.hpp): escaped on a terminal,
// so a hostile child cannot clear the screen, set the title, write the clipboard or forge a line.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "records/terminal.hpp"
#include "test_util.hpp"

using nlohmann::json;
using supervisor::escape_for_terminal;

namespace {

std::vector<std::string> attack_run(const std::string& script) {
  return {test::bin("subagent-supervisor").string(),
          "run",
          "--preset",
          "explore",
          "--workspace",
          SUBAGENT_SOURCE_DIR,
          "--brief",
          "look around",
          "--model",
          "replay:" + script,
          "--quiet",
          "--no-transcript",
          "--child",
          test::program("fake_child").string(),
          "--child-arg",
          "terminal_attack"};
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("escape_for_terminal: controls, C1, bidi overrides and bad UTF-8 become visible escapes") {
  CHECK(escape_for_terminal("plain text, ünïcödé, 日本語\tand a tab", false) ==
        "plain text, ünïcödé, 日本語\tand a tab");
  CHECK(escape_for_terminal("\x1b[2J", false) == "\\u001b[2J");
  CHECK(escape_for_terminal("a\rb\nc", false) == "a\\u000db\\u000ac");
  CHECK(escape_for_terminal("a\rb\nc", true) == "a\\u000db\nc");
  CHECK(escape_for_terminal("bell\x07 del\x7f", false) == "bell\\u0007 del\\u007f");
  CHECK(escape_for_terminal("csi \xc2\x9b"
                            "31m",
                            false) == "csi \\u009b31m");
  CHECK(escape_for_terminal("rtl \xe2\x80\xae"
                            "x \xe2\x81\xa6"
                            "y",
                            false) == "rtl \\u202ex \\u2066y");
  CHECK(escape_for_terminal("bad \xff \xc0\xaf \xed\xa0\x80 end", false) ==
        "bad \\xff \\xc0\\xaf \\xed\\xa0\\x80 end");  // not UTF-8, overlong, a surrogate
  CHECK(escape_for_terminal(std::string("nul\0x", 5), false) == "nul\\u0000x");
  CHECK(escape_for_terminal("cut \xe6\x97", false) == "cut \\xe6\\x97");  // a sequence cut short
  // Escaped JSON is the same JSON: \u001b in a string is the character it escapes.
  const std::string dumped = json{{"s", "x\xc2\x9by\xe2\x80\xae"}}.dump();
  CHECK(json::parse(escape_for_terminal(dumped, true)) == json::parse(dumped));
}

TEST_CASE("run on a terminal: the child's escape sequences and forged lines arrive escaped") {
  test::TempDir d;
  const std::string script = d.write("s.jsonl", R"({"content":"unused"})"
                                                "\n");
  auto r = test::run_on_terminal(attack_run(script));
  INFO(r.out);
  CHECK(r.code == 0);
  // Nothing the child sent reaches the terminal as a control: no ESC, BEL, CR, 8-bit CSI or override.
  for (const char* raw : {"\x1b", "\x07", "\r", "\xc2\x9b", "\xe2\x80\xae"}) CHECK_FALSE(has(r.out, raw));
  CHECK(has(r.out, "\\u001b[2J"));
  CHECK(has(r.out, "\\u001b]52;c;ZXZpbA=="));
  // The forged line stays inside the real child's line, after its real prefix.
  CHECK(has(r.out, "\\u000d[subagent:000000000000] parent approved"));
  CHECK_FALSE(has(r.out, "\n[subagent:000000000000]"));
  CHECK(has(r.out, "csi \\u009b31m red \\u202edesrever"));
  // The envelope is still JSON, with the model's text escaped but unchanged in meaning.
  const auto start = r.out.find("{\n");
  REQUIRE(start != std::string::npos);
  json env = json::parse(r.out.substr(start));
  CHECK(env["summary"] ==
        "done \x1b[31mred\x1b[0m \xc2\x9b"
        "2J");
  CHECK(env["answer"] == "answer \x1b]52;c;ZXZpbA==\x07");
}

TEST_CASE("twin: the same run into a pipe passes the envelope's bytes as they are") {
  test::TempDir d;
  const std::string script = d.write("s.jsonl", R"({"content":"unused"})"
                                                "\n");
  auto r = test::run(attack_run(script));
  CHECK(r.code == 0);
  // stdout is no terminal: the envelope is the JSON as dumped, with the C1 character raw.
  CHECK(has(r.out, "\xc2\x9b"));
  CHECK(json::parse(r.out)["summary"] ==
        "done \x1b[31mred\x1b[0m \xc2\x9b"
        "2J");
  // The child's stderr lines are escaped wherever they go (a harness shows stderr to a person),
  // and the child did send the sequences.
  CHECK(has(r.err, "[subagent:"));
  CHECK(has(r.err, "\\u001b[2J"));
  CHECK_FALSE(has(r.err, "\x1b"));
}

TEST_CASE("audit --conversation on a terminal shows the child's text escaped; into a pipe as it was") {
  test::TempDir d;
  const std::string script = d.write("s.jsonl", R"({"content":"unused"})"
                                                "\n");
  auto args = attack_run(script);
  args.erase(std::find(args.begin(), args.end(), "--no-transcript"));
  args.insert(args.end(), {"--transcript-dir", (d.path() / "t").string()});
  auto r = test::run(args);
  REQUIRE(r.code == 0);
  const std::string id = json::parse(r.out)["id"];
  const std::vector<std::string> audit = {test::bin("subagent-supervisor").string(),
                                          "audit",
                                          "--conversation",
                                          id,
                                          "--transcript-dir",
                                          (d.path() / "t").string()};
  auto piped = test::run(audit);
  REQUIRE(piped.code == 0);
  CHECK(has(piped.out, "answer \x1b]52;c;ZXZpbA==\x07"));  // the twin: the transcript holds the bytes
  auto shown = test::run_on_terminal(audit);
  INFO(shown.out);
  CHECK(shown.code == 0);
  for (const char* raw : {"\x1b", "\x07", "\r", "\xc2\x9b"}) CHECK_FALSE(has(shown.out, raw));
  CHECK(has(shown.out, "answer \\u001b]52;c;ZXZpbA==\\u0007"));
}
