// The read-only root and the child's identity (sandbox/rootfs.hpp), through the real CLI as a
// hostile child would meet them: `subagent-supervisor sandbox --preset P --workspace WS -- probe`.
// Every refusal has a twin: the same change made unsandboxed, or inside a writer's workspace.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

const std::array<std::string, 5> kPresets = {"explore", "reviewer", "worker", "implementation", "research"};
bool writer(const std::string& preset) { return preset == "worker" || preset == "implementation"; }

const std::string kCli = test::bin("subagent-supervisor").string();
const std::string kProbe = test::program("sandbox_probe").string();
constexpr unsigned kIdentityBase = 0x6f000000;  // sandbox/rootfs.hpp

bool root() { return ::geteuid() == 0; }

// Runs argv with stdout and stderr on one pipe: read-only presets let no file grow
// (RLIMIT_FSIZE 0), so their output must not go to a regular file.
test::RunResult run_piped(const std::vector<std::string>& argv) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(null, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  test::RunResult r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) r.out.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

test::RunResult boxed(const std::string& preset, const fs::path& ws, std::vector<std::string> args,
                      const std::string& policy_dir = "") {
  std::vector<std::string> argv = {kCli, "sandbox", "--preset", preset, "--workspace", ws.string()};
  if (!policy_dir.empty()) argv.insert(argv.end(), {"--policy-dir", policy_dir});
  argv.push_back("--");
  argv.push_back(kProbe);
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run(argv);
}

test::RunResult direct(std::vector<std::string> args) {
  args.insert(args.begin(), kProbe);
  return test::run(args);
}

// Copies of the shipped policies with one more read root, so that a file outside every write root
// is visible to each preset (the refusal is then the read-only mount's, not a missing path).
class PoliciesWithReadRoot {
 public:
  explicit PoliciesWithReadRoot(const fs::path& extra) {
    for (const auto& e : fs::directory_iterator(test::policy_dir())) {
      if (e.path().extension() != ".json") continue;
      std::string text = test::slurp(e.path());
      const std::string from = "\"read\": [\"${workspace}\",";
      const auto pos = text.find(from);
      if (pos != std::string::npos) text.replace(pos, from.size(), from + " \"" + extra.string() + "\",");
      std::ofstream(dir_.path() / e.path().filename()) << text;
    }
  }
  std::string path() const { return dir_.path().string(); }

 private:
  test::TempDir dir_;
};

struct Snapshot {
  bool exists = false;
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  off_t size = 0;
  time_t mtime = 0;
  bool xattr = false;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const fs::path& p) {
  Snapshot s;
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return s;
  s = {true, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime, false};
  char v[8];
  s.xattr = ::getxattr(p.c_str(), "user.probe", v, sizeof v) >= 0;
  return s;
}

std::string fresh_file(const test::TempDir& dir, const std::string& name) {
  std::string path = dir.write(name, "content\n");
  REQUIRE(::chmod(path.c_str(), 0644) == 0);
  return path;
}

// The metadata changes a hostile child tries (probe action, extra argument).
const std::vector<std::pair<std::string, std::string>> kChanges = {
    {"chmod", "4755"}, {"chown_self", ""}, {"utimensat", ""}, {"setxattr", ""}, {"truncate", ""}, {"rename", ""}};

std::vector<std::string> change(const std::pair<std::string, std::string>& c, const std::string& path) {
  return {c.first, path, c.first == "rename" ? path + ".moved" : c.second};
}

// Whether the change shows on the file (for a successful call).
bool took_effect(const std::string& action, const std::string& path, const Snapshot& before) {
  const Snapshot after = snapshot(path);
  if (action == "chmod") return (after.mode & 07777) == 04755;
  if (action == "chown_self") return after.exists;  // the owner may not move: see the caller
  if (action == "utimensat") return after.mtime == 12345;
  if (action == "setxattr") return after.xattr;
  if (action == "truncate") return after.size == 0 && before.size != 0;
  if (action == "rename") return !after.exists && fs::exists(path + ".moved");
  return false;
}

}  // namespace

TEST_CASE("the probe and the CLI are built") {
  REQUIRE(fs::exists(kCli));
  REQUIRE(fs::exists(kProbe));
}

