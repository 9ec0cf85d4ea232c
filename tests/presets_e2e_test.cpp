// Every shipped preset does its job with a model that sees only what it is offered: the real CLI
// (`subagent-supervisor run --preset P --model fake`), the real reference child in its sandbox, and
// the fake OpenAI server (tests/programs/fake_model_server.cpp) playing a scripted model. Each test
// asserts the model was offered exactly the preset's tools, and that the preset's characteristic tool
// really ran (its output is what the model got back).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <doctest/doctest.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "fake_model_server.hpp"
#include "serve_driver.hpp"
#include "session/budgets.hpp"
#include "models/model_config.hpp"
#include "models/providers.hpp"
#include "session/session.hpp"
#include "web/web_tools.hpp"
#include "test_util.hpp"

using nlohmann::json;
using test::FakeServer;

namespace {

// One blocking HTTP/1.1 exchange with the fake server on 127.0.0.1.
std::string http(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t off = 0; off < req.size();) {
    ssize_t n = ::send(s, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<std::size_t>(n);
  }
  std::string resp;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(s, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    resp.append(buf, static_cast<std::size_t>(n));
    // The fake server keeps connections open: stop once the declared body is in.
    auto head = resp.find("\r\n\r\n");
    auto cl = resp.find("Content-Length: ");
    if (head != std::string::npos && cl != std::string::npos && cl < head) {
      std::size_t len = std::stoul(resp.substr(cl + 16));
      if (resp.size() >= head + 4 + len) break;
    }
  }
  ::close(s);
  auto head = resp.find("\r\n\r\n");
  REQUIRE(head != std::string::npos);
  return resp.substr(head + 4);
}

std::set<std::string> names(const json& arr) {
  std::set<std::string> out;
  for (const auto& n : arr) out.insert(n.get<std::string>());
  return out;
}

// Tool messages (role "tool") of the last request: what the model was given back, in order.
std::vector<std::string> tool_results(const json& requests) {
  std::vector<std::string> out;
  for (const auto& m : requests.back()["body"]["messages"])
    if (m.value("role", "") == "tool") out.push_back(m.value("content", ""));
  return out;
}

struct PresetRun {
  int code = -1;
  json env;
  json requests;  // what the fake model server received, in order
  std::string err;
};

void sh(const std::string& cmd) { REQUIRE_MESSAGE(std::system((cmd + " >/dev/null 2>&1").c_str()) == 0, cmd); }

json model_config(const FakeServer& srv, const std::string& token) {
  return {{"providers",
           {{"fake",
             {{"type", "openai"},
              {"base_url", srv.scenario("script", token) + "/v1"},
              {"model", "fake-model"},
              {"stall_timeout_seconds", 10}}}}}};
}

PresetRun run_preset(const FakeServer& srv, const std::string& preset, const test::TempDir& ws,
                     const std::string& token, const json& turns, std::vector<std::string> extra = {}) {
  REQUIRE(http(srv.port(), "POST", "/script/" + token, turns.dump()) == "{}");
  test::TempDir dir;
  const std::string cfg = dir.write("models.json", model_config(srv, token).dump());
  ::setenv("SUBAGENT_MODEL_CONFIG", cfg.c_str(), 1);
  std::vector<std::string> a = {test::bin("subagent-supervisor").string(),
                                "run",
                                "--preset",
                                preset,
                                "--workspace",
                                ws.path().string(),
                                "--brief",
                                "do the " + preset + " job",
                                "--model",
                                "fake",
                                "--quiet",
                                "--transcript-dir",
                                (dir.path() / "t").string()};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = test::run(a);
  ::unsetenv("SUBAGENT_MODEL_CONFIG");
  PresetRun out;
  out.code = r.code;
  out.err = r.err;
  out.env = json::parse(r.out, nullptr, false);
  out.requests = json::parse(http(srv.port(), "GET", "/inspect/" + token));
  REQUIRE_MESSAGE(out.env.is_object(), "stdout: " << r.out << "\nstderr: " << r.err);
  return out;
}

void expect_offered(const PresetRun& r, std::set<std::string> expected) {
  REQUIRE_MESSAGE(r.requests.size() >= 2, r.requests.dump().substr(0, 2000) << "\n" << r.err);
  // Every turn with tools offers exactly the preset's tools: nothing more, nothing missing.
  for (std::size_t i = 0; i + 1 < r.requests.size(); ++i) {
    CAPTURE(i);
    CHECK(names(r.requests[i]["tools_offered"]) == expected);
  }
}

void git_repo(const test::TempDir& ws) {
  const std::string g = "git -C " + ws.path().string() + " -c user.name=T -c user.email=t@example.org ";
  sh(g + "init -q -b main");
  ws.write("src/lib.c", "int answer(void) { return 41; }\n");
  sh(g + "add -A");
  sh(g + "commit -q -m 'first commit'");
  ws.write("src/lib.c", "int answer(void) { return 42; }\n");
  sh(g + "commit -q -am 'fix the answer'");
}

}  // namespace

