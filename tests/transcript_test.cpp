// Transcript store: content and format, atomic writes under SIGKILL, the never-overwrite rule,
// retention, unwritable and full directories, and planted secrets across a real session.
#include "session/session_records.hpp"
#include "records/transcript.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "records/audit.hpp"
#include "session/budgets.hpp"
#include "test_util.hpp"

using namespace supervisor;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const Scrubber> patterns_only() { return std::make_shared<const Scrubber>(); }

TranscriptOptions options_in(const fs::path& dir) {
  TranscriptOptions o;
  o.dir = dir;
  return o;
}

TranscriptHeader header(const std::string& id) {
  TranscriptHeader h;
  h.id = id;
  h.parent = "test-parent";
  h.brief = "find the bug";
  h.description = "unit";
  h.preset = "explore";
  h.policy_digest = "sha256:abc";
  h.workspace = "/w";
  return h;
}

json parse_file(const fs::path& p) { return json::parse(test::slurp(p), nullptr, false); }

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  ::lstat(p.c_str(), &st);
  return st.st_mode & 07777;
}

// Runs `fn` in a forked child with a private mount namespace (so it may mount a read-only or a tiny
// filesystem); returns what the child reported ("" for success).
std::string in_child(const std::function<std::string()>& fn) {
  test::TempDir box;
  const std::string report = (box.path() / "report").string();
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string r;
    try {
      if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        r = std::string("mount namespace: ") + std::strerror(errno);
      else
        r = fn();
    } catch (const std::exception& e) {
      r = std::string("exception: ") + e.what();
    } catch (...) {
      r = "unknown exception";
    }
    int fd = ::open(report.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      (void)!::write(fd, r.data(), r.size());
      ::close(fd);
    }
    ::_exit(0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child died with status " + std::to_string(status);
  return test::slurp(report);
}

// In in_child's mount namespace: `dir`, created and bind-mounted read-only onto itself; "" or the error.
std::string make_read_only_dir(const fs::path& dir) {
  fs::create_directories(dir);
  if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)
    return std::string("read-only bind mount: ") + std::strerror(errno);
  return "";
}

}  // namespace

TEST_CASE("rfc3339 timestamps and the default directories") {
  CHECK(rfc3339_utc(std::chrono::system_clock::time_point(std::chrono::milliseconds(1500))) ==
        "1970-01-01T00:00:01.500Z");
  CHECK(rfc3339_utc().size() == 24);
  std::string xdg = std::getenv("XDG_STATE_HOME") ? std::getenv("XDG_STATE_HOME") : "";
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  ::setenv("XDG_STATE_HOME", "/xdg/state", 1);
  CHECK(default_transcript_dir() == fs::path("/xdg/state/subagent-supervisor/transcripts"));
  CHECK(default_audit_file() == fs::path("/xdg/state/subagent-supervisor/transcripts/audit.jsonl"));
  ::setenv("XDG_STATE_HOME", "relative/ignored", 1);
  ::setenv("HOME", "/home/someone", 1);
  CHECK(default_transcript_dir() == fs::path("/home/someone/.local/state/subagent-supervisor/transcripts"));
  if (xdg.empty())
    ::unsetenv("XDG_STATE_HOME");
  else
    ::setenv("XDG_STATE_HOME", xdg.c_str(), 1);
  if (home.empty())
    ::unsetenv("HOME");
  else
    ::setenv("HOME", home.c_str(), 1);
}

TEST_CASE("a transcript holds the header, every event in order, and the envelope; modes 0700 and 0600") {
  test::TempDir d;
  const fs::path dir = d.path() / "state" / "transcripts";
  TranscriptStore store(options_in(dir), patterns_only());
  REQUIRE(store.error().empty());
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(d.path() / "state") == 0700);
  std::string err;
  auto t = store.open(header("a1b2c3"), err);
  REQUIRE_MESSAGE(t, err);
  CHECK(t->path() == dir / "subagent-a1b2c3.json");
  CHECK(mode_of(t->path()) == 0600);
  json running = parse_file(t->path());
  CHECK(running["status"] == "running");
  CHECK(running["format"] == "subagent-transcript/1");

  t->record({{"event", "spawn"},
             {"child", "a1b2c3"},
             {"preset", "explore"},
             {"policy_digest", "sha256:abc"},
             {"model", "replay:x.jsonl"}});
  t->record({{"event", "started"},
             {"pid", 42},
             {"sandbox", {{"applied", {"seccomp", "landlock"}}, {"missing", json::array()}}}});
  t->record({{"event", "model_request"}, {"id", "m1"}, {"step", 1}});
  t->record({{"event", "model_response"}, {"id", "m1"}, {"usage", {{"input_tokens", 10}, {"output_tokens", 5}}}});
  t->record({{"event", "tool_decision"},
             {"id", "t1"},
             {"tool", "grep"},
             {"args", {{"pattern", "x"}}},
             {"decision", "allow"}});
  t->record({{"event", "tool_done"}, {"id", "t1"}, {"tool", "grep"}, {"ok", true}, {"bytes", 12}});
  t->record({{"event", "exit"}, {"code", 0}});
  json env = {{"id", "a1b2c3"}, {"status", "completed"}, {"transcript", nullptr}};
  CHECK(t->record_envelope(env));
  CHECK(t->error().empty());

  json j = parse_file(t->path());
  REQUIRE_FALSE(j.is_discarded());
  CHECK(j["status"] == "finished");
  CHECK(j["id"] == "a1b2c3");
  CHECK(j["parent"] == "test-parent");
  CHECK(j["brief"] == "find the bug");
  CHECK(j["preset"] == "explore");
  CHECK(j["policy_digest"] == "sha256:abc");
  CHECK(j["model"] == "replay:x.jsonl");
  CHECK(j["sandbox"]["applied"] == json({"seccomp", "landlock"}));
  REQUIRE(j["events"].size() == 7);
  const char* order[] = {"spawn", "started", "model_request", "model_response", "tool_decision", "tool_done", "exit"};
  for (std::size_t i = 0; i < 7; ++i) {
    CHECK(j["events"][i]["event"] == order[i]);
    CHECK(j["events"][i]["time"].get<std::string>().size() == 24);
  }
  CHECK(j["events"][3]["usage"]["input_tokens"] == 10);
  CHECK(j["envelope"]["status"] == "completed");
  CHECK(j["envelope"]["transcript"] == t->path().string());
}

