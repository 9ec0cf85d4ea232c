// Hostile children through the real CLI: `subagent-supervisor sandbox --preset P -- hostile ATTACK`
// for each of the five presets, one TEST_CASE per escape class. Every "blocked" assertion has a
// twin that runs the same hostile action directly (no sandbox) and sees it succeed, so each test
// can fail.
//
// The listeners (TCP, UDP, path and abstract Unix sockets) and the sibling process (the target of
// ptrace, process_vm_readv, signals and /proc/PID/environ) belong to this test process.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int kSucceeded = 0;
constexpr int kBlocked = 2;

const std::array<std::string, 5> kPresets = {"explore", "reviewer", "worker", "implementation", "research"};
bool writer(const std::string& preset) { return preset == "worker" || preset == "implementation"; }
// Presets whose seccomp groups include "process"; explore and research refuse fork (EPERM).
bool forks(const std::string& preset) { return preset != "explore" && preset != "research"; }

const std::string kCli = test::bin("subagent-supervisor").string();
const std::string kHostile = test::program("hostile").string();
const std::string kSecret = "the-outside-secret";
const std::string kEnvSecret = "HOSTILE_SIBLING_SECRET=api-key-do-not-leak";

struct Outcome {
  int code = -1;  // exit code, or 128 + signal
  std::string out, err;
};

std::string drain(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) s.append(buf, static_cast<std::size_t>(n));
  return s;
}

struct RunOptions {
  std::optional<uid_t> uid;  // drop to this uid (and gid) before exec
  gid_t gid = 0;
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  int timeout_s = 60;
};

// Runs argv with stdin from /dev/null and stdout/stderr captured. Any fd the caller holds open
// without close-on-exec is inherited (the inherited-fd test relies on that).
Outcome run(const std::vector<std::string>& argv, const RunOptions& opt = {}) {
  int out[2], err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(null, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (opt.uid) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(opt.gid) != 0 || ::setuid(*opt.uid) != 0) ::_exit(121);
    }
    if (::chdir("/") != 0) ::_exit(121);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : opt.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::alarm(static_cast<unsigned>(opt.timeout_s));  // a hung test fails instead of hanging CI
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  Outcome o;
  std::thread err_reader([&] { o.err = drain(err[0]); });
  o.out = drain(out[0]);
  err_reader.join();
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

std::vector<std::string> hostile(std::vector<std::string> args) {
  args.insert(args.begin(), kHostile);
  return args;
}

Outcome direct(const std::vector<std::string>& args, const RunOptions& opt = {}) { return run(hostile(args), opt); }

Outcome boxed(const std::string& preset, const fs::path& workspace, const std::vector<std::string>& args,
              const std::string& policy_dir = "", const RunOptions& opt = {}) {
  std::vector<std::string> argv = {kCli, "sandbox", "--preset", preset, "--workspace", workspace.string()};
  if (!policy_dir.empty()) argv.insert(argv.end(), {"--policy-dir", policy_dir});
  argv.push_back("--");
  for (const auto& a : hostile(args)) argv.push_back(a);
  return run(argv, opt);
}

#define CHECK_OUTCOME(o, expected)                        \
  do {                                                    \
    INFO("stdout: " << (o).out << "stderr: " << (o).err); \
    CHECK((o).code == (expected));                        \
  } while (0)

// Listeners on loopback and on Unix sockets, answering "pong" to "ping", on one poll thread.
class Listeners {
 public:
  explicit Listeners(const fs::path& dir)
      : unix_path_((dir / "stream.sock").string()),
        dgram_path_((dir / "dgram.sock").string()),
        abstract_name_("subagent-hostile-" + std::to_string(::getpid())) {
    tcp_ = inet(SOCK_STREAM, &tcp_port_);
    udp_ = inet(SOCK_DGRAM, &udp_port_);
    unix_ = unix_socket(SOCK_STREAM, unix_path_, false);
    abstract_ = unix_socket(SOCK_STREAM, abstract_name_, true);
    dgram_ = unix_socket(SOCK_DGRAM, dgram_path_, false);
    REQUIRE(::pipe2(stop_, O_CLOEXEC) == 0);
    thread_ = std::thread([this] { loop(); });
  }
  ~Listeners() {
    (void)!::write(stop_[1], "x", 1);
    thread_.join();
    for (int fd : {tcp_, udp_, unix_, abstract_, dgram_, stop_[0], stop_[1]}) ::close(fd);
  }
  std::string tcp_port() const { return std::to_string(tcp_port_); }
  std::string udp_port() const { return std::to_string(udp_port_); }
  const std::string& unix_path() const { return unix_path_; }
  const std::string& dgram_path() const { return dgram_path_; }
  const std::string& abstract_name() const { return abstract_name_; }
  int accepted() const { return accepted_; }

