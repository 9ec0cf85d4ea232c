// Tries one action named by argv[1] and reports through its exit status: 0 when the action
// succeeded, the errno value when it failed (EPERM = 1, EACCES = 13, ENOSYS = 38, ...), 120+ for
// usage errors. Killed by a signal when the kernel kills it (seccomp: SIGSYS, rlimits: SIGXCPU).
// Run both inside and outside the sandbox, so each "blocked" result has an "allowed" twin.
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace {

int result(long rc) { return rc < 0 ? (errno > 0 && errno < 120 ? errno : 119) : 0; }

pid_t sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) pause();
  }
  return pid;
}

void reap_kill(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

int do_ptrace() {
  pid_t pid = sleeper();
  long rc = ptrace(PTRACE_ATTACH, pid, nullptr, nullptr);
  int r = result(rc);
  reap_kill(pid);
  return r;
}

int do_process_vm_readv() {
  static volatile int value = 42;
  pid_t pid = sleeper();
  int out = 0;
  struct iovec local = {&out, sizeof out};
  struct iovec remote = {const_cast<int*>(&value), sizeof value};
  long rc = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  int r = result(rc);
  reap_kill(pid);
  return r;
}

int do_io_uring() {
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  long fd = syscall(SYS_io_uring_setup, 4, &params);
  if (fd >= 0) close(static_cast<int>(fd));
  return result(fd);
}

int do_mount() {
  // Inside a read-only sandbox no directory can be made: mount over the cwd, never reached.
  char dir[] = "/tmp/sandbox-probe-mount-XXXXXX";
  bool made = mkdtemp(dir) != nullptr;
  const char* target = made ? dir : ".";
  long rc = mount("none", target, "tmpfs", 0, "size=1m");
  int r = result(rc);
  if (rc == 0) umount2(target, MNT_DETACH);
  if (made) rmdir(dir);
  return r;
}

int do_clone_flags(unsigned long flags) {
  long pid = syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
  return result(pid);
}

int do_clone3() {
  struct {
    unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
  } args;
  memset(&args, 0, sizeof args);
  args.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
  return result(pid);
}

int do_socket(int domain, int type) {
  int fd = socket(domain, type, 0);
  if (fd >= 0) close(fd);
  return result(fd);
}

int do_socketpair(int domain, int type = SOCK_STREAM) {
  int sv[2];
  int rc = socketpair(domain, type, 0, sv);
  if (rc == 0) close(sv[0]), close(sv[1]);
  return result(rc);
}

int do_bpf() {
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_ARRAY;
  attr.key_size = 4;
  attr.value_size = 4;
  attr.max_entries = 1;
  long fd = syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
  if (fd >= 0) close(static_cast<int>(fd));
  return result(fd);
}

int do_keyctl() {
  // KEYCTL_GET_KEYRING_ID (0) of KEY_SPEC_PROCESS_KEYRING (-2), creating it.
  return result(syscall(SYS_keyctl, 0, -2, 1));
}

int do_tiocsti(unsigned long high_bits) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) return result(-1);
  if (grantpt(master) != 0 || unlockpt(master) != 0) return result(-1);
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  if (slave < 0) return result(-1);
  char c = 'x';
  unsigned long request = TIOCSTI | high_bits;
  return result(syscall(SYS_ioctl, slave, request, &c));
}

int do_x32() {
  // getpid through the x32 ABI: ENOSYS on a kernel without x32, SIGSYS under the sandbox.
  return result(syscall(0x40000000 | SYS_getpid));
}

int do_read(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return result(-1);
  char buf[64];
  long n = read(fd, buf, sizeof buf);
  close(fd);
  return result(n);
}

int do_write(const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return result(-1);
  long n = write(fd, "probe\n", 6);
  close(fd);
  return result(n);
}

int do_fds() {
  int open_fds = 0;
  for (int fd = 3; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0) {
      printf("%d\n", fd);
      ++open_fds;
    }
  }
  fflush(stdout);
  return open_fds == 0 ? 0 : 1;
}

int do_env() {
  for (char** e = environ; *e; ++e) printf("%s\n", *e);
  fflush(stdout);
  return 0;
}

int do_forkbomb(int want) {
  std::vector<pid_t> kids;
  int r = 0;
  for (int i = 0; i < want; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      r = result(-1);
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (;;) pause();
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) kill(pid, SIGKILL);
  for (pid_t pid : kids) waitpid(pid, nullptr, 0);
  return r;
}

int do_membomb(long mib) {
  std::vector<char*> blocks;
  for (long i = 0; i < mib; ++i) {
    char* p = static_cast<char*>(malloc(1 << 20));
    if (!p) return ENOMEM;
    memset(p, 1, 1 << 20);
    blocks.push_back(p);
  }
  for (char* p : blocks) free(p);
  return 0;
}