TEST_CASE("checkpoints: key events write at once, routine events wait for the interval") {
  test::TempDir d;
  auto o = options_in(d.path());
  o.checkpoint_interval = std::chrono::hours(1);
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t = store.open(header("cp"), err);
  REQUIRE(t);
  CHECK(t->writes() == 1);
  t->record({{"event", "model_request"}, {"id", "m1"}});
  t->record({{"event", "tool_decision"}, {"tool", "grep"}, {"decision", "allow"}});
  CHECK(t->writes() == 1);
  CHECK(parse_file(t->path())["events"].size() == 0);
  t->record({{"event", "tool_decision"}, {"tool", "write_file"}, {"decision", "ask"}});
  CHECK(t->writes() == 2);
  CHECK(parse_file(t->path())["events"].size() == 3);
  t->record({{"event", "budget"}, {"budget", "steps"}});
  t->record({{"event", "kill"}, {"reason", "x"}});
  CHECK(t->writes() == 4);
  o.checkpoint_interval = std::chrono::milliseconds(0);
  TranscriptStore every(o, patterns_only());
  auto t2 = every.open(header("cp2"), err);
  REQUIRE(t2);
  t2->record({{"event", "model_request"}, {"id", "m1"}});
  CHECK(t2->writes() == 2);
}

TEST_CASE("long strings are cut after scrubbing, and events beyond the cap are counted") {
  test::TempDir d;
  auto o = options_in(d.path());
  o.max_string_bytes = 100;
  o.max_events = 3;
  o.checkpoint_interval = std::chrono::milliseconds(0);
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t = store.open(header("cut"), err);
  REQUIRE(t);
  // The secret sits across the cut: scrubbing first means no half of it survives.
  std::string big =
      std::string(80, 'a') + " sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa " + std::string(500, 'b');
  t->record({{"event", "tool_decision"}, {"args", {{"content", big}}}});
  for (int i = 0; i < 5; ++i) t->record({{"event", "model_request"}, {"n", i}});
  json j = parse_file(t->path());
  CHECK(j["events"].size() == 3);
  CHECK(j["events_dropped"] == 3);
  std::string c = j["events"][0]["args"]["content"];
  CHECK(c.find("Tq3vX9bK") == std::string::npos);
  CHECK(c.find("sk-proj") == std::string::npos);
  CHECK(c.find("[cut: ") != std::string::npos);
}

TEST_CASE("an existing id is refused and the file is left alone") {
  test::TempDir d;
  TranscriptStore store(options_in(d.path()), patterns_only());
  const std::string theirs = "someone else's file, not JSON";
  d.write("subagent-taken.json", theirs);
  std::string err;
  CHECK_FALSE(store.open(header("taken"), err));
  CHECK(err.find("already exists") != std::string::npos);
  CHECK(err.find("subagent-taken.json") != std::string::npos);
  CHECK(test::slurp(d.path() / "subagent-taken.json") == theirs);

  // A symlink in the way is refused too, and what it points to is untouched.
  d.write("target.txt", "target");
  fs::create_symlink(d.path() / "target.txt", d.path() / "subagent-linked.json");
  CHECK_FALSE(store.open(header("linked"), err));
  CHECK(test::slurp(d.path() / "target.txt") == "target");

  // The same id twice in one store, while the first is open.
  auto first = store.open(header("dup"), err);
  REQUIRE(first);
  CHECK_FALSE(store.open(header("dup"), err));
  CHECK(err.find("already") != std::string::npos);
  // And after it finished, from another store: the file exists, so the id is refused.
  first->record_envelope({{"status", "completed"}});
  first.reset();
  TranscriptStore other(options_in(d.path()), patterns_only());
  CHECK_FALSE(other.open(header("dup"), err));
  CHECK(parse_file(d.path() / "subagent-dup.json")["status"] == "finished");

  // Ids that are not plain file names.
  CHECK_FALSE(store.open(header("../escape"), err));
  CHECK(err.find("file name") != std::string::npos);
  CHECK_FALSE(store.open(header(""), err));
  CHECK_FALSE(fs::exists(d.path().parent_path() / "escape.json"));
}