 private:
  static int inet(int type, int* port) {
    int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    if (type == SOCK_STREAM) REQUIRE(::listen(fd, 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    *port = ntohs(addr.sin_port);
    return fd;
  }
  static int unix_socket(int type, const std::string& name, bool abstract) {
    int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + (abstract ? 1 : 0), name.data(), name.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (abstract ? 1 : 0));
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    if (!abstract) ::chmod(name.c_str(), 0777);  // reachable by the unprivileged-user test too
    if (type == SOCK_STREAM) REQUIRE(::listen(fd, 16) == 0);
    return fd;
  }
  void answer_stream(int listener) {
    int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    ++accepted_;
    struct pollfd p = {c, POLLIN, 0};
    char buf[8];
    if (::poll(&p, 1, 2000) == 1 && ::recv(c, buf, sizeof buf, 0) == 4) (void)!::send(c, "pong", 4, MSG_NOSIGNAL);
    ::close(c);
  }
  void answer_datagram(int fd) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    char buf[8];
    if (::recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len) == 4 &&
        std::memcmp(buf, "ping", 4) == 0) {
      ++accepted_;
      if (len > sizeof(sa_family_t))  // an unnamed Unix sender cannot be answered
        (void)!::sendto(fd, "pong", 4, 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }
  void loop() {
    for (;;) {
      struct pollfd fds[6] = {{tcp_, POLLIN, 0}, {unix_, POLLIN, 0},  {abstract_, POLLIN, 0},
                              {udp_, POLLIN, 0}, {dgram_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      if (::poll(fds, 6, -1) < 0) continue;
      if (fds[5].revents) return;
      for (int i = 0; i < 3; ++i)
        if (fds[i].revents & POLLIN) answer_stream(fds[i].fd);
      for (int i = 3; i < 5; ++i)
        if (fds[i].revents & POLLIN) answer_datagram(fds[i].fd);
    }
  }

  std::string unix_path_, dgram_path_, abstract_name_;
  int tcp_ = -1, udp_ = -1, unix_ = -1, abstract_ = -1, dgram_ = -1;
  int tcp_port_ = 0, udp_port_ = 0;
  int stop_[2] = {-1, -1};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A sibling of the sandboxed command: `hostile sibling`, with a secret in its environment and one
// in its memory. It lives until this object closes its stdin.
class Sibling {
 public:
  Sibling() {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      char* argv[] = {const_cast<char*>(kHostile.c_str()), const_cast<char*>("sibling"), nullptr};
      char* envp[] = {const_cast<char*>(kEnvSecret.c_str()), nullptr};
      ::execve(argv[0], argv, envp);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    char buf[64] = {};
    ssize_t n = ::read(out[0], buf, sizeof buf - 1);
    ::close(out[0]);
    REQUIRE(n > 0);
    std::string line(buf);
    auto space = line.find(' ');
    REQUIRE(space != std::string::npos);
    REQUIRE(std::stoi(line.substr(0, space)) == pid_);
    address_ = line.substr(space + 1, line.find('\n') - space - 1);
  }
  ~Sibling() {
    ::close(stdin_);
    int status;
    ::waitpid(pid_, &status, 0);
  }
  std::string pid() const { return std::to_string(pid_); }
  const std::string& address() const { return address_; }
  bool alive() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  std::string address_;
};

// Workspace and an "outside" directory (a sibling of the workspace that no preset grants), with a
// secret file outside, a symlink and a hard link to it inside.
struct World {
  test::TempDir ws, outside;
  World() {
    ws.write("inside.txt", "inside-the-workspace\n");
    outside.write("secret.txt", kSecret + "\n");
    fs::create_symlink(outside.path() / "secret.txt", ws.path() / "symlink-to-secret");
    fs::create_hard_link(outside.path() / "secret.txt", ws.path() / "hardlink-to-secret");
  }
  std::string in_ws(const std::string& rel) const { return (ws.path() / rel).string(); }
  std::string out(const std::string& rel) const { return (outside.path() / rel).string(); }
};

// Copies of the shipped policies with rlimits.cpu_seconds set to 1, for the CPU spin.
class OneSecondPolicies {
 public:
  OneSecondPolicies() {
    for (const auto& e : fs::directory_iterator(test::policy_dir())) {
      if (e.path().extension() != ".json") continue;
      std::string text = test::slurp(e.path());
      const std::string from = "\"cpu_seconds\": 1800", to = "\"cpu_seconds\": 1";
      if (auto pos = text.find(from); pos != std::string::npos) text.replace(pos, from.size(), to);
      std::ofstream(dir_.path() / e.path().filename()) << text;
    }
  }
  std::string path() const { return dir_.path().string(); }

 private:
  test::TempDir dir_;
};

}  // namespace

TEST_CASE("the hostile program and the CLI are built") {
  REQUIRE(fs::exists(kCli));
  REQUIRE(fs::exists(kHostile));
  World w;
  for (const auto& preset : kPresets) {
    INFO(preset);
    // The sandbox comes up and the command runs: the precondition of every other test here.
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"read", w.in_ws("inside.txt")}), kSucceeded);
  }
}

