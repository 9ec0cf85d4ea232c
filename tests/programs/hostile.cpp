// A hostile child: tries one escape named by argv[1] and says on stdout what happened.
//
//   exit 0  the action succeeded ("hostile ATTACK: succeeded: ...")
//   exit 2  the action was refused ("hostile ATTACK: blocked: <errno text>")
//   exit 3  bad usage or a broken test set-up (never a verdict)
//   killed  by the kernel: SIGSYS (seccomp kill), SIGXCPU/SIGKILL (CPU limit)
//
// The same binary runs inside `subagent-supervisor sandbox` and directly (the twin that shows the
// action works without the sandbox), so a "blocked" result proves something. `sibling` is not an
// attack: it is the process the test starts next to the sandbox, the target of ptrace, signals and
// /proc/PID/environ.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kSucceeded = 0;
constexpr int kBlocked = 2;
constexpr int kUsage = 3;

std::string g_attack;

int succeeded(const std::string& what) {
  std::printf("hostile %s: succeeded: %s\n", g_attack.c_str(), what.c_str());
  std::fflush(stdout);
  return kSucceeded;
}

int blocked(const std::string& what, int err) {
  std::printf("hostile %s: blocked: %s: %s\n", g_attack.c_str(), what.c_str(), std::strerror(err));
  std::fflush(stdout);
  return kBlocked;
}

int usage(const std::string& what) {
  std::printf("hostile %s: usage: %s\n", g_attack.c_str(), what.c_str());
  std::fflush(stdout);
  return kUsage;
}

// The value the sibling keeps in memory for process_vm_readv to find.
volatile std::uint64_t g_secret = 0x5ec12e7c0ffee123ULL;

// --- filesystem ---------------------------------------------------------------------------------

int do_write(const char* path) {
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return blocked(std::string("open ") + path, errno);
  ssize_t n = ::write(fd, "hostile\n", 8);
  int err = errno;
  ::close(fd);
  if (n != 8) return blocked(std::string("write ") + path, n < 0 ? err : EIO);
  return succeeded(std::string("wrote ") + path);
}

// Prints what it read, so that the test can also check the content did not leak.
int do_read(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return blocked(std::string("open ") + path, errno);
  char buf[256];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  int err = errno;
  ::close(fd);
  if (n < 0) return blocked(std::string("read ") + path, err);
  std::string text(buf, static_cast<std::size_t>(n));
  for (char& c : text)
    if (c == '\0' || c == '\n') c = ' ';
  return succeeded(std::string("read ") + path + ": " + text);
}

int do_link(const char* from, const char* to) {
  if (::link(from, to) != 0) return blocked(std::string("link ") + from + " -> " + to, errno);
  return succeeded(std::string("linked ") + to + " to " + from);
}

// --- network
// --------------------------------------------------------------------------------------

// Sends "ping" and waits up to two seconds for the listener's "pong".
int ping(int fd, const sockaddr* to, socklen_t len, const std::string& what) {
  if (to ? ::sendto(fd, "ping", 4, MSG_NOSIGNAL, to, len) != 4 : ::send(fd, "ping", 4, MSG_NOSIGNAL) != 4) {
    int err = errno;
    ::close(fd);
    return blocked("send to " + what, err);
  }
  struct pollfd p = {fd, POLLIN, 0};
  char buf[8] = {};
  ssize_t n = ::poll(&p, 1, 2000) == 1 ? ::recv(fd, buf, sizeof buf, 0) : -1;
  int err = n < 0 ? (errno ? errno : ETIMEDOUT) : 0;
  ::close(fd);
  if (n != 4 || std::memcmp(buf, "pong", 4) != 0) return blocked("answer from " + what, err ? err : EPROTO);
  return succeeded("exchanged ping/pong with " + what);
}

int do_inet(int type, const char* port_text) {
  const std::string what = std::string(type == SOCK_STREAM ? "tcp" : "udp") + " 127.0.0.1:" + port_text;
  int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return blocked("socket for " + what, errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port_text)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd);
    return blocked("connect to " + what, err);
  }
  return ping(fd, nullptr, 0, what);
}