TEST_CASE("outside the write roots no preset can change a mode, owner, time, xattr, size or name") {
  test::TempDir ws, visible, hidden;
  // Searchable by others, so that under a root supervisor (whose child owns nothing) the refusal
  // is the read-only mount's, not the directory's mode.
  REQUIRE(::chmod(visible.path().c_str(), 0755) == 0);
  PoliciesWithReadRoot policies(visible.path());
  // The twins: unsandboxed, every change works on such a file.
  for (const auto& c : kChanges) {
    INFO(c.first);
    const std::string path = fresh_file(visible, "direct-" + c.first);
    const Snapshot before = snapshot(path);
    auto r = direct(change(c, path));
    CHECK(r.code == 0);
    CHECK(took_effect(c.first, path, before));
  }
  for (const auto& preset : kPresets) {
    for (const auto& c : kChanges) {
      INFO(preset << " " << c.first);
      // Visible (a read root): the read-only bind refuses it.
      const std::string seen = fresh_file(visible, preset + "-" + c.first);
      const Snapshot before = snapshot(seen);
      auto r = boxed(preset, ws.path(), change(c, seen), policies.path());
      INFO("stderr: " << r.err);
      if (c.first == "truncate")  // truncate(2) checks write permission (DAC, Landlock) first
        CHECK((r.code == EROFS || r.code == EPERM || r.code == EACCES));
      else
        CHECK((r.code == EROFS || r.code == EPERM));
      CHECK(snapshot(seen) == before);
      // Not in the policy at all: it does not exist in the child's root.
      const std::string unseen = fresh_file(hidden, preset + "-" + c.first);
      const Snapshot unseen_before = snapshot(unseen);
      auto u = boxed(preset, ws.path(), change(c, unseen), policies.path());
      // The read-only presets' seccomp groups refuse every metadata change before any path is
      // looked at (EPERM); the writers have the syscalls, and the path is simply not there.
      if (writer(preset))
        CHECK(u.code == ENOENT);
      else
        CHECK(u.code == EPERM);
      CHECK(snapshot(unseen) == unseen_before);
    }
    // The host's own files, also those a root supervisor's uid owns.
    for (const char* path : {"/usr/bin/env", "/etc/ld.so.cache"}) {
      INFO(preset << " " << path);
      const Snapshot before = snapshot(path);
      auto r = boxed(preset, ws.path(), {"chmod", path, "4755"});
      CHECK((r.code == EROFS || r.code == EPERM));
      CHECK(snapshot(path) == before);
    }
  }
}

TEST_CASE("inside the workspace the same changes work for writer presets only") {
  test::TempDir ws;
  for (const auto& preset : kPresets) {
    for (const auto& c : kChanges) {
      INFO(preset << " " << c.first);
      const std::string path = fresh_file(ws, preset + "-" + c.first);
      const Snapshot before = snapshot(path);
      auto r = boxed(preset, ws.path(), change(c, path));
      INFO("stderr: " << r.err);
      if (writer(preset)) {
        CHECK(r.code == 0);
        CHECK(took_effect(c.first, path, before));
        if (c.first == "chown_self") {
          // Chowning to itself keeps the workspace owner on disk (the id-mapped mount stores the
          // child's id as the owner's).
          CHECK(snapshot(path).uid == before.uid);
        }
      } else {
        // The read-only presets' seccomp groups refuse metadata changes first (EPERM); the
        // read-only bind of the workspace is the second hold (EROFS).
        CHECK((r.code == EROFS || r.code == EPERM));
        CHECK(snapshot(path) == before);
      }
    }
  }
}

TEST_CASE("files a writer creates belong to the workspace's owner") {
  if (!root()) {
    MESSAGE(
        "not root: the child keeps the supervisor's uid (see the identity layer); this case "
        "needs root to give the workspace another owner");
    return;
  }
  test::TempDir ws;
  const std::string own = ws.write("owners-file.txt", "only uid 1234 may read this\n");
  REQUIRE(::chmod(own.c_str(), 0600) == 0);
  REQUIRE(::chown(own.c_str(), 1234, 1234) == 0);
  REQUIRE(::chown(ws.path().c_str(), 1234, 1234) == 0);
  REQUIRE(::chmod(ws.path().c_str(), 0700) == 0);
  // The twin: created unsandboxed (as root), a file is root's.
  const std::string twin = (ws.path() / "direct.txt").string();
  REQUIRE(direct({"write", twin}).code == 0);
  CHECK(snapshot(twin).uid == 0);
  for (const std::string preset : {"worker", "implementation"}) {
    INFO(preset);
    const std::string made = (ws.path() / (preset + ".txt")).string();
    auto w = boxed(preset, ws.path(), {"write", made});
    INFO("stderr: " << w.err);
    CHECK(w.code == 0);
    const Snapshot s = snapshot(made);
    CHECK(s.exists);
    CHECK(s.uid == 1234);
    CHECK(s.gid == 1234);
    // Inside its namespace the child is the owner, and sees the owner's files as its own.
    auto ids = boxed(preset, ws.path(), {"ids", made});
    CHECK(ids.code == 0);
    CHECK(ids.out == "1234 1234\n1234 1234\n");
  }
  // A read-only preset reads the 0700 workspace through the id-mapped read-only mount; any other
  // unprivileged id cannot (the twin).
  auto other = test::run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", kProbe, "read", own});
  CHECK(other.code == EACCES);
  for (const std::string preset : {"explore", "reviewer", "research"}) {
    INFO(preset);
    CHECK(boxed(preset, ws.path(), {"read", own}).code == 0);
  }
}