TEST_CASE("writing outside the write roots is refused; writer presets write the workspace") {
  World w;
  CHECK_OUTCOME(direct({"write", w.out("direct.txt")}), kSucceeded);
  CHECK_OUTCOME(direct({"write", w.in_ws("direct.txt")}), kSucceeded);
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"write", w.out(preset + ".txt")}), kBlocked);
    CHECK(!fs::exists(w.out(preset + ".txt")));
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"write", "/etc/" + preset + "-hostile"}), kBlocked);
    CHECK(!fs::exists("/etc/" + preset + "-hostile"));
    auto inside = boxed(preset, w.ws.path(), {"write", w.in_ws(preset + ".txt")});
    CHECK_OUTCOME(inside, writer(preset) ? kSucceeded : kBlocked);
    CHECK(fs::exists(w.in_ws(preset + ".txt")) == writer(preset));
  }
}

TEST_CASE("reading outside the read roots is refused, also through a symlink") {
  World w;
  for (const char* path : {"secret.txt"}) {
    auto o = direct({"read", w.out(path)});
    CHECK_OUTCOME(o, kSucceeded);
    CHECK(o.out.find(kSecret) != std::string::npos);
  }
  CHECK_OUTCOME(direct({"read", w.in_ws("symlink-to-secret")}), kSucceeded);
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"read", w.in_ws("inside.txt")}), kSucceeded);
    for (const std::string& path : {w.out("secret.txt"), w.in_ws("symlink-to-secret")}) {
      auto o = boxed(preset, w.ws.path(), {"read", path});
      CHECK_OUTCOME(o, kBlocked);
      CHECK(o.out.find(kSecret) == std::string::npos);
    }
  }
}

