// Disk budgets (issue 33, item 6), through the real CLI: the supervisor's own records on a full disk
// fail with an error naming the file and leave nothing truncated behind. Every case that needs a
// size-capped filesystem mounts a tmpfs, which needs root (CI runs the tests as root); without it
// that case says so and is skipped. Every "refused/failed" case has a twin with room to spare.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.hpp"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

test::RunResult git(const fs::path& dir, const std::string& args) {
  return test::run({"/bin/sh", "-c", "git -c user.name=t -c user.email=t@t " + args}, "", dir);
}

void make_repo(const test::TempDir& d) {
  d.write("README", "top\n");
  d.write("sub/a.txt", "alpha\n");
  REQUIRE(git(d.path(), "init -q").code == 0);
  REQUIRE(git(d.path(), "add -A").code == 0);
  REQUIRE(git(d.path(), "commit -qm base").code == 0);
}

bool root() { return ::geteuid() == 0; }

// A tmpfs of `size` mounted on `dir` (created) for as long as the object lives.
class TinyFs {
 public:
  TinyFs(const fs::path& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size + ",mode=0700").c_str()) != 0)
      error_ = std::string("mount tmpfs on ") + dir.string() + ": " + std::strerror(errno);
  }
  ~TinyFs() {
    if (error_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  TinyFs(const TinyFs&) = delete;
  TinyFs& operator=(const TinyFs&) = delete;
  const std::string& error() const { return error_; }

 private:
  fs::path dir_;
  std::string error_;
};

struct Cli {
  test::TempDir scripts, locks;
  std::string model = "replay:" + scripts.write("m.jsonl", "{\"content\":\"unused\"}\n");

  // `run` with a shell child whose brief is the script; every record of the supervisor goes under `state`.
  test::RunResult run(const std::string& preset, const fs::path& ws, const fs::path& state, const std::string& script,
                      std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {test::bin("subagent-supervisor").string(),
                                  "run",
                                  "--preset",
                                  preset,
                                  "--workspace",
                                  ws.string(),
                                  "--brief",
                                  script,
                                  "--model",
                                  model,
                                  "--child",
                                  test::program("fake_child").string(),
                                  "--child-arg",
                                  "shell",
                                  "--state-dir",
                                  state.string(),
                                  "--lock-dir",
                                  locks.path().string(),
                                  "--transcript-dir",
                                  (state / "transcripts").string(),
                                  "--audit-log",
                                  (state / "audit.jsonl").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run(a);
  }
};

json envelope(const test::RunResult& r) {
  json e = json::parse(r.out, nullptr, false);
  if (e.is_discarded()) FAIL("no envelope on stdout; stderr: " << r.err);
  return e;
}

// Every record the supervisor left under `state` is whole: no temporary, every .json parses, every
// audit line parses, and a patch never stands without its record. Returns what was wrong ("" if none).
std::string records_whole(const fs::path& state) {
  std::error_code ec;
  for (const char* sub : {"patches", "transcripts"}) {
    if (!fs::exists(state / sub)) continue;
    for (const auto& f : fs::directory_iterator(state / sub)) {
      const std::string name = f.path().filename().string();
      if (name[0] == '.') return "a temporary was left behind: " + f.path().string();
      if (f.path().extension() == ".json" && json::parse(test::slurp(f.path()), nullptr, false).is_discarded())
        return "a truncated record: " + f.path().string();
      if (f.path().extension() == ".patch" && !fs::exists(fs::path(f.path()).replace_extension(".json")))
        return "a patch without its record: " + f.path().string();
    }
  }
  if (fs::exists(state / "audit.jsonl")) {
    std::istringstream in(test::slurp(state / "audit.jsonl"));
    for (std::string line; std::getline(in, line);)
      if (json::parse(line, nullptr, false).is_discarded()) return "a truncated audit line: " + line;
  }
  return "";
}

}  // namespace

TEST_CASE("the state directory's disk is full: the patch fails naming the disk, nothing truncated stays; twin") {
  if (!root()) {
    MESSAGE("skipped: mounting a size-capped tmpfs for the state directory needs root");
    return;
  }
  test::TempDir repo, box;
  make_repo(repo);
  Cli cli;
  // ~300 KB of random bytes fit in the worktree (a tmpfs of its own for a root supervisor), but
  // their patch (base85 of the deflated bytes, ~380 KB) does not fit in a 256 KB state directory.
  const std::string script = "head -c 300000 /dev/urandom > big.bin && echo changed > a.txt";
  {
    const fs::path state = box.path() / "small";
    TinyFs tiny(state, "256k");
    REQUIRE_MESSAGE(tiny.error().empty(), tiny.error());
    auto r = cli.run("implementation", repo.path() / "sub", state, script);
    json e = envelope(r);
    CHECK_MESSAGE(e["status"] == "completed", r.out << r.err);
    const json& patch = e["artifacts"]["patch"];
    REQUIRE_MESSAGE(patch.contains("error"), patch.dump());
    const std::string error = patch["error"];
    CHECK_MESSAGE(error.find("No space left on device") != std::string::npos, error);
    CHECK_MESSAGE(error.find("is full") != std::string::npos, error);
    CHECK_MESSAGE(error.find((state / "patches").string()) != std::string::npos, error);
    CHECK_MESSAGE(error.find("nothing was saved") != std::string::npos, error);
    CHECK_FALSE(patch.contains("path"));
    const std::string whole = records_whole(state);
    CHECK_MESSAGE(whole.empty(), whole);
    if (fs::exists(state / "patches")) CHECK(fs::is_empty(state / "patches"));
    // The worktree is gone, so the disk has room again.
    CHECK((!fs::exists(state / "worktrees") || fs::is_empty(state / "worktrees")));
    CHECK(test::slurp(repo.path() / "sub/a.txt") == "alpha\n");  // the checkout is untouched
  }
  {
    // Twin: the same child with room to spare gets its patch and record.
    const fs::path state = box.path() / "roomy";
    TinyFs roomy(state, "8m");
    REQUIRE_MESSAGE(roomy.error().empty(), roomy.error());
    auto r = cli.run("implementation", repo.path() / "sub", state, script);
    json e = envelope(r);
    CHECK_MESSAGE(e["status"] == "completed", r.out << r.err);
    const json& patch = e["artifacts"]["patch"];
    REQUIRE_MESSAGE(patch.contains("path"), patch.dump());
    CHECK(patch["bytes"].get<std::size_t>() > 300000);
    CHECK(fs::file_size(patch["path"].get<std::string>()) == patch["bytes"].get<std::size_t>());
    const std::string whole = records_whole(state);
    CHECK_MESSAGE(whole.empty(), whole);
    auto files = patch["files"];
    CHECK(std::find(files.begin(), files.end(), "big.bin") != files.end());
  }
}