TEST_CASE("explore: offered exactly its four read tools; grep finds the line") {
  FakeServer srv;
  test::TempDir ws;
  ws.write("docs/notes.txt", "first line\nthe needle is here\nlast line\n");
  json turns = json::array(
      {{{"content", "Searching."}, {"tool_calls", {{{"name", "grep"}, {"arguments", {{"pattern", "needle"}}}}}}},
       {{"content", "## Summary\nFound the needle in docs/notes.txt:2.\n"}}});
  auto r = run_preset(srv, "explore", ws, "explore-1", turns);
  CHECK_MESSAGE(r.code == 0, r.err);
  CHECK(r.env["status"] == "completed");
  expect_offered(r, {"read_file", "list_dir", "glob", "grep"});
  CHECK(r.env["tools_used"]["grep"] == 1);
  auto results = tool_results(r.requests);
  REQUIRE(results.size() == 1);
  CHECK_MESSAGE(results[0].find("docs/notes.txt:2: the needle is here") != std::string::npos, results[0]);
}

TEST_CASE("reviewer: offered its read and git tools; git_log and git_diff work (git opens /dev/null read-write)") {
  FakeServer srv;
  test::TempDir ws;
  git_repo(ws);
  json turns = json::array({{{"content", "Reviewing."},
                             {"tool_calls",
                              {{{"name", "git_log"}, {"arguments", json::object()}},
                               {{"name", "git_diff"}, {"arguments", {{"rev", "HEAD~1"}}}}}}},
                            {{"content", "## Summary\nThe last commit changes the answer to 42.\n"}}});
  auto r = run_preset(srv, "reviewer", ws, "reviewer-1", turns);
  CHECK_MESSAGE(r.code == 0, r.err);
  expect_offered(r, {"read_file", "list_dir", "glob", "grep", "git_status", "git_log", "git_show", "git_diff"});
  auto results = tool_results(r.requests);
  REQUIRE(results.size() == 2);
  CHECK_MESSAGE(results[0].find("fix the answer") != std::string::npos, results[0]);
  CHECK_MESSAGE(results[0].find("first commit") != std::string::npos, results[0]);
  CHECK_MESSAGE(results[1].find("+int answer(void) { return 42; }") != std::string::npos, results[1]);
  for (const auto& t : results) CHECK(t.find("/dev/null") == std::string::npos);
  CHECK(r.env["tools_used"]["git_log"] == 1);
  CHECK(r.env["tools_used"]["git_diff"] == 1);
}