// Landlock rules are attached to paths (the inodes of the rule directories and whatever lies
// beneath them), not to files: a hard link that already exists inside the workspace is a path
// beneath the workspace, so the file it names is readable, wherever its other names are. What the
// child cannot do is make such a link itself: link(2) needs a make-file right at the destination,
// and with LANDLOCK_ACCESS_FS_REFER handled (ABI 2+) a link may not move a file into a hierarchy
// that grants more than where it comes from (EXDEV). So whoever can write into a workspace before
// the child starts decides what it reads, and nobody inside the sandbox can extend that.
TEST_CASE("hard links: a pre-existing one in the workspace is readable; the child cannot make one") {
  World w;
  CHECK_OUTCOME(direct({"link", w.out("secret.txt"), w.in_ws("direct-link")}), kSucceeded);
  for (const auto& preset : kPresets) {
    INFO(preset);
    auto existing = boxed(preset, w.ws.path(), {"read", w.in_ws("hardlink-to-secret")});
    CHECK_OUTCOME(existing, kSucceeded);  // path-based semantics: see the comment above
    CHECK(existing.out.find(kSecret) != std::string::npos);
    const std::string made = w.in_ws(preset + "-link");
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"link", w.out("secret.txt"), made}), kBlocked);
    CHECK(!fs::exists(made));
  }
}

TEST_CASE("TCP, UDP, path and abstract Unix sockets to loopback listeners are unreachable") {
  World w;
  Listeners l(w.outside.path());
  const std::vector<std::vector<std::string>> attacks = {
      {"tcp", l.tcp_port()},
      {"udp", l.udp_port()},
      {"unix", l.unix_path()},
      {"abstract", l.abstract_name()},
      {"unix_dgram_socketpair", l.dgram_path()},
  };
  for (const auto& attack : attacks) {
    INFO(attack[0]);
    CHECK_OUTCOME(direct(attack), kSucceeded);
  }
  // The listeners count on their own threads: give the last accept a moment to be counted.
  for (int i = 0; i < 250 && l.accepted() < static_cast<int>(attacks.size()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int answered_directly = l.accepted();
  CHECK(answered_directly == static_cast<int>(attacks.size()));
  for (const auto& preset : kPresets) {
    for (const auto& attack : attacks) {
      INFO(preset << " " << attack[0]);
      CHECK_OUTCOME(boxed(preset, w.ws.path(), attack), kBlocked);
    }
  }
  CHECK(l.accepted() == answered_directly);  // no sandboxed connection reached a listener
}

TEST_CASE("a sibling process cannot be traced, read, signalled or have its environ read") {
  World w;
  Sibling sibling;
  CHECK_OUTCOME(direct({"ptrace", sibling.pid()}), kSucceeded);
  CHECK_OUTCOME(direct({"vm_readv", sibling.pid(), sibling.address()}), kSucceeded);
  CHECK_OUTCOME(direct({"signal", sibling.pid()}), kSucceeded);
  auto env = direct({"environ", sibling.pid()});
  CHECK_OUTCOME(env, kSucceeded);
  CHECK(env.out.find(kEnvSecret) != std::string::npos);
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"ptrace", sibling.pid()}), kBlocked);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"vm_readv", sibling.pid(), sibling.address()}), kBlocked);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"signal", sibling.pid()}), kBlocked);
    auto e = boxed(preset, w.ws.path(), {"environ", sibling.pid()});
    CHECK_OUTCOME(e, kBlocked);
    CHECK(e.out.find("api-key") == std::string::npos);
    // /proc is the child's own (its PID namespace's): /proc/1 there is the sandbox's minimal
    // init, never the machine's, and the command (pid 2) reads its own clean environment. The
    // init holds a copy of the supervisor's memory, and the command cannot read that.
    auto own = boxed(preset, w.ws.path(), {"environ", "2"});
    CHECK_OUTCOME(own, kSucceeded);
    CHECK(own.out.find(kEnvSecret) == std::string::npos);
    CHECK(own.out.find("api-key") == std::string::npos);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"environ", "1"}), kBlocked);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"ptrace", "1"}), kBlocked);
  }
  CHECK(sibling.alive());
}

TEST_CASE("io_uring is refused and an x32 syscall kills the process") {
  World w;
  CHECK_OUTCOME(direct({"io_uring"}), kSucceeded);
  CHECK_OUTCOME(direct({"x32"}), kSucceeded);  // ENOSYS without x32 support, but alive
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"io_uring"}), kBlocked);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"x32"}), 128 + SIGSYS);
  }
}