namespace {

// Starts `probe named_sleep NAME 30` (sandboxed when preset is given), waits for "ready", and
// returns the host uid and gid lines of that process from /proc, then kills the run.
struct Running {
  pid_t runner = -1;
  pid_t target = -1;
  pid_t parent = -1;  // the target's parent: the sandbox's init, whose host pid names the id
  std::string uid_line, gid_line;
};

Running start_named(const std::string& preset, const fs::path& ws, const std::string& name) {
  std::vector<std::string> argv;
  if (!preset.empty()) argv = {kCli, "sandbox", "--preset", preset, "--workspace", ws.string(), "--"};
  argv.insert(argv.end(), {kProbe, "named_sleep", name, "30"});
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  Running r;
  r.runner = ::fork();
  REQUIRE(r.runner >= 0);
  if (r.runner == 0) {
    ::dup2(out[1], 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  char buf[16] = {};
  ssize_t n = ::read(out[0], buf, sizeof buf - 1);
  ::close(out[0]);
  REQUIRE(n > 0);
  REQUIRE(std::string(buf) == "ready\n");
  for (const auto& p : test::processes())
    if (p.comm == name && p.state != 'Z') r.target = p.pid;
  REQUIRE(r.target > 0);
  std::ifstream status("/proc/" + std::to_string(r.target) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) == 0) r.uid_line = line;
    if (line.rfind("Gid:", 0) == 0) r.gid_line = line;
    if (line.rfind("PPid:", 0) == 0) r.parent = std::stoi(line.substr(5));
  }
  return r;
}

void stop(Running& r) {
  ::kill(r.target, SIGKILL);
  int status;
  ::waitpid(r.runner, &status, 0);
}

std::string all_four(unsigned id) {
  const std::string s = std::to_string(id);
  return s + "\t" + s + "\t" + s + "\t" + s;
}

}  // namespace

TEST_CASE("a root supervisor's child runs under its own unprivileged host id") {
  test::TempDir ws;
  const std::string tag = std::to_string(::getpid() % 100000);
  // The twin: the same probe unsandboxed has the supervisor's ids, as /proc shows them.
  Running plain = start_named("", ws.path(), "idp" + tag);
  CHECK(plain.uid_line == "Uid:\t" + all_four(::getuid()));
  stop(plain);
  if (!root()) {
    Running r = start_named("worker", ws.path(), "idw" + tag);
    CHECK(r.uid_line == "Uid:\t" + all_four(::getuid()));  // identity map: see the layer
    stop(r);
    auto v = test::run(
        {kCli, "sandbox", "--preset", "worker", "--workspace", ws.path().string(), "--verbose", "--", kProbe, "true"});
    CHECK(v.err.find("the supervisor is not root") != std::string::npos);
    MESSAGE("not root: the child keeps the supervisor's uid, and the identity layer says why");
    return;
  }
  Running a = start_named("worker", ws.path(), "idw" + tag);
  Running b = start_named("explore", ws.path(), "ide" + tag);
  INFO(a.uid_line << " / " << b.uid_line);
  // The ids are set before the init forks the command: kIdentityBase + the init's host pid.
  CHECK(a.uid_line == "Uid:\t" + all_four(kIdentityBase + static_cast<unsigned>(a.parent)));
  CHECK(a.gid_line == "Gid:\t" + all_four(kIdentityBase + static_cast<unsigned>(a.parent)));
  CHECK(b.uid_line == "Uid:\t" + all_four(kIdentityBase + static_cast<unsigned>(b.parent)));
  CHECK(a.uid_line != b.uid_line);
  stop(a);
  stop(b);
}

TEST_CASE("/etc/shadow and /etc/gshadow are unreadable in every preset") {
  test::TempDir ws;
  for (const char* secret : {"/etc/shadow", "/etc/gshadow"}) {
    INFO(std::string(secret));
    if (root())
      CHECK(direct({"read", secret}).code == 0);  // the twin: root reads them unsandboxed
    else
      MESSAGE("not root: the unsandboxed twin (root reads " << std::string(secret) << ") needs root");
    for (const auto& preset : kPresets) {
      INFO(preset);
      auto r = boxed(preset, ws.path(), {"read", secret});
      CHECK(r.code != 0);
    }
  }
}

