// `subagent-supervisor sandbox` as a user runs it: output redirected to files, the minimal init
// (signals, PID 1, orphans) and the private home, through the real CLI, each with its twin.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kSup = test::bin("subagent-supervisor").string();
const std::array<std::string, 5> kPresets = {"explore", "reviewer", "worker", "implementation", "research"};

std::vector<std::string> sandbox(const std::string& preset, const fs::path& ws, std::vector<std::string> cmd,
                                 std::vector<std::string> options = {}) {
  std::vector<std::string> a = {kSup, "sandbox", "--preset", preset, "--workspace", ws.string()};
  a.insert(a.end(), options.begin(), options.end());
  a.push_back("--");
  a.insert(a.end(), cmd.begin(), cmd.end());
  return a;
}

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// A running supervisor with stdout and stderr on pipes (test::run gives it regular files).
class Running {
 public:
  explicit Running(const std::vector<std::string>& argv) {
    int out[2], err[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::alarm(60);  // a hung test fails instead of hanging CI
      test::exec_in("/", argv);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Running() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      finish();
    }
  }
  // Reads stdout until `text` has arrived (or EOF).
  bool wait_for(const std::string& text) {
    char buf[512];
    while (out.find(text) == std::string::npos) {
      ssize_t n = ::read(out_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }
  // Reads both pipes to EOF and reaps: the exit code, or 128 + signal.
  int finish() {
    std::thread t([this] { err = drain(err_); });
    out += drain(out_);
    t.join();
    ::close(out_);
    ::close(err_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string out, err;

 private:
  static std::string drain(int fd) {
    std::string s;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0) s.append(buf, static_cast<std::size_t>(n));
    return s;
  }
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
};

test::RunResult piped(const std::vector<std::string>& argv) {
  Running r(argv);
  test::RunResult result;
  result.code = r.finish();
  result.out = r.out;
  result.err = r.err;
  return result;
}

// Runs argv with stdout and stderr on one regular file (`> f 2>&1`), and SIGCHLD ignored when
// `ignore_sigchld` (an ignored disposition survives exec); returns the exit code and the file.
test::RunResult one_file(const std::vector<std::string>& argv, bool ignore_sigchld = false) {
  test::TempDir io;
  const std::string path = (io.path() / "both").string();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int f = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(f, 1);
    ::dup2(f, 2);
    if (ignore_sigchld) ::signal(SIGCHLD, SIG_IGN);
    ::alarm(60);
    test::exec_in("/", argv);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  test::RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = test::slurp(path);
  return r;
}

// Copies of the shipped presets with one text replaced in one of them.
class EditedPolicies {
 public:
  EditedPolicies(const std::string& preset, const std::string& from, const std::string& to) {
    for (const auto& e : fs::directory_iterator(test::policy_dir())) {
      if (e.path().extension() != ".json") continue;
      std::string text = test::slurp(e.path());
      if (e.path().stem() == preset) {
        auto pos = text.find(from);
        REQUIRE_MESSAGE(pos != std::string::npos, from);
        text.replace(pos, from.size(), to);
      }
      std::ofstream(dir_.path() / e.path().filename()) << text;
    }
  }
  std::vector<std::string> option() const { return {"--policy-dir", dir_.path().string()}; }

 private:
  test::TempDir dir_;
};

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("stdout and stderr redirected to files reach them under every preset, as through pipes") {
  test::TempDir ws;
  for (const auto& preset : kPresets) {
    CAPTURE(preset);
    // test::run hands the supervisor regular files: the zero file-size limit of the read-only
    // presets would make the command's own writes to them fail (EFBIG) without the relay.
    auto to_files = test::run(sandbox(preset, ws.path(), {"/bin/echo", "hello"}));
    CHECK(to_files.code == 0);
    CHECK(to_files.out == "hello\n");
    auto err_file = test::run(sandbox(preset, ws.path(), sh("echo oops >&2; echo fine")));
    CHECK(err_file.code == 0);
    CHECK(err_file.out == "fine\n");
    CHECK(err_file.err.find("oops\n") != std::string::npos);
    // The twin: pipes, which the command writes itself.
    auto to_pipes = piped(sandbox(preset, ws.path(), sh("echo hello; echo oops >&2")));
    CHECK(to_pipes.code == 0);
    CHECK(to_pipes.out == "hello\n");
    CHECK(to_pipes.err.find("oops\n") != std::string::npos);
  }
  // Several MiB come through whole (the command's reads of /dev/urandom are allowed everywhere).
  auto big = test::run(sandbox("worker", ws.path(), {"/usr/bin/head", "-c", "3000000", "/dev/urandom"}));
  CHECK(big.code == 0);
  CHECK(big.out.size() == 3000000);
  // The command's status survives the relay.
  CHECK(test::run(sandbox("explore", ws.path(), sh("echo partial; exit 9"))).code == 9);
  // `> f 2>&1`: one file, one pipe, the lines in the order they were written.
  const std::string interleaved = "echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3";
  for (int i = 0; i < 3; ++i) {
    auto both = one_file(sandbox("explore", ws.path(), sh(interleaved)));
    CHECK(both.code == 0);
    // (After the supervisor's own lines about missing layers, as an unprivileged user.)
    CHECK(both.out.ends_with("out1\nerr1\nout2\nerr2\nout3\n"));
  }
}

TEST_CASE("the command's status is not lost when the supervisor inherits an ignored SIGCHLD") {
  test::TempDir ws;
  auto r = one_file(sandbox("worker", ws.path(), sh("echo ran; exit 7")), true);
  CHECK(r.code == 7);
  CHECK(r.out.ends_with("ran\n"));
  // The twin: the same with SIGCHLD as it normally is.
  CHECK(one_file(sandbox("worker", ws.path(), sh("echo ran; exit 7"))).code == 7);
}

TEST_CASE("the file-size limit still binds the files the command opens itself") {
  test::TempDir ws;
  EditedPolicies zero("worker", "\"file_size_mb\": 1024", "\"file_size_mb\": 0");
  const std::string script = "/usr/bin/head -c 10 /dev/zero > made.bin; echo \"head $?\"";
  auto limited = test::run(sandbox("worker", ws.path(), sh(script), zero.option()));
  CHECK(limited.code == 0);
  CHECK(limited.out == "head " + std::to_string(128 + SIGXFSZ) + "\n");  // its stdout, a file, got the line
  CHECK(fs::file_size(ws.path() / "made.bin") == 0);
  // The twin: the shipped worker lets files grow to 1 GiB.
  auto shipped = test::run(sandbox("worker", ws.path(), sh(script)));
  CHECK(shipped.out == "head 0\n");
  CHECK(fs::file_size(ws.path() / "made.bin") == 10);
}

TEST_CASE("a minimal init is PID 1 and the command its child; --as-pid-1 makes the command PID 1") {
  test::TempDir ws;
  for (const auto& preset : kPresets) {
    CAPTURE(preset);
    CHECK(test::run(sandbox(preset, ws.path(), sh("echo $$"))).out == "2\n");
    CHECK(test::run(sandbox(preset, ws.path(), sh("echo $$"), {"--as-pid-1"})).out == "1\n");
  }
  // A command that exec fails is still reported as such through the init.
  auto missing = test::run(sandbox("worker", ws.path(), {"/usr/bin/no-such-program-here"}));
  CHECK(missing.code == 127);
  const std::string text = ws.write("notes.txt", "not a program\n");
  REQUIRE(::chmod(text.c_str(), 0644) == 0);
  auto cannot = test::run(sandbox("worker", ws.path(), {text}));
  CHECK(cannot.code == 126);
  CHECK(cannot.err.find("execve") != std::string::npos);
}

TEST_CASE("the command's own SIGTERM ends it; as PID 1 it is ignored") {
  test::TempDir ws;
  const auto script = sh("kill -TERM $$; echo survived");
  auto with_init = test::run(sandbox("explore", ws.path(), script));
  CHECK(with_init.code == 128 + SIGTERM);
  CHECK(with_init.out.empty());
  auto as_pid_1 = test::run(sandbox("explore", ws.path(), script, {"--as-pid-1"}));
  CHECK(as_pid_1.code == 0);
  CHECK(as_pid_1.out == "survived\n");
}

TEST_CASE("SIGTERM to the supervisor reaches the command's handler through the init; a second kills") {
  test::TempDir ws;
  const std::string handles = "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
  {
    Running r(sandbox("worker", ws.path(), sh(handles)));
    REQUIRE(r.wait_for("ready\n"));
    r.signal(SIGTERM);
    CHECK(r.finish() == 3);
    CHECK(r.out == "ready\ngot TERM\n");
  }
  {  // The twin: as PID 1 the command would ignore it, so the sandbox is killed instead.
    Running r(sandbox("worker", ws.path(), sh(handles), {"--as-pid-1"}));
    REQUIRE(r.wait_for("ready\n"));
    r.signal(SIGTERM);
    CHECK(r.finish() == 128 + SIGKILL);
    CHECK(r.out == "ready\n");
  }
  {  // A command that ignores SIGTERM: the first is passed on and ignored, the second kills.
    Running r(sandbox("worker", ws.path(), sh("trap '' TERM; echo ready; while :; do sleep 0.05; done")));
    REQUIRE(r.wait_for("ready\n"));
    r.signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    r.signal(SIGTERM);
    CHECK(r.finish() == 128 + SIGKILL);
  }
  {  // SIGUSR1 is passed on every time, and the command goes on.
    Running r(sandbox(
        "worker", ws.path(),
        sh("trap 'echo usr1' USR1; echo ready; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; echo end")));
    REQUIRE(r.wait_for("ready\n"));
    r.signal(SIGUSR1);
    REQUIRE(r.wait_for("usr1\n"));
    r.signal(SIGUSR1);
    CHECK(r.finish() == 0);
    CHECK(count(r.out, "usr1\n") == 2);
    CHECK(r.out.find("end\n") != std::string::npos);
  }
}

TEST_CASE("the init reaps orphans: no zombie is left in the sandbox") {
  test::TempDir ws;
  // The subshell's sleep is orphaned at once and ends while the command still runs.
  auto r = test::run(sandbox("worker", ws.path(),
                             sh("(/usr/bin/sleep 0.1 &); /usr/bin/sleep 0.6; "
                                "/usr/bin/grep -l '^State:.Z' /proc/[0-9]*/status; echo \"zombies $?\"")));
  CHECK(r.code == 0);
  CHECK(r.out == "zombies 1\n");  // grep found no line
}

TEST_CASE("HOME is private: not the workspace, empty at every run, writable for writers only") {
  test::TempDir ws;
  const std::string script =
      "echo \"$HOME $TMPDIR\"; ls -A \"$HOME\"; echo hi > \"$HOME/.sh_history\" && cat \"$HOME/.sh_history\"; "
      "stat -c '%a %u' \"$HOME\"; id -u";
  for (const std::string preset : {"worker", "implementation"}) {
    CAPTURE(preset);
    auto r = test::run(sandbox(preset, ws.path(), sh(script)));
    CHECK(r.code == 0);
    const std::string uid = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
    CHECK(r.out == "/home/subagent /home/subagent\nhi\n700 " + uid + uid);
    CHECK_FALSE(fs::exists(ws.path() / ".sh_history"));
  }
  // The read-only presets: HOME exists, empty, and nothing can be written there.
  for (const std::string preset : {"explore", "reviewer", "research"}) {
    CAPTURE(preset);
    auto r =
        test::run(sandbox(preset, ws.path(), sh("echo $HOME; echo hi > \"$HOME/x\" && echo wrote || echo refused")));
    CHECK(r.out == "/home/subagent\nrefused\n");
    // Refused by the mount itself, not by Landlock alone: it is read-only (and noexec).
    auto mounts = test::run(sandbox(preset, ws.path(),
                                    sh("while read -r l; do case \"$l\" in *' /home/subagent '*) echo \"$l\";; esac; "
                                       "done < /proc/self/mountinfo")));
    CHECK(mounts.out.find(" /home/subagent ro,") != std::string::npos);
    CHECK(mounts.out.find("noexec") != std::string::npos);
  }
  // The twin: a policy that makes the workspace HOME gets the history file in the workspace.
  EditedPolicies home_is_ws("worker", "\"HOME\": \"${home}\"", "\"HOME\": \"${workspace}\"");
  auto twin =
      test::run(sandbox("worker", ws.path(), sh("echo hi > \"$HOME/.sh_history\"; echo $HOME"), home_is_ws.option()));
  CHECK(twin.out == ws.path().string() + "\n");
  CHECK(fs::exists(ws.path() / ".sh_history"));
}

TEST_CASE("${home} is checked: whole entries in read and write only, and never over a policy path") {
  test::TempDir ws;
  {
    EditedPolicies exec_home("worker", "\"execute\": [", "\"execute\": [\"${home}\", ");
    auto r = test::run(sandbox("worker", ws.path(), {"/bin/true"}, exec_home.option()));
    CHECK(r.code == 125);
    CHECK(r.err.find("sandbox.filesystem.execute[0]") != std::string::npos);
    CHECK(r.err.find("${home}") != std::string::npos);
  }
  {
    EditedPolicies sub("worker", "\"${home}\", \"/dev/null\"", "\"${home}/cache\", \"/dev/null\"");
    auto r = test::run(sandbox("worker", ws.path(), {"/bin/true"}, sub.option()));
    CHECK(r.code == 125);
    CHECK(r.err.find("must be exactly \"${home}\"") != std::string::npos);
  }
  if (fs::is_directory("/home")) {
    EditedPolicies around("explore", "\"/dev/urandom\", \"${home}\"", "\"/dev/urandom\", \"/home\", \"${home}\"");
    auto r = test::run(sandbox("explore", ws.path(), {"/bin/true"}, around.option()));
    CHECK(r.code == 125);
    CHECK(r.err.find("private home /home/subagent") != std::string::npos);
  }
  // The twin: the shipped presets launch.
  CHECK(test::run(sandbox("worker", ws.path(), {"/bin/true"})).code == 0);
}