TEST_CASE("a double-forked setsid grandchild does not outlive the sandboxed command") {
  World w;
  // Names stay under the 15 characters of a comm.
  const std::string twin = "hgc-twin" + std::to_string(::getpid() % 10000);
  CHECK_OUTCOME(direct({"grandchild", twin}), kSucceeded);
  CHECK(test::processes_named(twin) == 1);  // without the sandbox it survives its parent
  (void)!std::system(("pkill -KILL -x " + twin).c_str());
  for (const auto& preset : kPresets) {
    INFO(preset);
    const std::string comm = "hgc-" + preset.substr(0, 4) + std::to_string(::getpid() % 10000);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"grandchild", comm}), forks(preset) ? kSucceeded : kBlocked);
    int left = -1;
    for (int i = 0; i < 50 && (left = test::processes_named(comm)) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(left == 0);
  }
}

TEST_CASE("fork bomb, memory bomb and CPU spin are held by the process cap and rlimits") {
  World w;
  OneSecondPolicies one_second;
  // 1000 processes exceed every preset's cap (32 or 256); 12 GiB every address-space limit.
  CHECK_OUTCOME(direct({"forkbomb", "1000"}), kSucceeded);
  CHECK_OUTCOME(direct({"membomb", "12288"}), kSucceeded);
  CHECK_OUTCOME(direct({"spin", "1.5"}), kSucceeded);
#ifdef SUBAGENT_SANITIZER_BUILD
  MESSAGE(
      "memory bomb not checked in a sanitizer build: its shadow memory needs terabytes of address "
      "space, so sandbox/launch.cpp sets no RLIMIT_AS there (sandbox_rlimits_test checks the layer says so)");
#endif
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"forkbomb", "1000"}), kBlocked);
#ifndef SUBAGENT_SANITIZER_BUILD
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"membomb", "12288"}), kBlocked);
#endif
    auto spin = boxed(preset, w.ws.path(), {"spin", "30"}, one_second.path());
    INFO("spin: " << spin.out << spin.err);
    CHECK((spin.code == 128 + SIGXCPU || spin.code == 128 + SIGKILL));
  }
}

TEST_CASE("an fd inherited without close-on-exec does not reach the sandboxed command") {
  World w;
  int leak = ::open("/dev/null", O_RDONLY);  // deliberately not O_CLOEXEC
  REQUIRE(leak >= 3);
  auto twin = direct({"fds"});
  CHECK_OUTCOME(twin, kSucceeded);
  CHECK(twin.out.find(std::to_string(leak)) != std::string::npos);
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"fds"}), kBlocked);
  }
  ::close(leak);
}

TEST_CASE("worker runs a compiler and a build inside the workspace") {
  World w;
  w.ws.write("hello.c", "#include <stdio.h>\nint main(void) { puts(\"built and ran\"); return 0; }\n");
  w.ws.write("Makefile", "hello: hello.c\n\tcc -O0 -o hello hello.c\n\ncheck: hello\n\t./hello\n");
  std::vector<std::string> argv = {kCli, "sandbox",       "--preset", "worker", "--workspace", w.ws.path().string(),
                                   "--", "/usr/bin/make", "check"};
  auto o = run(argv);
  CHECK_OUTCOME(o, 0);
  CHECK(o.out.find("built and ran") != std::string::npos);
  CHECK(fs::exists(w.in_ws("hello")));
  // The twin of the refusal: a read-only preset cannot build (make may run, cc may not write).
  fs::remove(w.in_ws("hello"));
  argv[3] = "explore";
  CHECK(run(argv).code != 0);
  CHECK(!fs::exists(w.in_ws("hello")));
}

