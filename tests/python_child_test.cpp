// Children in any language: examples/python_child.py (written from protocol/README.md) runs under the
// shipped explore, reviewer and worker presets through the real CLI, by the documented route (the
// presets' "${interpreter}" execute entry), and each preset's characteristic tool works from Python.
// Its twin: the same child under a copy of explore without "${interpreter}" is refused, and the
// error names the interpreter that was not executable and how to allow it.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kChild = test::source("examples/python_child.py");

struct Run {
  int code = -1;
  json env;
  json transcript;
  std::string err;
};

// The text of every tool message the model was sent, from the transcript (docs/transcripts.md).
std::string tool_messages(const json& transcript) {
  std::string out;
  for (const auto& e : transcript["events"])
    if (e.value("event", "") == "model_request")
      for (const auto& m : e["new_messages"])
        if (m.value("role", "") == "tool") out += m.value("content", "") + "\n";
  return out;
}

Run run_python(const std::string& preset, const fs::path& ws, const std::string& turns,
               std::vector<std::string> extra = {}) {
  test::TempDir dir;
  const std::string script = dir.write("model.jsonl", turns);
  const fs::path tdir = dir.path() / "t";
  std::vector<std::string> a = {test::bin("subagent-supervisor").string(),
                                "run",
                                "--preset",
                                preset,
                                "--workspace",
                                ws.string(),
                                "--child",
                                kChild.string(),
                                "--brief",
                                "look around",
                                "--model",
                                "replay:" + script,
                                "--quiet",
                                "--transcript-dir",
                                tdir.string()};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = test::run(a);
  Run out;
  out.code = r.code;
  out.err = r.err;
  out.env = json::parse(r.out, nullptr, false);
  REQUIRE_MESSAGE(out.env.is_object(), r.out << "\n" << r.err);
  if (out.env["transcript"].is_string())
    out.transcript = json::parse(test::slurp(out.env["transcript"].get<std::string>()), nullptr, false);
  return out;
}

void sh(const std::string& cmd) { REQUIRE_MESSAGE(std::system((cmd + " >/dev/null 2>&1").c_str()) == 0, cmd); }

}  // namespace

TEST_CASE("the Python example child runs under explore: list_dir and grep in Python") {
  REQUIRE(fs::exists("/usr/bin/python3"));
  test::TempDir ws;
  ws.write("notes/todo.txt", "buy milk\nfind the needle\n");
  auto r = run_python(
      "explore", ws.path(),
      R"({"content":"looking","tool_calls":[{"name":"list_dir","arguments":{"path":"notes"}},{"name":"grep","arguments":{"pattern":"needle"}}]})"
      "\n"
      R"({"content":"## Summary\nFound it in notes/todo.txt."})"
      "\n");
  CHECK_MESSAGE(r.code == 0, r.env.dump(2) << r.err);
  CHECK(r.env["status"] == "completed");
  CHECK(r.env["summary"] == "Found it in notes/todo.txt.");
  CHECK(r.env["tools_used"]["list_dir"] == 1);
  CHECK(r.env["tools_used"]["grep"] == 1);
  REQUIRE(r.transcript.is_object());
  const std::string tools = tool_messages(r.transcript);
  CHECK_MESSAGE(tools.find("todo.txt") != std::string::npos, tools);
  CHECK_MESSAGE(tools.find("notes/todo.txt:2: find the needle") != std::string::npos, tools);
}

TEST_CASE("the Python example child runs under reviewer: git through subprocess with stdin=DEVNULL") {
  test::TempDir ws;
  const std::string g = "git -C " + ws.path().string() + " -c user.name=T -c user.email=t@example.org ";
  sh(g + "init -q -b main");
  ws.write("a.txt", "one\n");
  sh(g + "add -A");
  sh(g + "commit -q -m 'the first commit'");
  auto r = run_python("reviewer", ws.path(),
                      R"({"content":"history","tool_calls":[{"name":"git_log","arguments":{}}]})"
                      "\n"
                      R"({"content":"## Summary\nOne commit."})"
                      "\n");
  CHECK_MESSAGE(r.code == 0, r.env.dump(2) << r.err);
  CHECK(r.env["tools_used"]["git_log"] == 1);
  const std::string tools = tool_messages(r.transcript);
  CHECK_MESSAGE(tools.find("the first commit") != std::string::npos, tools);
  CHECK_MESSAGE(tools.find("[exit 0]") != std::string::npos, tools);
  CHECK(tools.find("Permission denied") == std::string::npos);
}