int do_spin(double seconds) {
  struct timespec start, now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
  volatile unsigned long x = 0;
  for (;;) {
    for (int i = 0; i < 1000000; ++i) x = x + 1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds) return 0;
  }
}

// Double-forks a setsid grandchild that keeps stdout open and sleeps; prints its pid first.
int do_grandchild() {
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    if (fork() == 0) {
      printf("%d\n", getpid());
      fflush(stdout);
      for (;;) pause();
    }
    _exit(0);
  }
  waitpid(pid, nullptr, 0);
  usleep(100 * 1000);
  return 0;
}

int do_sleep(int seconds) {
  printf("%d\n", getpid());
  fflush(stdout);
  sleep(static_cast<unsigned>(seconds));
  return 0;
}

// Prints which privileges the process holds, one "name value" line each.
int do_privileges() {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return result(-1);
  int bounding = 0, ambient = 0;
  for (int cap = 0; cap < 64; ++cap) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) ++bounding;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 1) ++ambient;
  }
  auto both = [](unsigned hi, unsigned lo) { return (static_cast<unsigned long long>(hi) << 32) | lo; };
  printf("effective %llx\npermitted %llx\ninheritable %llx\n", both(data[1].effective, data[0].effective),
         both(data[1].permitted, data[0].permitted), both(data[1].inheritable, data[0].inheritable));
  printf("bounding %d\nambient %d\nno_new_privs %d\nsession_leader %d\nsecurebits %x\n", bounding, ambient,
         prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), getsid(0) == getpid(), prctl(PR_GET_SECUREBITS, 0, 0, 0, 0));
  fflush(stdout);
  return 0;
}

int do_link(const char* from, const char* to) { return result(link(from, to)); }

// Metadata changes, each on one existing path; the test checks from outside that nothing changed
// when the probe reports a failure.
int do_metadata(const std::string& action, const char* path, const char* arg) {
  if (action == "chmod") return result(chmod(path, *arg ? static_cast<mode_t>(strtol(arg, nullptr, 8)) : 0640));
  if (action == "chown_self") return result(chown(path, getuid(), getgid()));
  if (action == "utimensat") {
    struct timespec times[2] = {{12345, 0}, {12345, 0}};
    return result(utimensat(AT_FDCWD, path, times, 0));
  }
  if (action == "setxattr") return result(setxattr(path, "user.probe", "x", 1, 0));
  if (action == "truncate") return result(truncate(path, 0));
  if (action == "rename") return result(rename(path, arg));
  return 120;
}

// Prints "uid gid" (as this process sees them) and the owner of `path` when given.
int do_ids(const char* path) {
  printf("%u %u\n", static_cast<unsigned>(getuid()), static_cast<unsigned>(getgid()));
  if (*path) {
    struct stat st;
    if (stat(path, &st) != 0) return result(-1);
    printf("%u %u\n", static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_gid));
  }
  fflush(stdout);
  return 0;
}

// Names itself (comm) and sleeps, so that a test can find it in /proc and read its host ids.
int do_named_sleep(const char* name, int seconds) {
  prctl(PR_SET_NAME, name, 0, 0, 0);
  printf("ready\n");
  fflush(stdout);
  sleep(static_cast<unsigned>(seconds));
  return 0;
}

int do_kill(pid_t pid) { return result(kill(pid, 0)); }

// --- the seccomp allowlist (sandbox_seccomp_test): groups, the default, argument filters

// A watch on `dir`: the names of files created there would be reported.
int do_inotify_watch(const char* dir) {
  int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0) return result(-1);
  int wd = inotify_add_watch(fd, dir, IN_CREATE);
  int r = result(wd);
  close(fd);
  return r;
}

int do_fanotify_init() {
  int fd = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC, O_RDONLY);
  if (fd >= 0) close(fd);
  return result(fd);
}

// personality(persona), then back to the persona we had (when the change took).
int do_personality(const char* hex) {
  unsigned long persona = strtoul(hex, nullptr, 16);
  long before = syscall(SYS_personality, 0xffffffffUL);
  long rc = syscall(SYS_personality, persona);
  int r = result(rc);
  if (rc >= 0 && persona != 0xffffffffUL && before >= 0) syscall(SYS_personality, before);
  return r;
}

// A syscall by number with no arguments (a made-up number, or one no group names).
int do_syscall(const char* number) { return result(syscall(atol(number), 0, 0, 0, 0, 0, 0)); }

// get_mempolicy(2) (NUMA): in no group, so the filter's default answers.
int do_get_mempolicy() {
  int mode = 0;
  return result(syscall(SYS_get_mempolicy, &mode, nullptr, 0UL, nullptr, 0UL));
}

// fchmodat2 (Linux 6.6, syscall 452): newer than libseccomp 2.5.4's table, so in no group.
int do_fchmodat2(const char* path) { return result(syscall(452, AT_FDCWD, path, 0640, AT_SYMLINK_NOFOLLOW)); }