// CI runs as root. The supervisor also runs as an ordinary user, where the user namespace is
// unprivileged and RLIMIT_NPROC is the process cap; this creates such a user when needed.
TEST_CASE("as an unprivileged user the sandbox still comes up and contains a write") {
  if (::geteuid() != 0) {
    MESSAGE("not root: runs only where the test can create a user");
    return;
  }
  const char* name = "subagent-hostile";
  if (!::getpwnam(name)) {
    int rc = std::system(
        "useradd --system --no-create-home --shell /usr/sbin/nologin subagent-hostile"
        " >/dev/null 2>&1");
    REQUIRE(rc == 0);
  }
  const passwd* pw = ::getpwnam(name);
  REQUIRE(pw);
  RunOptions as_user;
  as_user.uid = pw->pw_uid;
  as_user.gid = pw->pw_gid;
  World w;
  for (const fs::path& dir : {w.ws.path(), w.outside.path()}) {
    REQUIRE(::chown(dir.c_str(), pw->pw_uid, pw->pw_gid) == 0);
    for (const auto& e : fs::directory_iterator(dir)) REQUIRE(::lchown(e.path().c_str(), pw->pw_uid, pw->pw_gid) == 0);
  }
  // The twin: as that user, without the sandbox, both writes work.
  CHECK_OUTCOME(direct({"write", w.out("as-user-direct.txt")}, as_user), kSucceeded);
  for (const std::string preset : {"worker", "explore"}) {
    INFO(preset);
    auto inside = boxed(preset, w.ws.path(), {"write", w.in_ws("as-user.txt")}, "", as_user);
    CHECK_OUTCOME(inside, writer(preset) ? kSucceeded : kBlocked);
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"write", w.out(preset + "-as-user.txt")}, "", as_user), kBlocked);
    CHECK(!fs::exists(w.out(preset + "-as-user.txt")));
    CHECK_OUTCOME(boxed(preset, w.ws.path(), {"forkbomb", "1000"}, "", as_user), kBlocked);
  }
}

// The seccomp allowlist through the CLI, as a hostile command would meet it: `sandbox --preset P --
// sandbox_probe ACTION` exits with the errno the action got (tests/programs/sandbox_probe.cpp).
TEST_CASE(
    "seccomp allowlist: watches, READ_IMPLIES_EXEC and unlisted syscalls are refused; each "
    "preset's own groups work") {
  World w;
  const std::string probe = test::program("sandbox_probe").string();
  auto probe_in = [&](const std::string& preset, std::vector<std::string> args) {
    std::vector<std::string> argv = {kCli, "sandbox", "--preset", preset, "--workspace", w.ws.path().string(),
                                     "--", probe};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
  };
  auto probe_direct = [&](std::vector<std::string> args) {
    args.insert(args.begin(), probe);
    return run(args);
  };
  const std::string outside = w.outside.path().string();
  // Twins: every action works without the sandbox.
  CHECK_OUTCOME(probe_direct({"inotify_watch", outside}), 0);
  CHECK_OUTCOME(probe_direct({"personality", "0x400000"}), 0);
  CHECK_OUTCOME(probe_direct({"get_mempolicy"}), 0);
  CHECK_OUTCOME(probe_direct({"chmod", w.in_ws("inside.txt")}), 0);
  CHECK_OUTCOME(probe_direct({"fork"}), 0);
  for (const auto& preset : kPresets) {
    INFO(preset);
    CHECK_OUTCOME(probe_in(preset, {"inotify_watch", outside}), EPERM);
    CHECK_OUTCOME(probe_in(preset, {"inotify_watch", w.ws.path().string()}), EPERM);
    CHECK_OUTCOME(probe_in(preset, {"personality", "0x400000"}), EPERM);
    CHECK_OUTCOME(probe_in(preset, {"personality", "0xffffffff"}), 0);
    CHECK_OUTCOME(probe_in(preset, {"get_mempolicy"}), ENOSYS);
    CHECK_OUTCOME(probe_in(preset, {"thread"}), 0);
    // Metadata in the workspace: writer presets may (group filesystem_write), the others are
    // refused by seccomp whatever the mount table or Landlock would say.
    CHECK_OUTCOME(probe_in(preset, {"chmod", w.in_ws("inside.txt")}), writer(preset) ? 0 : EPERM);
    CHECK_OUTCOME(probe_in(preset, {"utimensat", w.in_ws("inside.txt")}), writer(preset) ? 0 : EPERM);
    CHECK_OUTCOME(probe_in(preset, {"fork"}), forks(preset) ? 0 : EPERM);
  }
}