TEST_CASE("the Python example child runs under worker: run_command make") {
  test::TempDir ws;
  ws.write("Makefile", "all:\n\t@echo built-by-make\n");
  auto r = run_python("worker", ws.path(),
                      R"({"content":"build","tool_calls":[{"name":"run_command","arguments":{"command":"make"}}]})"
                      "\n"
                      R"({"content":"## Summary\nBuilt."})"
                      "\n");
  CHECK_MESSAGE(r.code == 0, r.env.dump(2) << r.err);
  CHECK(r.env["tools_used"]["run_command"] == 1);
  const std::string tools = tool_messages(r.transcript);
  CHECK_MESSAGE(tools.find("built-by-make") != std::string::npos, tools);
  CHECK_MESSAGE(tools.find("[exit 0]") != std::string::npos, tools);
}

TEST_CASE("without ${interpreter} the Python child is refused, and the error names the interpreter and the fix") {
  test::TempDir policies;
  for (const auto& e : fs::directory_iterator(test::policy_dir()))
    fs::copy_file(e.path(), policies.path() / e.path().filename());
  std::string text = test::slurp(policies.path() / "explore.json");
  const std::string needle = "\"${interpreter}\", ";
  auto at = text.find(needle);
  REQUIRE(at != std::string::npos);
  text.erase(at, needle.size());
  std::ofstream(policies.path() / "explore.json", std::ios::trunc) << text;
  test::TempDir ws;
  auto r = run_python("explore", ws.path(), "{\"content\":\"## Summary\\nnothing\"}\n",
                      {"--policy-dir", policies.path().string()});
  CHECK(r.code == 5);
  CHECK(r.env["status"] == "failed");
  const std::string reason = r.env["reason"];
  CHECK_MESSAGE(reason.find("Permission denied") != std::string::npos, reason);
  CHECK_MESSAGE(reason.find("its interpreter '/usr/bin/") != std::string::npos, reason);
  CHECK_MESSAGE(reason.find("\"${interpreter}\"") != std::string::npos, reason);
  // Twin: the shipped explore (with "${interpreter}") runs the very same child.
  auto ok = run_python("explore", ws.path(), "{\"content\":\"## Summary\\nnothing\"}\n");
  CHECK_MESSAGE(ok.env["status"] == "completed", ok.env.dump(2));
}

TEST_CASE("under explore /dev/null opens read-write (Python's subprocess.DEVNULL), and nothing else becomes writable") {
  test::TempDir ws;
  ws.write("f.txt", "keep\n");
  const std::string code =
      "import os, subprocess\n"
      "os.close(os.open('/dev/null', os.O_RDWR))\n"
      "print('devnull ok')\n"
      "try:\n"
      "    open('f.txt', 'w')\n"
      "    print('write allowed')\n"
      "except OSError as e:  # EROFS from the read-only bind, or EACCES from Landlock\n"
      "    print('write refused' if e.errno in (13, 30) else 'other error %d' % e.errno)\n";
  // Through a pipe: explore lets no file grow, so `sandbox` refuses a regular file as stdout.
  auto r = test::run({"/bin/sh", "-c",
                      "\"$0\" sandbox --preset explore --workspace \"$1\" -- /usr/bin/python3 -c \"$2\" 2>&1 | cat",
                      test::bin("subagent-supervisor").string(), ws.path().string(), code});
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(r.out.find("devnull ok") != std::string::npos, r.out << r.err);
  CHECK_MESSAGE(r.out.find("write refused") != std::string::npos, r.out << r.err);
  CHECK(test::slurp(ws.path() / "f.txt") == "keep\n");
  // Twin without the sandbox: the same script may write the file (so "refused" above is the sandbox's doing).
  auto plain = test::run({"/bin/sh", "-c", "cd " + ws.path().string() + " && /usr/bin/python3 -c \"$0\"", code});
  CHECK_MESSAGE(plain.out.find("write allowed") != std::string::npos, plain.out << plain.err);
}
