// Faults in the supervisor's surroundings, against `subagent-supervisor serve` as a real subprocess:
// a model server that is down, stalls or resets; a transcript directory that is read-only or full; a
// parent that closes its input mid-spawn or goes away; SIGTERM, SIGINT and SIGKILL to the supervisor.
// Each time: the supervisor stays up (or exits as documented), good children are unaffected, every
// envelope is reported with the documented status, transcripts are whole, and nothing survives.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sched.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "fake_model_server.hpp"
#include "serve_driver.hpp"

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// The reference child (a private copy) and a replay model for the good children.
struct Setup {
  test::TempDir progs, scripts, ws, spaces;
  fs::path child = test::private_child(progs);
  std::string good_model = test::replay(scripts, "good", R"({"content":"## Summary\nall good","delay_ms":300})");
  std::string slow_model = test::replay(
      scripts, "slow",
      R"({"content":"working","tool_calls":[{"name":"list_dir","arguments":{}}],"delay_ms":400,"repeat":"forever"})");
  Setup() { ws.write("README.md", "hello\n"); }
  std::vector<std::string> args(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {"--child", child.string(), "--workspace", ws.path().string(), "--model", good_model};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

void check_good(const json& done) {
  REQUIRE_MESSAGE(done.is_object(), "a good child never reported");
  CHECK_MESSAGE(done["envelope"]["status"] == "completed", done.dump());
  CHECK(done["envelope"]["summary"] == "all good");
}

// A loopback port nobody listens on: bound, never listened to, closed again.
int closed_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(s);
  return ntohs(a.sin_port);
}

std::vector<json> transcripts_in(const fs::path& dir) {
  std::vector<json> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("subagent-", 0) != 0) continue;
    json j = json::parse(test::slurp(e.path()), nullptr, false);
    CHECK_MESSAGE(!j.is_discarded(), "half a transcript: " << e.path());
    out.push_back(j);
  }
  return out;
}