TEST_CASE("worker: edit_file changes the workspace and run_command make builds it") {
  FakeServer srv;
  test::TempDir ws;
  ws.write("Makefile", "all:\n\t@cat version.txt\n");
  ws.write("version.txt", "version one\n");
  json turns = json::array(
      {{{"content", "Editing."},
        {"tool_calls",
         {{{"name", "edit_file"},
           {"arguments", {{"path", "version.txt"}, {"old_string", "one"}, {"new_string", "two"}}}}}}},
       {{"content", "Building."}, {"tool_calls", {{{"name", "run_command"}, {"arguments", {{"command", "make"}}}}}}},
       {{"content", "## Summary\nVersion bumped; make prints it.\n"}}});
  auto r = run_preset(srv, "worker", ws, "worker-1", turns);
  CHECK_MESSAGE(r.code == 0, r.err);
  expect_offered(r, {"read_file", "list_dir", "glob", "grep", "edit_file", "write_file", "git_status", "git_log",
                     "git_show", "git_diff", "run_command"});
  CHECK(test::slurp(ws.path() / "version.txt") == "version two\n");
  auto results = tool_results(r.requests);
  REQUIRE(results.size() == 2);
  CHECK_MESSAGE(results[1].find("version two") != std::string::npos, results[1]);
  CHECK(r.env["tools_used"]["run_command"] == 1);
}

TEST_CASE("implementation: write_file in its worktree comes back as a patch; the workspace is untouched") {
  // Through `serve` (the hub gives an implementation child its worktree and collects the patch).
  FakeServer srv;
  test::TempDir ws, cfgdir;
  git_repo(ws);
  json turns =
      json::array({{{"content", "Writing."},
                    {"tool_calls",
                     {{{"name", "write_file"}, {"arguments", {{"path", "src/new.c"}, {"content", "int n = 7;\n"}}}}}}},
                   {{"content", "## Summary\nAdded src/new.c.\n"}}});
  REQUIRE(http(srv.port(), "POST", "/script/impl-1", turns.dump()) == "{}");
  const std::string cfg = cfgdir.write("models.json", model_config(srv, "impl-1").dump());
  test::Serve serve({{"--model", "fake", "--workspace", ws.path().string()}, false, {"SUBAGENT_MODEL_CONFIG=" + cfg}});
  serve.hello();
  serve.send(
      {{"type", "spawn"}, {"id", "s"}, {"preset", "implementation"}, {"brief", "add a file"}, {"description", "impl"}});
  json reply = serve.reply("s", std::chrono::seconds(120));
  REQUIRE_MESSAGE(reply.value("type", "") == "result", reply.dump(2) << serve.stderr_text());
  PresetRun r;
  r.env = reply["envelope"];
  r.requests = json::parse(http(srv.port(), "GET", "/inspect/impl-1"));
  CHECK_MESSAGE(r.env["status"] == "completed", r.env.dump(2));
  expect_offered(r, {"read_file", "list_dir", "glob", "grep", "edit_file", "write_file", "git_status", "git_log",
                     "git_show", "git_diff", "run_command"});
  CHECK_FALSE(std::filesystem::exists(ws.path() / "src/new.c"));
  REQUIRE_MESSAGE(r.env.contains("artifacts"), r.env.dump(2));
  REQUIRE_MESSAGE(r.env["artifacts"].contains("patch"), r.env.dump(2));
  const json& patch = r.env["artifacts"]["patch"];
  CHECK(patch.dump().find("src/new.c") != std::string::npos);
  const std::string path = patch.value("path", "");
  REQUIRE_FALSE(path.empty());
  const std::string text = test::slurp(path);
  CHECK_MESSAGE(text.find("+int n = 7;") != std::string::npos, text);
}