socklen_t unix_address(const char* name, bool abstract, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  std::size_t len = std::strlen(name);
  if (len + 2 > sizeof addr->sun_path) return 0;
  std::memcpy(addr->sun_path + (abstract ? 1 : 0), name, len);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (abstract ? 1 : 0));
}

int do_unix_stream(const char* name, bool abstract) {
  const std::string what = std::string(abstract ? "abstract unix socket @" : "unix socket ") + name;
  sockaddr_un addr;
  socklen_t len = unix_address(name, abstract, &addr);
  if (len == 0) return usage("socket name too long");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return blocked("socket for " + what, errno);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    ::close(fd);
    return blocked("connect to " + what, err);
  }
  return ping(fd, nullptr, 0, what);
}

// A datagram socket from socketpair(2) (the one socket call a network-less preset keeps) can still
// name a destination in sendto(2): this tries to reach a path-bound datagram listener that way.
int do_unix_dgram_via_socketpair(const char* path) {
  const std::string what = std::string("unix datagram socket ") + path + " (via socketpair + sendto)";
  sockaddr_un addr;
  socklen_t len = unix_address(path, false, &addr);
  if (len == 0) return usage("socket path too long");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) return blocked("socketpair", errno);
  // A Unix datagram is queued at the receiver by sendto itself: success means it arrived. (No
  // answer can come back: a connected datagram socket accepts datagrams only from its peer.)
  ssize_t n = ::sendto(sv[0], "ping", 4, MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), len);
  int err = errno;
  ::close(sv[0]);
  ::close(sv[1]);
  if (n != 4) return blocked("sendto " + what, err);
  return succeeded("delivered a datagram to " + what);
}

// --- other processes
// ------------------------------------------------------------------------------

int do_ptrace(pid_t pid) {
  if (::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0)
    return blocked("ptrace(PTRACE_SEIZE) of pid " + std::to_string(pid), errno);
  return succeeded("attached to pid " + std::to_string(pid) + " (detached when we exit)");
}

int do_vm_readv(pid_t pid, const char* address_text) {
  std::uint64_t value = 0;
  struct iovec local = {&value, sizeof value};
  struct iovec remote = {reinterpret_cast<void*>(std::strtoull(address_text, nullptr, 16)), sizeof value};
  if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof value))
    return blocked("process_vm_readv of pid " + std::to_string(pid), errno);
  if (value != g_secret) return blocked("process_vm_readv read the wrong value", EFAULT);
  return succeeded("read the sibling's secret from its memory");
}

int do_signal(pid_t pid) {
  if (::kill(pid, SIGUSR1) != 0) return blocked("kill(" + std::to_string(pid) + ", SIGUSR1)", errno);
  return succeeded("sent SIGUSR1 to pid " + std::to_string(pid));
}

// The sibling the test starts: handles SIGUSR1 (so signalling it is harmless), keeps g_secret,
// prints "PID ADDRESS" and waits for its stdin to close.
int do_sibling() {
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::printf("%d %llx\n", ::getpid(), static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(&g_secret)));
  std::fflush(stdout);
  char c;
  for (;;) {
    ssize_t n = ::read(0, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) return 0;
  }
}

// --- kernel surface
// -------------------------------------------------------------------------------

int do_io_uring() {
  struct io_uring_params params;
  std::memset(&params, 0, sizeof params);
  long fd = ::syscall(SYS_io_uring_setup, 4, &params);
  if (fd < 0) return blocked("io_uring_setup", errno);
  ::close(static_cast<int>(fd));
  return succeeded("created an io_uring");
}

// getpid through the x32 ABI. A kernel without x32 answers ENOSYS; either way the process lives on.
// Under the sandbox's filter it is killed by SIGSYS instead.
int do_x32() {
  long rc = ::syscall(0x40000000L | SYS_getpid);
  return succeeded(rc < 0 ? std::string("x32 getpid returned ") + std::strerror(errno) + " and we live"
                          : "x32 getpid returned " + std::to_string(rc));
}

// --- outliving the child
// --------------------------------------------------------------------------