bool running_all(test::Serve& s, const std::vector<std::string>& ids, const std::string& tag) {
  for (int i = 0; i < 500; ++i) {
    json l = s.list(tag + std::to_string(i));
    REQUIRE(l.is_object());
    std::size_t n = 0;
    for (const auto& c : l["children"])
      if (std::find(ids.begin(), ids.end(), c["child_id"].get<std::string>()) != ids.end() && c["state"] == "running" &&
          c["budget_use"]["steps"].get<int>() > 0)
        ++n;
    if (n == ids.size()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace

TEST_CASE("model server down, stalling or resetting: that child fails naming the cause; others complete") {
  test::FakeServer srv;
  Setup st;
  const int dead = closed_port();
  json cfg = {{"providers",
               {{"down",
                 {{"type", "openai"},
                  {"base_url", "http://127.0.0.1:" + std::to_string(dead) + "/v1"},
                  {"model", "m"},
                  {"max_retries", 1},
                  {"retry_base_delay_ms", 50},
                  {"connect_timeout_ms", 2000}}},
                {"stall",
                 {{"type", "openai"},
                  {"base_url", srv.scenario("stall", "fault-stall") + "/v1"},
                  {"model", "m"},
                  {"max_retries", 0},
                  {"stall_timeout_seconds", 1}}},
                {"reset",
                 {{"type", "openai"},
                  {"base_url", srv.scenario("reset", "fault-reset") + "/v1"},
                  {"model", "m"},
                  {"max_retries", 1},
                  {"retry_base_delay_ms", 50}}},
                {"truncated",
                 {{"type", "openai"},
                  {"base_url", srv.scenario("truncated", "fault-trunc") + "/v1"},
                  {"model", "m"},
                  {"max_retries", 0}}},
                {"hang",  // stalls longer than the child's whole budget
                 {{"type", "openai"},
                  {"base_url", srv.scenario("stall", "fault-hang") + "/v1"},
                  {"model", "m"},
                  {"max_retries", 0},
                  {"stall_timeout_seconds", 600}}}}}};
  const std::string cfg_path = st.scripts.write("models.json", cfg.dump());
  test::Serve s(test::Serve::Options{st.args(), false, {"SUBAGENT_MODEL_CONFIG=" + cfg_path}});
  REQUIRE(s.hello().value("type", "") == "hello");

  std::vector<std::string> good;
  good.push_back(s.spawn_bg("g1", {}));
  struct Fault {
    std::string model, status, reason;
  };
  const std::vector<Fault> faults = {
      {"down", "failed", "model call failed (provider_error"},
      {"stall", "failed", "model call failed ("},
      {"reset", "failed", "model call failed (provider_error"},
      {"truncated", "failed", "model call failed ("},
  };
  std::vector<std::string> bad;
  for (const auto& f : faults) bad.push_back(s.spawn_bg("f-" + f.model, {{"model", f.model}}));
  const std::string hung = s.spawn_bg("f-hang", {{"model", "hang"}, {"limits", {{"timeout", "2s"}}}});
  good.push_back(s.spawn_bg("g2", {}));
  REQUIRE(s.list("during").is_object());
  for (std::size_t i = 0; i < faults.size(); ++i) {
    CAPTURE(faults[i].model);
    json d = s.child_done(bad[i]);
    REQUIRE(d.is_object());
    CHECK_MESSAGE(d["envelope"]["status"] == faults[i].status, d["envelope"].dump());
    CHECK_MESSAGE(d["envelope"]["reason"].get<std::string>().find(faults[i].reason) != std::string::npos,
                  d["envelope"]["reason"]);
  }
  // A model call that hangs past the child's deadline: the wall-clock budget still ends the child.
  json h = s.child_done(hung);
  REQUIRE(h.is_object());
  CHECK_MESSAGE(h["envelope"]["status"] == "timeout", h["envelope"].dump());
  CHECK(h["envelope"]["duration_ms"].get<int>() < 60000);
  for (const auto& g : good) check_good(s.child_done(g));
  s.close_input();
  CHECK(s.wait_exit() == 0);
  CHECK(test::wait_none_named(st.child.filename().string()) == 0);
}

TEST_CASE("twin: the same model spec against a server that answers completes") {
  test::FakeServer srv;
  Setup st;
  json cfg = {{"providers",
               {{"up", {{"type", "openai"}, {"base_url", srv.scenario("text", "fault-up") + "/v1"}, {"model", "m"}}}}}};
  const std::string cfg_path = st.scripts.write("models.json", cfg.dump());
  test::Serve s(test::Serve::Options{st.args(), false, {"SUBAGENT_MODEL_CONFIG=" + cfg_path}});
  REQUIRE(s.hello().value("type", "") == "hello");
  const std::string id = s.spawn_bg("up", {{"model", "up"}});
  json d = s.child_done(id);
  REQUIRE(d.is_object());
  CHECK_MESSAGE(d["envelope"]["status"] == "completed", d["envelope"].dump());
  s.close_input();
  CHECK(s.wait_exit() == 0);
}

namespace {

// Runs in the supervisor's forked process before exec: a private mount namespace, then `mount_it`.
std::function<std::string()> in_private_mounts(std::function<std::string()> mount_it) {
  return [mount_it] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return std::string("mount namespace: ") + std::strerror(errno);
    return mount_it();
  };
}

void transcript_dir_fault(const std::string& kind) {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root for a private mount");
    return;
  }
  Setup st;
  fs::path dir;
  auto mount_it = [&dir, kind]() -> std::string {
    if (kind == "read-only") {
      if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
          ::mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)
        return std::string("read-only bind mount: ") + std::strerror(errno);
      return "";
    }
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0)
      return std::string("tmpfs: ") + std::strerror(errno);
    // Fill it: not one more transcript fits.
    int fd = ::open((dir / "filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    static char block[4096];
    while (fd >= 0 && ::write(fd, block, sizeof block) > 0) {
    }
    if (fd >= 0) ::close(fd);
    return "";
  };
  test::TempDir tdir;
  dir = tdir.path() / "transcripts";
  fs::create_directories(dir);
  std::vector<std::string> a = st.args({"--transcript-dir", dir.string()});
  test::Serve s(test::Serve::Options{a, true, {}, in_private_mounts(mount_it)});
  json h = s.hello();
  REQUIRE_MESSAGE(h.value("type", "") == "hello", h.dump() << s.stderr_text());
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(s.spawn_bg("s" + std::to_string(i), {}));
  REQUIRE(s.list("during").is_object());
  for (const auto& id : ids) {
    json d = s.child_done(id);
    check_good(d);
    CHECK(d["envelope"]["transcript"].is_null());
  }
  bool reported = false;
  for (const auto& l : s.log_lines()) reported |= l.find("transcript") != std::string::npos;
  CHECK_MESSAGE(reported, "no log line reports the transcript failure");
  s.close_input();
  CHECK(s.wait_exit() == 0);
}

}  // namespace

TEST_CASE("a read-only transcript directory: children complete, transcript null, the failure logged") {
  transcript_dir_fault("read-only");
}

TEST_CASE("a full transcript directory: children complete, transcript null, the failure logged") {
  transcript_dir_fault("full");
}

TEST_CASE("the parent closes its input mid-spawn") {
  Setup st;
  SUBCASE("in the middle of the spawn line: a bad_request, nothing starts, exit 0") {
    test::Serve s(test::Serve::Options{st.args()});
    REQUIRE(s.hello().value("type", "") == "hello");
    s.send_raw(R"({"type":"spawn","id":"cut","preset":"explore","brief":"x","backgr)");
    s.close_input();
    json e = s.next([](const json& j) { return j.value("type", "") == "error"; });
    REQUIRE(e.is_object());
    CHECK(e["code"] == "bad_request");
    CHECK(s.wait_exit() == 0);
    CHECK(s.unclaimed().empty());
  }
  SUBCASE("right after a sync spawn: the child is cancelled and its result still reported, exit 0") {
    test::Serve s(test::Serve::Options{st.args()});
    REQUIRE(s.hello().value("type", "") == "hello");
    s.send({{"type", "spawn"}, {"id", "sync"}, {"preset", "explore"}, {"brief", "x"}, {"model", st.slow_model}});
    s.send({{"type", "spawn"},
            {"id", "bg"},
            {"preset", "explore"},
            {"brief", "y"},
            {"model", st.slow_model},
            {"background", true}});
    s.close_input();
    json r = s.reply("sync");
    REQUIRE(r.is_object());
    CHECK(r["type"] == "result");
    CHECK(r["envelope"]["status"] == "cancelled");
    CHECK(r["envelope"]["reason"].get<std::string>().find("the parent closed its input") != std::string::npos);
    json bg = s.reply("bg");
    REQUIRE(bg.is_object());
    json done = s.child_done(bg["child_id"]);
    REQUIRE(done.is_object());
    CHECK(done["envelope"]["status"] == "cancelled");
    CHECK(s.wait_exit() == 0);
    CHECK(test::wait_none_named(st.child.filename().string()) == 0);
  }
  SUBCASE("the parent stops reading before anything ran: the supervisor exits 0, not by SIGPIPE") {
    test::Serve s(test::Serve::Options{st.args()});
    s.close_output();
    s.send({{"type", "hello"}, {"id", "h"}});
    s.send({{"type", "list"}, {"id", "l"}});
    s.close_input();
    CHECK(s.wait_exit() == 0);  // was 128 + SIGPIPE
  }
  SUBCASE("the parent goes away entirely (stdin and stdout closed) with children running: exit 0, none left") {
    test::Serve s(test::Serve::Options{st.args()});
    REQUIRE(s.hello().value("type", "") == "hello");
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) ids.push_back(s.spawn_bg("b" + std::to_string(i), {{"model", st.slow_model}}));
    REQUIRE(running_all(s, ids, "r"));
    s.close_output();
    s.close_input();
    CHECK(s.wait_exit() == 0);
    CHECK(test::wait_none_named(st.child.filename().string()) == 0);
  }
}