TEST_CASE("a file replaced behind the store's back is not overwritten; a deleted one is recreated") {
  test::TempDir d;
  auto o = options_in(d.path());
  o.checkpoint_interval = std::chrono::milliseconds(0);
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t = store.open(header("swap"), err);
  REQUIRE(t);
  d.write("intruder", "theirs");
  fs::rename(d.path() / "intruder", t->path());
  t->record({{"event", "kill"}, {"reason", "x"}});
  CHECK(t->error().find("replaced by another program") != std::string::npos);
  CHECK(test::slurp(t->path()) == "theirs");

  auto t2 = store.open(header("gone"), err);
  REQUIRE(t2);
  fs::remove(t2->path());
  CHECK(t2->flush());
  CHECK(parse_file(t2->path())["id"] == "gone");
}

TEST_CASE("retention keeps the newest 200 subagent transcripts and never touches anything else") {
  test::TempDir d;
  const auto base = std::chrono::system_clock::now() - std::chrono::hours(24);
  for (int i = 0; i < 205; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "subagent-old%03d.json", i);
    auto p = d.write(name, "{}");
    struct timespec ts[2];
    auto secs = std::chrono::duration_cast<std::chrono::seconds>((base + std::chrono::seconds(i)).time_since_epoch());
    ts[0] = ts[1] = {static_cast<time_t>(secs.count()), 0};
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), ts, 0) == 0);
  }
  // Other files, some of them older than every transcript.
  const std::vector<std::string> others = {"teammate-abc.json",        "notes.txt",           "audit.jsonl",
                                           ".subagent-x.json.tmp-1-2", "subagent-.json",      "subagent-a b.json",
                                           "SUBAGENT-upper.json",      "subagent-x.json.bak", "xsubagent-y.json"};
  for (const auto& n : others) {
    auto p = d.write(n, "keep me: " + n);
    struct timespec ts[2] = {{1, 0}, {1, 0}};
    ::utimensat(AT_FDCWD, p.c_str(), ts, 0);
  }
  fs::create_directory(d.path() / "subagent-dir.json");
  fs::create_symlink(d.path() / "teammate-abc.json", d.path() / "subagent-link.json");

  auto o = options_in(d.path());
  REQUIRE(o.keep == 200);  // the documented default
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t = store.open(header("fresh"), err);
  REQUIRE(t);

  int transcripts = 0;
  for (const auto& e : fs::directory_iterator(d.path())) {
    std::string n = e.path().filename().string();
    if (n.rfind("subagent-", 0) == 0 && n.size() > 14 && n.substr(n.size() - 5) == ".json" && e.is_regular_file() &&
        !e.is_symlink() && n.find(' ') == std::string::npos && n != "subagent-.json")
      ++transcripts;
  }
  CHECK(transcripts == 200);
  for (int i = 0; i < 6; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "subagent-old%03d.json", i);
    CHECK_MESSAGE(!fs::exists(d.path() / name), name);
  }
  CHECK(fs::exists(d.path() / "subagent-old006.json"));
  CHECK(fs::exists(t->path()));
  for (const auto& n : others) CHECK(test::slurp(d.path() / n) == "keep me: " + n);
  CHECK(fs::is_directory(d.path() / "subagent-dir.json"));
  CHECK(fs::is_symlink(d.path() / "subagent-link.json"));
}

TEST_CASE("retention never deletes a transcript that is still being written") {
  test::TempDir d;
  auto o = options_in(d.path());
  o.keep = 2;
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t1 = store.open(header("keep-1"), err);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t2 = store.open(header("keep-2"), err);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t3 = store.open(header("keep-3"), err);
  REQUIRE((t1 && t2 && t3));
  CHECK(fs::exists(t1->path()));  // three files, keep 2, but all three are open
  auto p1 = t1->path();
  t1.reset();  // done with it (left as it was, so still the oldest)
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t4 = store.open(header("keep-4"), err);
  REQUIRE(t4);
  CHECK_FALSE(fs::exists(p1));    // closed and oldest: pruned
  CHECK(fs::exists(t2->path()));  // older than the newest two, but open
  CHECK(fs::exists(t3->path()));
  CHECK(fs::exists(t4->path()));
}