// Double-forks a setsid grandchild named `comm` that ignores SIGHUP and SIGTERM and sleeps an
// hour, detached from our stdio. Succeeds once the grandchild runs; whether it outlives us is for
// the test to see in /proc.
int do_grandchild(const char* comm) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return usage("pipe2 failed");
  pid_t pid = ::fork();
  if (pid < 0) return blocked("fork", errno);
  if (pid == 0) {
    ::setsid();
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::signal(SIGHUP, SIG_IGN);
      ::signal(SIGTERM, SIG_IGN);
      ::prctl(PR_SET_NAME, comm);
      int null = ::open("/dev/null", O_RDWR);
      for (int fd = 0; fd < 3; ++fd) ::dup2(null >= 0 ? null : ready[1], fd);
      (void)!::write(ready[1], "x", 1);
      ::close(ready[1]);
      for (int i = 0; i < 3600; ++i) ::sleep(1);
      ::_exit(0);
    }
    ::_exit(grandchild > 0 ? 0 : 1);
  }
  ::close(ready[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  char c;
  ssize_t n = ::read(ready[0], &c, 1);
  if (n != 1) return blocked("starting the grandchild", EAGAIN);
  return succeeded(std::string("a setsid grandchild named ") + comm + " is running");
}

// --- exhaustion
// -----------------------------------------------------------------------------------

// Forks `want` children that pause; succeeds when all of them exist at once.
int do_forkbomb(int want) {
  std::vector<pid_t> kids;
  int err = 0;
  for (int i = 0; i < want; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      err = errno;
      break;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (;;) ::pause();
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) ::kill(pid, SIGKILL);
  for (pid_t pid : kids) ::waitpid(pid, nullptr, 0);
  if (err) return blocked("fork number " + std::to_string(kids.size() + 1), err);
  return succeeded(std::to_string(want) + " processes at once");
}

// Maps `mib` MiB of anonymous memory in 256 MiB pieces and touches a page of each. MAP_NORESERVE
// keeps the twin (no sandbox) from committing the memory; the address-space limit counts it anyway.
int do_membomb(long mib) {
  constexpr std::size_t kPiece = 256UL << 20;
  std::vector<void*> pieces;
  int err = 0;
  for (long done = 0; done < mib; done += 256) {
    void* p = ::mmap(nullptr, kPiece, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      err = errno;
      break;
    }
    static_cast<volatile char*>(p)[0] = 1;
    pieces.push_back(p);
  }
  const std::size_t got = pieces.size() * 256;
  for (void* p : pieces) ::munmap(p, kPiece);
  if (err) return blocked("mapping memory after " + std::to_string(got) + " MiB", err);
  return succeeded("mapped " + std::to_string(got) + " MiB");
}

int do_spin(double seconds) {
  struct timespec start, now;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
  volatile unsigned long x = 0;
  for (;;) {
    for (int i = 0; i < 1000000; ++i) x = x + 1;
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds)
      return succeeded("spun the CPU for " + std::to_string(seconds) + " s");
  }
}

// --- limits over the whole tree
// ------------------------------------------------------------------------

// `procs` processes each touch `mib` MiB of anonymous memory and hold it until all of them have
// (or died trying): the memory a `make -j` of a hostile Makefile would take. Each one stays below
// RLIMIT_AS, so only a limit over the whole tree can stop the sum.
int do_tree_memory(int procs, long mib) {
  int ready[2], go[2];
  if (procs < 1 || procs > 64 || mib < 1 || ::pipe(ready) != 0 || ::pipe(go) != 0)
    return usage("tree_memory PROCS MIB (1..64 processes)");
  std::vector<pid_t> pids;
  for (int i = 0; i < procs; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) break;
    if (pid == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      const std::size_t bytes = static_cast<std::size_t>(mib) << 20;
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) ::_exit(10);
      std::memset(p, 0x5a, bytes);  // every page resident
      if (::write(ready[1], "r", 1) != 1) ::_exit(11);
      ::close(ready[1]);
      char c;
      while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(ready[1]);
  ::close(go[0]);
  int held = 0;
  char c;
  ssize_t n;
  while ((n = ::read(ready[0], &c, 1)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) ++held;
  ::close(go[1]);  // every process that holds its memory lets go now
  int killed = 0, failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status))
      ++killed;
    else if (WEXITSTATUS(status) != 0)
      ++failed;
  }
  const std::string what = std::to_string(held) + " of " + std::to_string(procs) + " processes held " +
                           std::to_string(mib) + " MiB each (" + std::to_string(static_cast<long>(held) * mib) +
                           " MiB in all); " + std::to_string(killed) + " killed by a signal, " +
                           std::to_string(failed) + " failed to map";
  // A process can report its memory held and still be OOM-killed while it waits: only a tree in
  // which every process held its memory and exited on its own succeeded.
  if (held == procs && static_cast<int>(pids.size()) == procs && killed == 0 && failed == 0) return succeeded(what);
  return blocked(what, ENOMEM);
}