TEST_CASE("research: web_fetch and web_search are offered and run by the broker, never by the child") {
  FakeServer srv;
  test::TempDir ws;
  ws.write("question.txt", "what is on the page?\n");
  const std::string page = "http://127.0.0.1:" + std::to_string(srv.port()) + "/web/page.html";
  json turns = json::array({{{"content", "Searching."},
                             {"tool_calls",
                              {{{"name", "web_search"}, {"arguments", {{"query", "subagents"}}}},
                               {{"name", "web_fetch"}, {"arguments", {{"url", page}}}}}}},
                            {{"content", "## Summary\nSearched.\n"}}});
  // The search endpoint is the operator's (often on this machine): loopback is fine for it.
  ::setenv("SUBAGENT_SEARCH_ENDPOINT", ("http://127.0.0.1:" + std::to_string(srv.port()) + "/web/search").c_str(), 1);
  auto r = run_preset(srv, "research", ws, "research-1", turns);
  ::unsetenv("SUBAGENT_SEARCH_ENDPOINT");
  CHECK_MESSAGE(r.code == 0, r.err);
  expect_offered(r, {"read_file", "list_dir", "glob", "grep", "web_fetch", "web_search"});
  auto results = tool_results(r.requests);
  REQUIRE(results.size() == 2);
  CHECK_MESSAGE(results[0].find("Result A") != std::string::npos, results[0]);
  CHECK_MESSAGE(results[0].find("https://example.org/a") != std::string::npos, results[0]);
  // From the real CLI a loopback page is refused: the supervisor checks the address it connects to.
  CHECK_MESSAGE(results[1].find("is loopback") != std::string::npos, results[1]);
  CHECK(r.env["tools_used"]["web_search"] == 1);
}

TEST_CASE("research: web_fetch of a loopback page succeeds through the broker with the test-only port hook") {
  // WebToolsConfig::allow_loopback_ports_for_tests_only is the one way to let web_fetch reach a test
  // server on 127.0.0.1; no policy, flag or environment variable can set it. The child, the provider
  // and the session are the real ones.
  FakeServer srv;
  test::TempDir ws;
  const std::string token = "research-hook";
  const std::string page = "http://127.0.0.1:" + std::to_string(srv.port()) + "/web/page.html";
  json turns = json::array(
      {{{"content", "Fetching."}, {"tool_calls", {{{"name", "web_fetch"}, {"arguments", {{"url", page}}}}}}},
       {{"content", "## Summary\nFetched.\n"}}});
  REQUIRE(http(srv.port(), "POST", "/script/" + token, turns.dump()) == "{}");

  boost::asio::io_context io;
  using namespace supervisor;
  auto preset = std::make_shared<Preset>(load_preset("research", test::policy_dir()));
  SessionConfig cfg;
  cfg.id = new_child_id();
  cfg.preset = preset;
  cfg.budgets = preset->budgets;
  cfg.brief = "fetch the page";
  cfg.workspace = std::filesystem::canonical(ws.path());
  cfg.child_executable = test::bin("subagent-child");
  WebToolsConfig wc;
  wc.allow_loopback_ports_for_tests_only = {static_cast<std::uint16_t>(srv.port())};
  cfg.brokered = make_web_tools(io, wc);
  // Parsed as from a file (a number from a C++ literal is a signed JSON integer).
  ModelConfig mc = parse_model_config(json::parse(model_config(srv, token).dump()), "test");
  auto provider = make_openai_provider(io, resolve_model_spec("fake", mc), "");
  auto session = ChildSession::create(io, cfg, std::move(provider));
  std::optional<protocol::Envelope> env;
  session->start([&](const protocol::Envelope& e) { env = e; });
  REQUIRE(test::run_until(
      io, [&] { return env.has_value(); }, std::chrono::seconds(60)));
  CHECK_MESSAGE(env->status == protocol::Status::completed, env->reason);
  json requests = json::parse(http(srv.port(), "GET", "/inspect/" + token));
  REQUIRE(requests.size() == 2);
  CHECK(names(requests[0]["tools_offered"]) ==
        std::set<std::string>{"read_file", "list_dir", "glob", "grep", "web_fetch", "web_search"});
  auto results = tool_results(requests);
  REQUIRE(results.size() == 1);
  CHECK_MESSAGE(results[0].find("Title: ") != std::string::npos, results[0]);
  CHECK_MESSAGE(results[0].find("/web/page.html") != std::string::npos, results[0]);
  CHECK(results[0].find("is loopback") == std::string::npos);
}