TEST_CASE("a writer SIGKILLed at random moments leaves only whole transcripts, and readers never see half a file") {
  test::TempDir d;
  std::mt19937 rng(20240501);
  std::uniform_int_distribution<int> delay_us(0, 40'000);
  const int iterations = 60;
  int present = 0, reads = 0, max_events = 0;
  for (int i = 0; i < iterations; ++i) {
    const std::string id = "crash" + std::to_string(i);
    const fs::path path = d.path() / ("subagent-" + id + ".json");
    struct Reaper {  // a failed REQUIRE must not leave the writer running
      pid_t pid = -1;
      ~Reaper() {
        if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
      }
    } reaper;
    pid_t pid = ::fork();
    if (pid == 0) {
      auto o = options_in(d.path());
      o.checkpoint_interval = std::chrono::milliseconds(0);  // every event rewrites the file
      o.keep = 0;
      TranscriptStore store(o, std::make_shared<const Scrubber>());
      std::string err;
      auto t = store.open(header(id), err);
      if (!t) ::_exit(3);
      for (int n = 0;; ++n)
        t->record(
            {{"event", "tool_done"}, {"n", n}, {"pad", std::string(static_cast<std::size_t>(n * 997 % 30000), 'x')}});
    }
    reaper.pid = pid;
    // Half of the kills land at a random moment from the start (launch included), half once the
    // writer is known to be rewriting the file.
    if (i % 2 == 1) {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!fs::exists(path) && std::chrono::steady_clock::now() < limit)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us(rng));
    while (std::chrono::steady_clock::now() < until) {
      if (!fs::exists(path)) continue;
      json j = parse_file(path);
      ++reads;
      REQUIRE_MESSAGE(!j.is_discarded(), "a reader saw a partial " << path);
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    reaper.pid = -1;
    REQUIRE(WIFSIGNALED(status));
    if (!fs::exists(path)) continue;  // killed before the first rename
    ++present;
    json j = parse_file(path);
    REQUIRE_MESSAGE(!j.is_discarded(), "half a file after SIGKILL: " << path);
    CHECK(j["id"] == id);
    CHECK(j["status"] == "running");
    const auto& ev = j["events"];
    for (std::size_t k = 0; k < ev.size(); ++k) REQUIRE(ev[k]["n"] == static_cast<int>(k));
    max_events = std::max(max_events, static_cast<int>(ev.size()));
  }
  MESSAGE(present << " of " << iterations << " killed writers had a file; " << reads << " concurrent reads; up to "
                  << max_events << " events");
  CHECK(present >= iterations / 2);  // the kills really landed mid-run
  CHECK(max_events > 5);
  // Whatever else is left is a dot-file temporary, never a subagent-*.json.
  for (const auto& e : fs::directory_iterator(d.path())) {
    std::string n = e.path().filename().string();
    if (n.rfind("subagent-", 0) == 0)
      CHECK_FALSE(parse_file(e.path()).is_discarded());
    else
      CHECK_MESSAGE(n.rfind(".subagent-", 0) == 0, n);
  }
}

TEST_CASE("a read-only transcript directory is reported, never thrown, and the envelope says null") {
  std::string r = in_child([]() -> std::string {
    test::TempDir d;
    const fs::path dir = d.path() / "ro";
    if (std::string e = make_read_only_dir(dir); !e.empty()) return e;
    auto store = std::make_shared<TranscriptStore>(options_in(dir), patterns_only());
    std::string err;
    if (store->open(header("ro1"), err)) return "open succeeded on a read-only directory";
    if (err.find("Read-only file system") == std::string::npos || err.find(dir.string()) == std::string::npos)
      return "unclear error: " + err;

    // Through the session callbacks, exactly as ChildSession calls them.
    SessionConfig cfg;
    cfg.id = "ro2";
    std::vector<std::string> logs;
    std::vector<json> events;
    cfg.on_log = [&](const std::string& l) { logs.push_back(l); };
    cfg.on_event = [&](const json& e) { events.push_back(e); };
    auto audit = std::make_shared<AuditLog>(AuditOptions{dir / "audit.jsonl"}, patterns_only());
    auto records = SessionRecords::attach(cfg, store, audit, "p");
    cfg.on_event({{"event", "spawn"}, {"child", "ro2"}});
    cfg.on_event({{"event", "kill"}, {"child", "ro2"}, {"reason", "x"}});
    cfg.on_event({{"event", "envelope"}, {"child", "ro2"}, {"envelope", {{"status", "completed"}}}});
    protocol::Envelope e;
    e.id = "ro2";
    e.transcript = "/stale";
    std::string ferr = records->finish(e);
    if (e.transcript) return "the envelope names a transcript";
    if (ferr.find("Read-only") == std::string::npos) return "finish error: " + ferr;
    if (events.size() != 3) return "events did not all reach the next callback";
    bool logged = false, audit_logged = false;
    for (const auto& l : logs) {
      logged |= l.rfind("[subagent:ro2] transcript: ", 0) == 0 && l.find("Read-only") != std::string::npos;
      audit_logged |= l.rfind("[subagent:ro2] audit: ", 0) == 0;
    }
    if (!logged || !audit_logged) return "the reasons were not logged";
    return "";
  });
  CHECK_MESSAGE(r.empty(), r);
}

TEST_CASE("a background store: the first version and retention are written behind, in order") {
  test::TempDir d;
  auto o = options_in(d.path());
  o.keep = 2;
  o.background = true;
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t1 = store.open(header("bg-1"), err);
  REQUIRE(t1);
  t1->wait_written();
  REQUIRE(fs::exists(t1->path()));
  CHECK(parse_file(t1->path())["status"] == "running");  // the first version, from the writer thread
  CHECK(t1->writes() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t2 = store.open(header("bg-2"), err);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t3 = store.open(header("bg-3"), err);
  REQUIRE((t2 && t3));
  auto p1 = t1->path();
  t1.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t4 = store.open(header("bg-4"), err);
  REQUIRE(t4);
  // The writer runs its jobs in order: once bg-5's first version is on disk, the retention scan
  // bg-4's open queued before it has run.
  auto t5 = store.open(header("bg-5"), err);
  REQUIRE(t5);
  t5->wait_written();
  CHECK_FALSE(fs::exists(p1));  // closed and oldest: pruned by the writer thread
  for (const auto* t : {&t2, &t3, &t4, &t5}) CHECK(fs::exists((*t)->path()));
}

TEST_CASE("a background store: wait_written(n) returns once the first n versions are on disk, whatever follows") {
  test::TempDir d;
  auto o = options_in(d.path());
  o.background = true;
  TranscriptStore store(o, patterns_only());
  std::string err;
  auto t = store.open(header("bg-upto"), err);
  REQUIRE(t);
  const std::uint64_t first = t->versions_queued();
  CHECK(first >= 1);  // the first version
  t->record({{"event", "tool_decision"},
             {"child", "bg-upto"},
             {"id", "t1"},
             {"tool", "run_command"},
             {"decision", "ask"},
             {"rule", "r"},
             {"reason", "why"}});
  const std::uint64_t asked = t->versions_queued();
  CHECK(asked == first + 1);  // an ask is a checkpoint: queued, not waited for
  t->wait_written(asked);
  bool found = false;
  const json doc = parse_file(t->path());
  for (const json& e : doc["events"]) found |= e.value("decision", "") == "ask";
  CHECK_MESSAGE(found, doc.dump() << " / error: " << t->error());
}

TEST_CASE("a background store on a read-only directory: open() returns, the error follows, the envelope says null") {
  std::string r = in_child([]() -> std::string {
    test::TempDir d;
    const fs::path dir = d.path() / "ro";
    if (std::string e = make_read_only_dir(dir); !e.empty()) return e;
    auto o = options_in(dir);
    o.background = true;
    auto store = std::make_shared<TranscriptStore>(o, patterns_only());
    std::string err;
    auto t = store->open(header("bg-ro1"), err);
    if (!t) return "open did not return a transcript: " + err;
    t->wait_written();
    if (t->error().find("Read-only file system") == std::string::npos) return "unclear error: " + t->error();
    t.reset();

    SessionConfig cfg;
    cfg.id = "bg-ro2";
    std::vector<std::string> logs;
    cfg.on_log = [&](const std::string& l) { logs.push_back(l); };
    cfg.on_event = [](const json&) {};
    auto records = SessionRecords::attach(cfg, store, nullptr, "p");
    cfg.on_event({{"event", "spawn"}, {"child", "bg-ro2"}});
    cfg.on_event({{"event", "envelope"}, {"child", "bg-ro2"}, {"envelope", {{"status", "completed"}}}});
    protocol::Envelope e;
    e.id = "bg-ro2";
    e.transcript = "/stale";
    std::string ferr = records->finish(e);
    if (e.transcript) return "the envelope names a transcript";
    if (ferr.find("Read-only") == std::string::npos) return "finish error: " + ferr;
    bool logged = false;
    for (const auto& l : logs)
      logged |= l.rfind("[subagent:bg-ro2] transcript: ", 0) == 0 && l.find("Read-only") != std::string::npos;
    if (!logged) return "the reason was not logged";
    return "";
  });
  CHECK_MESSAGE(r.empty(), r);
}

TEST_CASE("SessionRecords: finish() sets the path, rewrites only when the parent's envelope differs") {
  test::TempDir d;
  auto store = std::make_shared<TranscriptStore>(options_in(d.path()), patterns_only());
  SessionConfig cfg;
  cfg.id = "rec1";
  std::vector<json> seen;
  cfg.on_event = [&](const json& e) { seen.push_back(e); };
  auto records = SessionRecords::attach(cfg, store, nullptr, "p");
  REQUIRE(records->transcript());
  protocol::Envelope e;
  e.id = "rec1";
  e.status = protocol::Status::completed;
  e.answer.text = "done with ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R";
  cfg.on_event({{"event", "envelope"}, {"child", "rec1"}, {"envelope", protocol::to_json(e)}});
  REQUIRE(seen.size() == 1);
  CHECK(seen[0]["envelope"]["transcript"] == records->transcript()->path().string());
  CHECK(seen[0]["envelope"]["answer"] == "done with [REDACTED:github_token]");
  const std::size_t writes = records->transcript()->writes();

  protocol::Envelope same = e;
  CHECK(records->finish(same) == "");
  CHECK(same.transcript == records->transcript()->path().string());
  CHECK(same.answer.text == "done with [REDACTED:github_token]");
  CHECK(records->transcript()->writes() == writes);  // nothing new to write

  protocol::Envelope patched = e;
  patched.artifacts["patch"] = {{"path", "/x.patch"}};
  CHECK(records->finish(patched) == "");
  CHECK(records->transcript()->writes() == writes + 1);
  CHECK(parse_file(records->transcript()->path())["envelope"]["artifacts"]["patch"]["path"] == "/x.patch");
}

TEST_CASE("a full disk: the write fails with a clear error and the previous version stays whole") {
  std::string r = in_child([]() -> std::string {
    test::TempDir d;
    const fs::path dir = d.path() / "tiny";
    fs::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0)
      return std::string("tmpfs: ") + std::strerror(errno);
    auto o = options_in(dir);
    o.checkpoint_interval = std::chrono::milliseconds(0);
    o.max_string_bytes = 1 << 20;
    TranscriptStore store(o, patterns_only());
    std::string err;
    auto t = store.open(header("full"), err);
    if (!t) return "open: " + err;
    t->record({{"event", "spawn"}, {"marker", "small-and-fine"}});
    if (!t->error().empty()) return "first write: " + t->error();
    t->record({{"event", "model_request"}, {"pad", std::string(200'000, 'x')}});
    if (t->error().find("No space left on device") == std::string::npos) return "no ENOSPC error: " + t->error();
    json j = parse_file(t->path());
    if (j.is_discarded() || j["events"].size() != 1 || j["events"][0]["marker"] != "small-and-fine")
      return "the previous version did not survive";
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string()[0] == '.') return "a temporary file was left behind: " + e.path().string();
    return "";
  });
  CHECK_MESSAGE(r.empty(), r);
}

// ---- planted secrets through a real session --------------------------------------------------------

namespace {

struct Secret {
  const char* label;
  std::string text;  // as planted
  std::string core;  // what must not survive anywhere
};

const char* kEnvName = "SUBAGENT_TEST_SERVICE_TOKEN";
const char* kEnvValue = "Env-Planted-Value-8c1f2e77";
const char* kOperatorValue = "operator-listed-5d9a-internal";

std::vector<Secret> secrets() {
  return {
      {"openai_key", "sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa",
       "Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa"},
      {"anthropic_key", "sk-ant-api03-Zx8Cv7Bn6Mm5Ll4Kk3Jj2Hh1Gg0Ff9Ee8Dd7Cc6Bb5Aa",
       "Zx8Cv7Bn6Mm5Ll4Kk3Jj2Hh1Gg0Ff9Ee8Dd7Cc6Bb5Aa"},
      {"xai_key", "xai-R4nD0mK3yV4lu3F0rT3st1ngPurp0s3sOnly99", "R4nD0mK3yV4lu3F0rT3st1ngPurp0s3sOnly99"},
      {"groq_key", "gsk_8hJ3kL9mN2pQ4rS6tU8vW0xY1zA3bC5dE7fG9h", "8hJ3kL9mN2pQ4rS6tU8vW0xY1zA3bC5dE7fG9h"},
      {"huggingface_token", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678", "QwErTyUiOpAsDfGhJkLzXcVbNm12345678"},
      {"github_token", "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"},
      {"github_token", "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789",
       "11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789"},
      {"slack_token", "xoxb-2048123456-4096123456789-QwErTyUiOpAsDfGhJkLzXcVb",
       "2048123456-4096123456789-QwErTyUiOpAsDfGhJkLzXcVb"},
      {"aws_access_key_id", "AKIAQX3KZ7LM2NP4RS6T", "QX3KZ7LM2NP4RS6T"},
      {"aws_secret_key", "aws_secret_access_key=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",
       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8mPl3Vt4"},
      {"authorization", "Authorization: Bearer q8Zr4Lm2Nx6Vb0Tc9Yh3Wd7Ke5Fs1Pj", "q8Zr4Lm2Nx6Vb0Tc9Yh3Wd7Ke5Fs1Pj"},
      {"api_key", "x-api-key: 7f3e9a1c5b2d8e4f6a0c9b7d5e3f1a2c", "7f3e9a1c5b2d8e4f6a0c9b7d5e3f1a2c"},
      {"private_key",
       "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n-----END OPENSSH "
       "PRIVATE KEY-----",
       "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB"},
      {"env:SUBAGENT_TEST_SERVICE_TOKEN", kEnvValue, kEnvValue},
      {"operator_value", kOperatorValue, kOperatorValue},
  };
}

std::string all_secrets(const char* marker) {
  std::string s = marker;
  for (const auto& x : secrets()) s += "\n" + std::string(marker) + " " + x.text + " end";
  return s;
}

// One line of a secret may wrap in odd places; look for every 12-byte window of it.
void check_absent(const std::string& haystack, const std::string& where) {
  for (const auto& x : secrets())
    for (std::size_t k = 0; k + 12 <= x.core.size(); k += 3) {
      const std::string piece = x.core.substr(k, 12);
      CHECK_MESSAGE(haystack.find(piece) == std::string::npos,
                    where << " holds part of the " << x.label << ": " << piece);
    }
}

struct Run {
  protocol::Envelope env;
  std::string printed;
  std::vector<json> events;
  std::vector<std::string> logs;
  std::shared_ptr<SessionRecords> records;
  std::string finish_error;
};

Run run_session(const fs::path& store_dir, const std::string& brief, const std::string& reply_text,
                const std::string& grep_pattern, const std::string& file_content) {
  test::TempDir ws, scripts;
  ws.write("notes/secrets.env", file_content);
  json turn1 = {{"content", "looking: " + reply_text},
                {"tool_calls",
                 {{{"name", "grep"}, {"arguments", {{"pattern", grep_pattern}}}},
                  {{"name", "read_file"}, {"arguments", {{"path", "notes/secrets.env"}}}}}}};
  json turn2 = {{"content", "## Summary\nSUMMARY-MARKER " + protocol::cap_utf8(reply_text, 200).text +
                                "\n## Evidence\n- " + reply_text}};
  std::string script = scripts.write("script.jsonl", turn1.dump() + "\n" + turn2.dump() + "\n");

  ScrubOptions so;
  so.literals = {kOperatorValue};
  auto scrubber = std::make_shared<const Scrubber>(so);
  auto store = std::make_shared<TranscriptStore>(options_in(store_dir), scrubber);
  auto audit = std::make_shared<AuditLog>(AuditOptions{store_dir / "audit.jsonl"}, scrubber);

  boost::asio::io_context io;
  SessionConfig cfg;
  cfg.id = new_child_id();
  auto preset = std::make_shared<Preset>(load_preset("explore", test::policy_dir()));
  cfg.budgets = tighten(preset->budgets, BudgetOverrides{}, "the preset explore");
  cfg.preset = preset;
  cfg.brief = brief;
  cfg.description = "planted";
  cfg.workspace = fs::canonical(ws.path());
  cfg.child_executable = test::bin("subagent-child");
  Run out;
  cfg.on_event = [&](const json& e) { out.events.push_back(e); };
  cfg.on_log = [&](const std::string& l) { out.logs.push_back(l); };
  out.records = SessionRecords::attach(cfg, store, audit, "planted-parent");
  // A child log line carrying secrets, as the session passes the child's stderr on.
  cfg.on_log("[subagent:" + cfg.id + "] " + reply_text);
  auto session = ChildSession::create(io, cfg, make_provider("replay:" + script, io));
  bool done = false;
  session->start([&](const protocol::Envelope& e) {
    out.env = e;
    out.finish_error = out.records->finish(out.env);
    out.printed = protocol::to_json(out.env).dump(2, ' ', false, json::error_handler_t::replace);
    done = true;
  });
  io.run_for(std::chrono::seconds(60));
  REQUIRE_MESSAGE(done, "the session did not finish");
  return out;
}

std::string everything_in(const fs::path& dir) {
  std::string all;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) all += "\n=== " + e.path().string() + "\n" + test::slurp(e.path());
  return all;
}

}  // namespace

TEST_CASE("secrets planted in the brief, a tool call, a tool result, a model reply and a log line survive nowhere") {
  ::setenv(kEnvName, kEnvValue, 1);
  test::TempDir store;
  Run r = run_session(store.path(), all_secrets("BRIEF-MARKER"), all_secrets("REPLY-MARKER"),
                      "ARGS-MARKER " + secrets()[0].text + " " + secrets()[5].text + " " + kEnvValue,
                      all_secrets("FILE-MARKER"));
  ::unsetenv(kEnvName);
  CHECK(r.env.status == protocol::Status::completed);
  CHECK(r.finish_error.empty());
  REQUIRE(r.env.transcript);

  const std::string disk = everything_in(store.path());
  std::string events;
  for (const auto& e : r.events) events += e.dump() + "\n";
  std::string logs;
  for (const auto& l : r.logs) logs += l + "\n";
  check_absent(disk, "the store directory");
  check_absent(events, "the event stream");
  check_absent(logs, "the log stream");
  check_absent(r.printed, "the printed envelope");

  // The twin half: the planted text itself did arrive everywhere, with each kind's marker in place.
  json t = parse_file(*r.env.transcript);
  REQUIRE_FALSE(t.is_discarded());
  const std::string brief = t["brief"];
  CHECK(brief.find("BRIEF-MARKER") != std::string::npos);
  const Scrubber& scrubber = r.records->scrubber();
  for (const auto& x : secrets()) {
    const std::string expected = "BRIEF-MARKER " + scrubber.scrub(x.text) + " end";
    CHECK(expected.find(std::string("[REDACTED:") + x.label + "]") != std::string::npos);
    CHECK_MESSAGE(brief.find(expected) != std::string::npos, std::string(x.label));
  }
  bool args_seen = false;
  for (const auto& e : t["events"])
    if (e["event"] == "tool_decision" && e["tool"] == "grep") {
      std::string p = e["args"]["pattern"];
      args_seen =
          p == "ARGS-MARKER [REDACTED:openai_key] [REDACTED:github_token] [REDACTED:env:SUBAGENT_TEST_SERVICE_TOKEN]";
    }
  CHECK(args_seen);
  CHECK(r.env.answer.text.find("REPLY-MARKER [REDACTED:anthropic_key] end") != std::string::npos);
  CHECK(t["envelope"]["answer"].get<std::string>().find("REPLY-MARKER [REDACTED:private_key] end") !=
        std::string::npos);
  CHECK(r.printed.find("REPLY-MARKER [REDACTED:slack_token] end") != std::string::npos);
  CHECK(logs.find("REPLY-MARKER [REDACTED:aws_access_key_id] end") != std::string::npos);
  CHECK(disk.find("ARGS-MARKER") != std::string::npos);  // the audit line and the transcript
  CHECK(t["envelope"]["transcript"] == *r.env.transcript);
  CHECK(r.events.back()["event"] == "envelope");
  CHECK(r.events.back()["envelope"]["transcript"] == *r.env.transcript);
}

TEST_CASE("secrets in a tool call of over 64 KiB (decoded and scrubbed off the loop) survive nowhere") {
  // A line this long is decoded on a worker, which scrubs the call's arguments for its event there
  // (session/session.hpp, kOffloadLine): the same promise as the planted-secret test above.
  ::setenv(kEnvName, kEnvValue, 1);
  test::TempDir store;
  const std::string pattern =
      "BIG-ARGS " + all_secrets("HEAD") + " " + std::string(80 * 1024, 'p') + " " + all_secrets("TAIL");
  Run r = run_session(store.path(), "a brief", "a reply", pattern, "a file");
  ::unsetenv(kEnvName);
  CHECK(r.env.status == protocol::Status::completed);
  REQUIRE(r.env.transcript);
  std::string events;
  for (const auto& e : r.events) events += e.dump() + "\n";
  check_absent(everything_in(store.path()), "the store directory");
  check_absent(events, "the event stream");
  // The twin half: the call took the long-line path, and its text arrived, redacted, head and tail
  // (the transcript keeps the first 64 KiB of a string; the event stream has it whole).
  bool seen = false;
  for (const auto& e : r.events)
    if (e["event"] == "tool_decision" && e["tool"] == "grep") {
      const std::string p = e["args"]["pattern"];
      seen = p.size() > 64 * 1024 && p.find("BIG-ARGS") == 0 &&
             p.find("HEAD [REDACTED:openai_key] end") != std::string::npos &&
             p.find("TAIL [REDACTED:anthropic_key] end") != std::string::npos;
    }
  CHECK(seen);
  CHECK(everything_in(store.path()).find("HEAD [REDACTED:github_token] end") != std::string::npos);
}

TEST_CASE("the same planted text without secrets survives intact (twin of the planted-secret test)") {
  test::TempDir store;
  const std::vector<std::string> harmless = {
      "task-abcdefghijklmnopqrstuvwxyz0123 is done", "Bearer authentication is required", "AKIA is a prefix",
      "-----BEGIN PUBLIC KEY----- MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA -----END PUBLIC KEY-----",
      "ghp_short · Authorization: required · x-api-key: $OPENAI_API_KEY"};
  std::string brief = "BRIEF", reply = "REPLY";
  for (const auto& h : harmless) {
    brief += "\nBRIEF-MARKER " + h + " end";
    reply += "\nREPLY-MARKER " + h + " end";
  }
  Run r = run_session(store.path(), brief, reply, "ARGS-harmless", brief);
  REQUIRE(r.env.transcript);
  json t = parse_file(*r.env.transcript);
  CHECK(t["brief"] == brief);
  for (const auto& h : harmless) {
    CHECK(r.env.answer.text.find("REPLY-MARKER " + h + " end") != std::string::npos);
    CHECK(t["envelope"]["answer"].get<std::string>().find("REPLY-MARKER " + h + " end") != std::string::npos);
  }
  CHECK(everything_in(store.path()).find("[REDACTED:") == std::string::npos);
}

TEST_CASE(
    "one record stays under max_record_bytes: its strings are cut shorter and it says so; a smaller one is whole") {
  test::TempDir d;
  TranscriptStore store(options_in(d.path()), patterns_only());
  std::string err;
  auto t = store.open(header("cut0001"), err);
  REQUIRE_MESSAGE(t, err);
  const std::size_t max_record = store.options().max_record_bytes, max_string = store.options().max_string_bytes;
  // Twelve strings at the per-string cap are over the record cap; two are under it. Control
  // characters print as six-byte escapes, so the pair of those is over it too.
  json big = json::object(), small = json::object(), escaped = json::object();
  for (int i = 0; i < 12; ++i) big["s" + std::to_string(i)] = std::string(max_string, 'a' + i % 26);
  for (int i = 0; i < 2; ++i) small["s" + std::to_string(i)] = std::string(max_string, 'k');
  for (int i = 0; i < 2; ++i) escaped["s" + std::to_string(i)] = std::string(max_string, '\x01');
  t->record({{"event", "tool_decision"}, {"id", "t1"}, {"tool", "grep"}, {"args", big}});
  t->record({{"event", "tool_decision"}, {"id", "t2"}, {"tool", "grep"}, {"args", small}});
  t->record({{"event", "tool_decision"}, {"id", "t3"}, {"tool", "grep"}, {"args", escaped}});
  REQUIRE(t->flush());
  json doc = parse_file(t->path());
  REQUIRE(doc["events"].size() == 3);
  for (const json& e : doc["events"]) CHECK(e.dump().size() <= max_record);
  CHECK(doc["events"][0].value("record_cut", false));
  CHECK(doc["events"][0]["args"]["s0"].get<std::string>().size() < max_string / 2);
  CHECK_FALSE(doc["events"][1].contains("record_cut"));
  CHECK(doc["events"][1]["args"]["s1"] == std::string(max_string, 'k'));
  CHECK(doc["events"][2].value("record_cut", false));
}