// `procs` processes spin for `seconds` of wall time; prints the CPUs they used together
// ("cpus=1.93"), from the reaped children's rusage over the wall time.
int do_tree_cpu(int procs, double seconds) {
  if (procs < 1 || procs > 64 || seconds <= 0) return usage("tree_cpu PROCS SECONDS");
  struct timespec start, end;
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  std::vector<pid_t> pids;
  for (int i = 0; i < procs; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) return blocked("fork", errno);
    if (pid == 0) {
      struct timespec now;
      volatile unsigned long x = 0;
      for (;;) {
        for (int j = 0; j < 100000; ++j) x = x + 1;
        ::clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) ::_exit(0);
      }
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids)
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  ::clock_gettime(CLOCK_MONOTONIC, &end);
  struct rusage ru {};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  const double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  const double wall = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
  char text[128];
  std::snprintf(text, sizeof text, "cpus=%.3f (%.3f s of CPU over %.3f s of wall time, %d processes)", cpu / wall, cpu,
                wall, procs);
  return succeeded(text);
}

// --- inherited descriptors
// ------------------------------------------------------------------------

int do_fds() {
  std::string open_fds;
  for (int fd = 3; fd <= 1024; ++fd)
    if (::fcntl(fd, F_GETFD) >= 0) open_fds += (open_fds.empty() ? "" : " ") + std::to_string(fd);
  if (open_fds.empty()) return blocked("no fd above 2 is open", EBADF);
  return succeeded("inherited fds " + open_fds);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hostile ATTACK [ARGS...]\n");
    return kUsage;
  }
  g_attack = argv[1];
  const std::string& a = g_attack;
  auto arg = [&](int i) -> const char* { return argc > i ? argv[i] : nullptr; };
  auto need = [&](int n) { return argc >= 2 + n; };
  auto pid = [&](int i) { return static_cast<pid_t>(std::atoi(argv[i])); };

  if (a == "write" && need(1)) return do_write(arg(2));
  if (a == "read" && need(1)) return do_read(arg(2));
  if (a == "link" && need(2)) return do_link(arg(2), arg(3));
  if (a == "tcp" && need(1)) return do_inet(SOCK_STREAM, arg(2));
  if (a == "udp" && need(1)) return do_inet(SOCK_DGRAM, arg(2));
  if (a == "unix" && need(1)) return do_unix_stream(arg(2), false);
  if (a == "abstract" && need(1)) return do_unix_stream(arg(2), true);
  if (a == "unix_dgram_socketpair" && need(1)) return do_unix_dgram_via_socketpair(arg(2));
  if (a == "ptrace" && need(1)) return do_ptrace(pid(2));
  if (a == "vm_readv" && need(2)) return do_vm_readv(pid(2), arg(3));
  if (a == "signal" && need(1)) return do_signal(pid(2));
  if (a == "environ" && need(1)) return do_read(("/proc/" + std::string(arg(2)) + "/environ").c_str());
  if (a == "sibling") return do_sibling();
  if (a == "io_uring") return do_io_uring();
  if (a == "x32") return do_x32();
  if (a == "grandchild" && need(1)) return do_grandchild(arg(2));
  if (a == "forkbomb" && need(1)) return do_forkbomb(std::atoi(arg(2)));
  if (a == "membomb" && need(1)) return do_membomb(std::atol(arg(2)));
  if (a == "spin" && need(1)) return do_spin(std::atof(arg(2)));
  if (a == "fds") return do_fds();
  if (a == "tree_memory" && need(2)) return do_tree_memory(std::atoi(arg(2)), std::atol(arg(3)));
  if (a == "tree_cpu" && need(2)) return do_tree_cpu(std::atoi(arg(2)), std::atof(arg(3)));
  return usage("unknown attack or missing arguments");
}