TEST_CASE("SIGTERM and SIGINT to the supervisor: children cancelled, envelopes reported, transcripts whole, exit 0") {
  for (int sig : {SIGTERM, SIGINT}) {
    CAPTURE(sig);
    Setup st;
    test::Serve s(test::Serve::Options{st.args(), true});
    REQUIRE(s.hello().value("type", "") == "hello");
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) ids.push_back(s.spawn_bg("b" + std::to_string(i), {{"model", st.slow_model}}));
    REQUIRE(running_all(s, ids, "r"));
    s.signal(sig);
    const std::string why = sig == SIGTERM ? "the supervisor got SIGTERM" : "the supervisor got SIGINT";
    for (const auto& id : ids) {
      json d = s.child_done(id);
      REQUIRE(d.is_object());
      CHECK(d["envelope"]["status"] == "cancelled");
      CHECK(d["envelope"]["reason"].get<std::string>().find(why) != std::string::npos);
      CHECK(d["envelope"]["transcript"].is_string());
    }
    CHECK(s.wait_exit() == 0);
    CHECK(test::wait_none_named(st.child.filename().string()) == 0);
    auto ts = transcripts_in(s.transcript_dir());
    CHECK(ts.size() == 3);
    for (const auto& t : ts) {
      CHECK(t["status"] == "finished");
      CHECK(t["envelope"]["status"] == "cancelled");
    }
  }
}