// ioctl(request) on a pipe's read end; the request as given, high bits included.
int do_ioctl_pipe(const char* hex) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return result(-1);
  int pending = 0;
  long rc = syscall(SYS_ioctl, p[0], strtoul(hex, nullptr, 16), &pending);
  int r = result(rc);
  close(p[0]);
  close(p[1]);
  return r;
}

// TIOCGPTN with the request sign-extended, as a caller that passes it through an int does.
int do_ioctl_signext() {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return result(-1);
  unsigned int n = 0;
  unsigned long request = static_cast<unsigned long>(static_cast<long>(static_cast<int>(TIOCGPTN)));
  long rc = syscall(SYS_ioctl, master, request, &n);
  int r = result(rc);
  close(master);
  return r;
}

void* thread_main(void*) { return nullptr; }

// pthread_create: glibc tries clone3 (ENOSYS in the sandbox) and falls back to clone(CLONE_THREAD).
int do_thread() {
  pthread_t t;
  int err = pthread_create(&t, nullptr, thread_main, nullptr);
  if (err != 0) return err < 120 ? err : 119;
  pthread_join(t, nullptr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 120;
  const std::string action = argv[1];
  const char* arg = argc > 2 ? argv[2] : "";
  if (action == "true") return 0;
  if (action == "pid") return getpid() == 1 ? 0 : 1;
  if (action == "ptrace") return do_ptrace();
  if (action == "process_vm_readv") return do_process_vm_readv();
  if (action == "io_uring_setup") return do_io_uring();
  if (action == "unshare") return result(unshare(CLONE_NEWUTS));
  if (action == "mount") return do_mount();
  if (action == "x32") return do_x32();
  if (action == "clone_newuser") return do_clone_flags(CLONE_NEWUSER);
  if (action == "clone_newnet") return do_clone_flags(CLONE_NEWNET);
  if (action == "clone_plain") return do_clone_flags(0);
  if (action == "clone3") return do_clone3();
  if (action == "fork") return do_clone_flags(0);
  if (action == "socket_inet") return do_socket(AF_INET, SOCK_STREAM);
  if (action == "socket_inet6_udp") return do_socket(AF_INET6, SOCK_DGRAM);
  if (action == "socket_netlink") return do_socket(AF_NETLINK, SOCK_RAW);
  if (action == "socket_unix") return do_socket(AF_UNIX, SOCK_STREAM);
  if (action == "socketpair_unix") return do_socketpair(AF_UNIX);
  if (action == "socketpair_inet") return do_socketpair(AF_INET);
  if (action == "socketpair_unix_dgram") return do_socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC);
  if (action == "socketpair_unix_seqpacket") return do_socketpair(AF_UNIX, SOCK_SEQPACKET);
  if (action == "bpf") return do_bpf();
  if (action == "keyctl") return do_keyctl();
  if (action == "tiocsti") return do_tiocsti(0);
  if (action == "tiocsti_high") return do_tiocsti(1UL << 32);
  if (action == "read") return do_read(arg);
  if (action == "write") return do_write(arg);
  if (action == "link") return argc > 3 ? do_link(argv[2], argv[3]) : 120;
  if (action == "fds") return do_fds();
  if (action == "env") return do_env();
  if (action == "forkbomb") return do_forkbomb(atoi(arg));
  if (action == "membomb") return do_membomb(atol(arg));
  if (action == "spin") return do_spin(atof(arg));
  if (action == "grandchild") return do_grandchild();
  if (action == "sleep") return do_sleep(atoi(arg));
  if (action == "privileges") return do_privileges();
  if (action == "kill") return do_kill(static_cast<pid_t>(atoi(arg)));
  if (action == "chmod" || action == "chown_self" || action == "utimensat" || action == "setxattr" ||
      action == "truncate" || action == "rename")
    return argc > 2 ? do_metadata(action, argv[2], argc > 3 ? argv[3] : "") : 120;
  if (action == "ids") return do_ids(arg);
  if (action == "named_sleep") return argc > 3 ? do_named_sleep(argv[2], atoi(argv[3])) : 120;
  if (action == "inotify_init1") return do_inotify_watch(".");
  if (action == "inotify_watch") return do_inotify_watch(arg);
  if (action == "fanotify_init") return do_fanotify_init();
  if (action == "personality") return do_personality(arg);
  if (action == "syscall") return do_syscall(arg);
  if (action == "get_mempolicy") return do_get_mempolicy();
  if (action == "fchmodat2") return do_fchmodat2(arg);
  if (action == "mkdir") return result(mkdir(arg, 0755));
  if (action == "ioctl_pipe") return do_ioctl_pipe(arg);
  if (action == "ioctl_signext") return do_ioctl_signext();
  if (action == "thread") return do_thread();
  return 120;
}