// What a program sees of /proc: the executable's name, the pids listed, and whether its own
// oom_score_adj can be written (the same value back).
const std::string kProcLook =
    "import os\n"
    "print('exe=' + os.readlink('/proc/self/exe'))\n"
    "print('pids=' + ','.join(sorted(p for p in os.listdir('/proc') if p.isdigit())))\n"
    "print('self=' + os.readlink('/proc/self'))\n"
    "try:\n"
    "    v = open('/proc/self/oom_score_adj').read()\n"
    "    open('/proc/self/oom_score_adj', 'w').write(v)\n"
    "    print('write=ok')\n"
    "except OSError as e:\n"
    "    print('write=' + str(e.errno))\n";

TEST_CASE("/proc in every preset is the child's own, read-only; unsandboxed it is the host's") {
  test::TempDir ws;
  // Twin: unsandboxed, /proc lists the host's processes (this test among them) and is writable.
  auto host = test::run({"/usr/bin/python3", "-c", kProcLook});
  REQUIRE(host.code == 0);
  CHECK(host.out.find("pids=1,") != std::string::npos);
  // The pids are sorted as strings: this test's may be the last one in the line.
  const std::string me = "," + std::to_string(::getpid());
  CHECK((host.out.find(me + ",") != std::string::npos || host.out.find(me + "\n") != std::string::npos));
  CHECK(host.out.find("write=ok") != std::string::npos);
  for (const auto& preset : kPresets) {
    INFO(preset);
    auto r = run_piped({kCli, "sandbox", "--preset", preset, "--workspace", ws.path().string(), "--",
                        "/usr/bin/python3", "-c", kProcLook});
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("exe=/usr/bin/python3") != std::string::npos);
    CHECK(r.out.find("pids=1,2\n") != std::string::npos);  // the init and itself
    CHECK(r.out.find("self=2\n") != std::string::npos);
    CHECK(r.out.find("write=" + std::to_string(EROFS)) != std::string::npos);
  }
  // As PID 1 (no init) the command is all there is.
  auto alone = run_piped({kCli, "sandbox", "--preset", "explore", "--workspace", ws.path().string(), "--as-pid-1", "--",
                          "/usr/bin/python3", "-c", kProcLook});
  CHECK(alone.out.find("pids=1\nself=1\n") != std::string::npos);
}

TEST_CASE("legitimate work in the new root: a Python test run in worker, git in reviewer") {
  test::TempDir ws;
  ws.write("test_sample.py",
           "import unittest\n\nclass Sample(unittest.TestCase):\n"
           "    def test_sum(self):\n        self.assertEqual(1 + 1, 2)\n\n"
           "if __name__ == '__main__':\n    unittest.main()\n");
  auto py = test::run({kCli, "sandbox", "--preset", "worker", "--workspace", ws.path().string(), "--",
                       "/usr/bin/python3", "-m", "unittest", "-v"});
  INFO("python: " << py.out << py.err);
  CHECK(py.code == 0);
  CHECK(py.err.find("Ran 1 test") != std::string::npos);
  // The run is real: a failing test fails it.
  ws.write("test_broken.py",
           "import unittest\n\nclass Broken(unittest.TestCase):\n"
           "    def test_wrong(self):\n        self.assertEqual(1 + 1, 3)\n");
  auto broken = test::run({kCli, "sandbox", "--preset", "worker", "--workspace", ws.path().string(), "--",
                           "/usr/bin/python3", "-m", "unittest"});
  CHECK(broken.code != 0);
  fs::remove(ws.path() / "test_broken.py");

  const std::string git = "/usr/bin/git";
  auto in_ws = [&](std::vector<std::string> args) {
    args.insert(args.begin(),
                {git, "-C", ws.path().string(), "-c", "user.name=t", "-c", "user.email=t@example.invalid"});
    return test::run(args);
  };
  REQUIRE(in_ws({"init", "-q"}).code == 0);
  REQUIRE(in_ws({"add", "-A"}).code == 0);
  REQUIRE(in_ws({"commit", "-q", "-m", "first commit in the sandbox test"}).code == 0);
  for (const auto& view : std::vector<std::vector<std::string>>{{"status", "--porcelain"}, {"log", "--oneline"}}) {
    std::vector<std::string> argv = {kCli,          "sandbox",          "--preset", "reviewer",
                                     "--workspace", ws.path().string(), "--",       git};
    argv.insert(argv.end(), view.begin(), view.end());
    auto r = run_piped(argv);
    INFO("git " << view[0] << ": " << r.out);
    CHECK(r.code == 0);
    if (view[0] == "log") CHECK(r.out.find("first commit in the sandbox test") != std::string::npos);
  }
}