TEST_CASE("SIGTERM to `run`: the child is cancelled, the envelope printed, exit 4") {
  Setup st;
  test::TempDir io;
  const std::string out = (io.path() / "out").string();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), n = ::open("/dev/null", O_RDWR);
    ::dup2(n, 0);
    ::dup2(o, 1);
    ::dup2(n, 2);
    std::string bin = test::bin("subagent-supervisor").string();
    ::execl(bin.c_str(), bin.c_str(), "run", "--preset", "explore", "--workspace", st.ws.path().c_str(), "--brief", "x",
            "--model", st.slow_model.c_str(), "--child", st.child.c_str(), "--no-transcript", "--audit-log",
            (io.path() / "audit.jsonl").c_str(), "--quiet", nullptr);
    ::_exit(127);
  }
  // Wait for the child to run (its copy's name appears), then signal the supervisor.
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i, std::this_thread::sleep_for(10ms))
    seen = test::processes_named(st.child.filename().string()) > 0;
  CHECK(seen);
  REQUIRE(pid > 0);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 4);
  json e = json::parse(test::slurp(out), nullptr, false);
  REQUIRE(!e.is_discarded());
  CHECK(e["status"] == "cancelled");
  CHECK(e["reason"].get<std::string>().find("SIGTERM") != std::string::npos);
  CHECK(test::wait_none_named(st.child.filename().string()) == 0);
}

TEST_CASE("SIGKILL to the supervisor: every child dies with it, no half-written transcript, the lock is freed") {
  Setup st;
  const fs::path lock_dir = fs::path(st.spaces.write("locked/README.md", "x\n")).parent_path();
  test::TempDir shared_locks, shared_transcripts;  // both outlive the first supervisor's state dir
  const fs::path tdir = shared_transcripts.path() / "transcripts";
  std::vector<std::string> a = st.args({"--lock-dir", shared_locks.path().string(), "--transcript-dir", tdir.string()});
  std::unique_ptr<test::Serve> s = std::make_unique<test::Serve>(test::Serve::Options{a, true});
  REQUIRE(s->hello().value("type", "") == "hello");
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(s->spawn_bg("b" + std::to_string(i), {{"model", st.slow_model}}));
  REQUIRE(running_all(*s, ids, "r"));
  // A worker holding its workspace's lock, so the test can see the lock go with the supervisor.
  s->send({{"type", "spawn"},
           {"id", "w"},
           {"preset", "worker"},
           {"brief", "x"},
           {"workspace", lock_dir.string()},
           {"model", st.slow_model},
           {"background", true}});
  json w = s->reply("w");
  REQUIRE(w.value("state", "") == "running");
  const pid_t dead = s->pid();
  // Twin of the check below: the scan sees them (the worker's launch may still be under way: its
  // workspace is scanned and its exec awaited off the parent's turn).
  for (int i = 0; i < 200 && test::processes_named(st.child.filename().string()) < 5; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(test::processes_named(st.child.filename().string()) == 5);
  s->signal(SIGKILL);
  CHECK(s->wait_exit() == 128 + SIGKILL);
  CHECK(test::wait_none_named(st.child.filename().string()) == 0);  // PR_SET_PDEATHSIG, PID namespaces
  auto ts = transcripts_in(tdir);
  CHECK(ts.size() == 5);
  for (const auto& t : ts) CHECK(t["status"] == "running");  // whole, as last checkpointed
  // A kill in the middle of a write leaves the write's temporary (never a subagent-*.json): plant one
  // for the dead supervisor, and one for a live process (this test), which must be left alone.
  const std::string stale = ".subagent-0123456789ab.json.tmp-" + std::to_string(dead) + "-3";
  const std::string live = ".subagent-0123456789ac.json.tmp-" + std::to_string(::getpid()) + "-3";
  std::ofstream(tdir / stale) << "{\"format\":1,\"id\":\"01";
  std::ofstream(tdir / live) << "{\"format\":1,\"id\":\"01";
  // The kernel dropped the workspace lock with the supervisor: a new one can start a writer there.
  s.reset();
  test::Serve s2(test::Serve::Options{
      std::vector<std::string>{"--child", st.child.string(), "--model", st.good_model, "--lock-dir",
                               shared_locks.path().string(), "--transcript-dir", tdir.string()},
      true});
  REQUIRE(s2.hello().value("type", "") == "hello");
  const std::string id = s2.spawn_bg("w2", {{"preset", "worker"}, {"workspace", lock_dir.string()}});
  json d = s2.child_done(id);
  REQUIRE(d.is_object());
  CHECK(d["envelope"]["status"] == "completed");
  s2.close_input();
  CHECK(s2.wait_exit() == 0);
  // The next supervisor's retention swept the dead one's temporary; the live writer's stays.
  CHECK_FALSE(fs::exists(tdir / stale));
  CHECK(fs::exists(tdir / live));
  CHECK(transcripts_in(tdir).size() == 6);
}
