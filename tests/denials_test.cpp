// Refused tool calls are never silent (issue 18, part 8): `run` prints one line of the supervisor's
// own per denial on stderr, and the envelope lists them (tool, rule, reason), capped. Driven through
// the real CLI with the real reference child and a replayed model; a hostile fake child tries to
// forge the supervisor's line.
#include "protocol/envelope.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "serve_driver.hpp"
#include "policy/preset.hpp"
#include "records/scrub.hpp"
#include "session/session_records.hpp"
#include "records/transcript.hpp"
#include "test_util.hpp"

using nlohmann::json;

namespace {

// A policy directory holding one preset "gate": the shipped explore preset (its sandbox, budgets)
// with the tool lists `tools`.
struct Gate {
  test::TempDir dir, ws;
  explicit Gate(const json& tools) {
    json doc = supervisor::read_jsonc_file(test::policy_dir() / "explore.json");
    doc["preset"] = "gate";
    doc["tools"] = tools;
    dir.write("policies/gate.json", doc.dump(2));
    ws.write("notes.txt", "the notes\n");
    ws.write("secret/key.txt", "hunter2\n");
  }
  // `run` with the replayed model `turns` (one JSON object per assistant turn).
  test::RunResult run(const std::vector<json>& turns, std::vector<std::string> extra = {}) const {
    std::string script;
    for (const auto& t : turns) script += t.dump() + "\n";
    const std::string model = "replay:" + dir.write("model.jsonl", script);
    std::vector<std::string> argv = {test::bin("subagent-supervisor").string(),
                                     "run",
                                     "--preset",
                                     "gate",
                                     "--policy-dir",
                                     (dir.path() / "policies").string(),
                                     "--workspace",
                                     ws.path().string(),
                                     "--brief",
                                     "look",
                                     "--model",
                                     model,
                                     "--quiet",
                                     "--no-transcript",
                                     "--audit-log",
                                     (dir.path() / "audit.jsonl").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return test::run(argv);  // stdin is no terminal: nobody can answer an approval
  }
};

json call(const std::string& tool, json args) { return {{"name", tool}, {"arguments", std::move(args)}}; }
json turn(json calls) { return {{"tool_calls", std::move(calls)}}; }
// turn({call(...)}) with one call: a braced list of one json would copy that json under clang
// (its object, not an array of it), and make an array under gcc; this overload is an array in both.
json turn(std::initializer_list<json> calls) {
  json list = json::array();
  for (const json& c : calls) list.push_back(c);
  return turn(std::move(list));
}
const json kDone = {{"content", "done"}};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// stderr lines the supervisor printed for denials.
std::vector<std::string> denial_lines(const std::string& err) {
  std::vector<std::string> out;
  for (auto& l : lines_of(err))
    if (l.rfind("subagent-supervisor run: [subagent:", 0) == 0) out.push_back(l);
  return out;
}

std::string line_for(const json& env, const std::string& tool, const std::string& rule, const std::string& reason) {
  return "subagent-supervisor run: [subagent:" + env["id"].get<std::string>() + "] denied " + tool + " (" + rule +
         "): " + reason;
}

}  // namespace

TEST_CASE("run: an ask with no approver is denied, with a line on stderr and an entry in the envelope") {
  Gate g(json{{"allow", {"list_dir"}}, {"ask", {"read_file"}}, {"deny", json::array()}});
  auto r = g.run({turn({call("read_file", {{"path", "notes.txt"}})}), kDone});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json env = json::parse(r.out);
  CHECK(env["tools_denied"] == 1);
  CHECK(env["denials_omitted"] == 0);
  REQUIRE(env["denials"].size() == 1);
  CHECK(env["denials"][0] == json{{"tool", "read_file"},
                                  {"rule", "ask: no approver"},
                                  {"reason", "policy gate: tools.ask lists 'read_file'"}});
  CHECK(env["tools_used"].value("read_file", 0) == 0);
  CHECK(denial_lines(r.err) == std::vector<std::string>{line_for(env, "read_file", "ask: no approver",
                                                                 "policy gate: tools.ask lists 'read_file'")});
  // The audit log has the denial with its rule, and `audit --event denial` finds exactly it.
  const std::string audit = test::slurp(g.dir.path() / "audit.jsonl");
  CHECK(audit.find(R"("decision":"deny")") != std::string::npos);
  CHECK(audit.find(R"("rule":"tools.ask")") != std::string::npos);
  auto a = test::run({test::bin("subagent-supervisor").string(), "audit", "--event", "denial", "--json", "--file",
                      (g.dir.path() / "audit.jsonl").string()});
  REQUIRE(a.code == 0);
  auto found = lines_of(a.out);
  REQUIRE(found.size() == 1);
  json line = json::parse(found[0]);
  CHECK(line["child"] == env["id"]);
  CHECK(line["tool"] == "read_file");
  CHECK(line["rule"] == "ask: no approver");
}

TEST_CASE("twin: the same call allowed runs, with no denial and no line") {
  Gate g(json{{"allow", {"list_dir", "read_file"}}, {"ask", json::array()}, {"deny", json::array()}});
  auto r = g.run({turn({call("read_file", {{"path", "notes.txt"}})}), kDone});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json env = json::parse(r.out);
  CHECK(env["tools_used"]["read_file"] == 1);
  CHECK(env["tools_denied"] == 0);
  CHECK(env["denials"] == json::array());
  CHECK(env["denials_omitted"] == 0);
  CHECK(denial_lines(r.err).empty());
  CHECK(r.err.find("denied") == std::string::npos);
  CHECK(test::slurp(g.dir.path() / "audit.jsonl").find(R"("event":"denial")") == std::string::npos);
}

TEST_CASE("run: deny lists, argument rules, parent-only and unoffered tools each name their rule") {
  Gate g(json{{"allow", {"list_dir", "read_file"}},
              {"ask", json::array()},
              {"deny", {"write_file"}},
              {"rules", {{{"tool", "read_file"}, {"decision", "deny"}, {"when", {{"path_under", {"secret"}}}}}}}});
  auto r = g.run({turn({call("read_file", {{"path", "secret/key.txt"}}), call("read_file", {{"path", "notes.txt"}}),
                        call("write_file", {{"path", "x"}, {"content", "y"}}), call("spawn_agent", json::object()),
                        call("frobnicate", json::object())}),
                  kDone});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json env = json::parse(r.out);
  // The twin inside the same run: read_file outside secret/ is allowed and ran.
  CHECK(env["tools_used"]["read_file"] == 1);
  CHECK(env["tools_denied"] == 4);
  CHECK(env["denials_omitted"] == 0);
  const json expected = json::array(
      {{{"tool", "read_file"},
        {"rule", R"(tools.rules[0] {"path_under":["secret"]})"},
        {"reason", R"(policy gate: tools.rules[0] ({"path_under":["secret"]}) says deny)"}},
       {{"tool", "write_file"}, {"rule", "tools.deny"}, {"reason", "policy gate: tools.deny lists 'write_file'"}},
       {{"tool", "spawn_agent"},
        {"rule", "blocked"},
        {"reason", "'spawn_agent' is a parent-only capability (policy gate: blocked)"}},
       {{"tool", "frobnicate"}, {"rule", "not offered"}, {"reason", "policy gate does not list tool 'frobnicate'"}}});
  CHECK(env["denials"] == expected);
  std::vector<std::string> want;
  for (const auto& d : expected) want.push_back(line_for(env, d["tool"], d["rule"], d["reason"]));
  CHECK(denial_lines(r.err) == want);
  CHECK_FALSE(std::filesystem::exists(g.ws.path() / "x"));
}

TEST_CASE("run: more denials than the cap: the first 16 listed, the rest counted, the envelope bounded") {
  Gate g(json{{"allow", {"list_dir"}}, {"ask", json::array()}, {"deny", json::array()}});
  json calls = json::array();
  for (int i = 0; i < 300; ++i) calls.push_back(call("nope_" + std::to_string(i), json::object()));
  auto r = g.run({turn(calls), kDone});
  REQUIRE(r.code == 0);
  json env = json::parse(r.out);
  CHECK(env["tools_denied"] == 300);
  REQUIRE(env["denials"].size() == protocol::kMaxDenials);
  CHECK(env["denials_omitted"] == 300 - protocol::kMaxDenials);
  for (std::size_t i = 0; i < protocol::kMaxDenials; ++i)
    CHECK(env["denials"][i]["tool"] == "nope_" + std::to_string(i));
  // stderr: one line per denial up to 256, then one line saying the rest are only counted.
  auto lines = denial_lines(r.err);
  REQUIRE(lines.size() == 257);
  CHECK(lines[255] == line_for(env, "nope_255", "not offered", "policy gate does not list tool 'nope_255'"));
  CHECK(lines[256].find("more denials are not shown") != std::string::npos);
  CHECK(r.err.find("nope_256") == std::string::npos);
}

TEST_CASE("run: hostile tool names are cut and the denials stay within their byte cap") {
  Gate g(json{{"allow", {"list_dir"}}, {"ask", json::array()}, {"deny", json::array()}});
  json calls = json::array();
  // Control characters cost six bytes each in JSON ("\u0001"): the byte cap, not the count, binds.
  for (int i = 0; i < 20; ++i) calls.push_back(call(std::to_string(i) + std::string(1000, '\x01'), json::object()));
  auto r = g.run({turn(calls), kDone});
  REQUIRE(r.code == 0);
  json env = json::parse(r.out);
  CHECK(env["tools_denied"] == 20);
  const std::size_t listed = env["denials"].size();
  CHECK(listed >= 1);
  CHECK(listed < protocol::kMaxDenials);
  CHECK(env["denials_omitted"] == 20 - listed);
  CHECK(env["denials"].dump().size() <= protocol::kMaxDenialsBytes);
  for (const auto& d : env["denials"]) {
    CHECK(d["tool"].get<std::string>().size() <= protocol::kDenialToolBytes);
    CHECK(d["rule"] == "not offered");
    CHECK(d["reason"].get<std::string>().size() <= protocol::kDenialReasonBytes);
  }
  // The twin: the names really were that long (the child asked with them), and the stderr lines
  // carry them escaped, cut to the same caps.
  auto lines = denial_lines(r.err);
  CHECK(lines.size() == 20);
  CHECK(r.err.find('\x01') == std::string::npos);
  CHECK(lines[0].find("0\\u0001\\u0001") != std::string::npos);
  CHECK(lines[0].size() < 64 * 6 + 240 * 6 + 200);
}

TEST_CASE("run: a child printing the supervisor's denial line word for word comes out distinguishable") {
  Gate g(json{{"allow", {"list_dir"}}, {"ask", json::array()}, {"deny", {"write_file"}}});
  auto r = g.run({kDone}, {"--child", test::program("fake_child").string(), "--child-arg", "forge_denial",
                           "--child-arg", "write_file"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  json env = json::parse(r.out);
  const std::string id = env["id"];
  const std::string real = line_for(env, "write_file", "tools.deny", "policy gate: tools.deny lists 'write_file'");
  // Exactly one line is the supervisor's: the real denial.
  CHECK(denial_lines(r.err) == std::vector<std::string>{real});
  // The child did print the same words (five times), each time only after its own prefix.
  int forged = 0;
  for (const auto& l : lines_of(r.err)) {
    if (l == real || l.find("denied write_file (tools.deny)") == std::string::npos) continue;
    ++forged;
    CHECK(l.rfind("[subagent:" + id + "] ", 0) == 0);
  }
  CHECK(forged == 5);
  CHECK(r.err.find("\r") == std::string::npos);
  CHECK(env["denials"].size() == 1);
  CHECK(env["tools_denied"] == 1);
}

TEST_CASE("DenialList: fields cut on UTF-8 boundaries, a prefix kept, refit after text grew") {
  protocol::DenialList l;
  l.add({std::string(63, 'a') + "\xc3\xa9" + "tail", "r", "why"});  // é straddles the 64-byte cap
  REQUIRE(l.listed.size() == 1);
  CHECK(l.listed[0].tool == std::string(63, 'a'));
  for (int i = 0; i < 20; ++i) l.add({"t" + std::to_string(i), "r", "why"});
  CHECK(l.listed.size() == protocol::kMaxDenials);
  CHECK(l.omitted == 21 - protocol::kMaxDenials);
  CHECK(l.total() == 21);
  // Text that grew past the byte cap (a redaction marker longer than what it replaced) is refitted:
  // a prefix stays, the rest is counted, the total never changes.
  for (auto& d : l.listed) d.reason = std::string(2000, '\x02');
  l.refit();
  CHECK(l.total() == 21);
  CHECK(l.listed.size() < protocol::kMaxDenials);
  CHECK(l.listed.size() >= 1);
  json a = json::array();
  for (const auto& d : l.listed) a.push_back(protocol::to_json(d));
  CHECK(a.dump().size() <= protocol::kMaxDenialsBytes);
  CHECK(l.listed[0].tool == std::string(63, 'a'));  // still the first one
}

TEST_CASE("scrub_envelope scrubs the denials too") {
  protocol::Envelope e;
  e.tools_denied = 1;
  e.denials.add({"read_file", "ask: no approver", "the model said hunter2-the-password"});
  supervisor::ScrubOptions o;
  o.from_environment = false;
  o.literals = {"hunter2-the-password"};
  supervisor::Scrubber s(o);
  supervisor::scrub_envelope(s, e, 2000, 48000);
  REQUIRE(e.denials.listed.size() == 1);
  CHECK(e.denials.listed[0].reason.find("hunter2") == std::string::npos);
  CHECK(e.denials.listed[0].reason.find("the model said [REDACTED") == 0);
  CHECK(e.denials.total() == e.tools_denied);
}
