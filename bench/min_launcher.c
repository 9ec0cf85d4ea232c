/* See min_launcher.h. Written for the benchmark only; the supervisor never uses it. */
#define _GNU_SOURCE
#include "min_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_ALL_ABI5 ((1ULL << 16) - 1)
#define LL_FS_FILE_ONLY ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))
#define LL_NET_TCP ((1ULL << 0) | (1ULL << 1))
#define LL_SCOPES ((1ULL << 0) | (1ULL << 1))

#define NEW_ROOT "/tmp"

struct ll_ruleset_attr {
  uint64_t fs, net, scoped;
};
struct __attribute__((packed)) ll_path_beneath {
  uint64_t allowed;
  int32_t fd;
};

static int add_rule_fd(int ruleset, int fd, uint64_t rights) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  struct ll_path_beneath rule = {S_ISDIR(st.st_mode) ? rights : (rights & LL_FS_FILE_ONLY), fd};
  return (int)syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0U);
}

static int add_path(int ruleset, const char *path, uint64_t rights) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  int rc = add_rule_fd(ruleset, fd, rights);
  close(fd);
  return rc;
}

static int build_ruleset(const struct min_launch *cfg) {
  struct ll_ruleset_attr attr = {LL_FS_ALL_ABI5, LL_NET_TCP, LL_SCOPES};
  int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0U);
  if (ruleset < 0) return -1;
  for (int i = 0; i < cfg->n_read; ++i)
    if (add_path(ruleset, cfg->read_paths[i], LL_FS_READ_FILE | LL_FS_READ_DIR) != 0) goto fail;
  for (int i = 0; i < cfg->n_exec; ++i)
    if (add_path(ruleset, cfg->exec_paths[i], LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR) != 0) goto fail;
  return ruleset;
fail:
  close(ruleset);
  return -1;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* ---- cgroups (parent, before clone) ---- */

static int make_cgroup(const char *root, const char *limit_file, unsigned long limit, const char *limit_file2,
                       unsigned long limit2, char *dir, size_t dir_size, int *tasks_fd) {
  char path[320], value[32];
  snprintf(path, sizeof path, "%s/subagent-bench-minc", root);
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return -1;
  static unsigned counter;
  snprintf(dir, dir_size, "%s/subagent-bench-minc/%d-%u", root, (int)getpid(), ++counter);
  if (mkdir(dir, 0700) != 0) return -1;
  const char *files[2] = {limit_file, limit_file2};
  unsigned long values[2] = {limit, limit2};
  for (int i = 0; i < 2; ++i) {
    if (!files[i]) continue;
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    snprintf(value, sizeof value, "%lu", values[i]);
    if (write_file(path, value) != 0) return -1;
  }
  snprintf(path, sizeof path, "%s/tasks", dir);
  *tasks_fd = open(path, O_WRONLY | O_CLOEXEC);
  return *tasks_fd < 0 ? -1 : 0;
}

void min_launch_cleanup(struct min_launch_state *state) {
  for (int i = 0; i < 3; ++i) {
    if (!state->cgroup_dirs[i][0]) continue;
    /* The namespace's last processes may still be leaving: retry for a little while. */
    for (int tries = 0; tries < 200 && rmdir(state->cgroup_dirs[i]) != 0 && errno == EBUSY; ++tries) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    state->cgroup_dirs[i][0] = 0;
  }
}

/* ---- child ---- */

/* The init's own filter: what its loop needs (the supervisor's init allows the same seven:
 * restart_syscall after a stop, write for its status record), anything else kills it. */
static const struct sock_filter init_filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    /* each match jumps over the checks after it and the KILL, to the ALLOW */
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigtimedwait, 7, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_wait4, 6, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kill, 5, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 4, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_close, 3, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 2, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_restart_syscall, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

/* mkdir -p of every parent of `path` (absolute, under NEW_ROOT), then the mount point itself. */
static int make_mount_point(const char *path, int is_dir) {
  char buf[512];
  if (snprintf(buf, sizeof buf, NEW_ROOT "%s", path) >= (int)sizeof buf) return -1;
  for (char *p = buf + strlen(NEW_ROOT) + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (is_dir) return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
  int fd = open(buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  return fd < 0 ? -1 : close(fd);
}

/* A read-only clone of `path`, taken before the new root hides anything (the workspace may lie
 * under NEW_ROOT on the host). Returns the detached tree, -1 on error, -2 when `path` is absent. */
static int clone_read_only(const char *path, int *is_dir) {
  struct stat st;
  if (stat(path, &st) != 0) return errno == ENOENT ? -2 : -1;
  *is_dir = S_ISDIR(st.st_mode);
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (tree < 0) return -1;
  struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &ro, sizeof ro) != 0) {
    close(tree);
    return -1;
  }
  return tree;
}

static int place(int tree, const char *path, int is_dir) {
  char dest[512];
  snprintf(dest, sizeof dest, NEW_ROOT "%s", path);
  int rc = make_mount_point(path, is_dir);
  if (rc == 0) rc = (int)syscall(SYS_move_mount, tree, "", AT_FDCWD, dest, MOVE_MOUNT_F_EMPTY_PATH);
  close(tree);
  return rc;
}

static void build_root(const struct min_launch *cfg) {
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) _exit(131);
  int trees[MIN_LAUNCH_MAX_BINDS], dirs[MIN_LAUNCH_MAX_BINDS];
  if (cfg->n_binds > MIN_LAUNCH_MAX_BINDS) _exit(133);
  for (int i = 0; i < cfg->n_binds; ++i)
    if ((trees[i] = clone_read_only(cfg->binds[i], &dirs[i])) == -1) _exit(133);
  if (mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k,nr_inodes=4096") != 0) _exit(132);
  for (int i = 0; i < cfg->n_binds; ++i)
    if (trees[i] >= 0 && place(trees[i], cfg->binds[i], dirs[i]) != 0) _exit(133);
  char path[512];
  for (int i = 0; i < cfg->n_links; ++i) {
    snprintf(path, sizeof path, NEW_ROOT "%s", cfg->links[i]);
    if (symlink(cfg->link_targets[i], path) != 0 && errno != EEXIST) _exit(134);
  }
  if (make_mount_point("/proc", 1) != 0 ||
      mount("proc", NEW_ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL) != 0)
    _exit(135);
  if (cfg->home) {
    snprintf(path, sizeof path, NEW_ROOT "%s", cfg->home);
    if (make_mount_point(cfg->home, 1) != 0 ||
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "mode=0700,size=16k") != 0)
      _exit(136);
  }
  if (chdir(NEW_ROOT) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0)
    _exit(137);
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) _exit(138);
}

static void drop_capabilities(void) {
  const unsigned long secbits = 0xef; /* NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE + locks */
  if (prctl(PR_SET_SECUREBITS, secbits, 0, 0, 0) != 0) _exit(140);
  for (unsigned long cap = 0; cap < 64; ++cap) {
    int in_set = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (in_set < 0) break;
    if (in_set == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) _exit(141);
  }
}

static void clear_capabilities(void) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 || syscall(SYS_capset, &header, data) != 0)
    _exit(142);
}

static void run_init(pid_t target, const sigset_t *waited) {
  struct sock_fprog prog = {sizeof init_filter / sizeof init_filter[0], (struct sock_filter *)init_filter};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    syscall(SYS_kill, target, SIGKILL);
    syscall(SYS_exit_group, 143);
  }
  for (int fd = 0; fd < 3; ++fd) syscall(SYS_close, fd);
  for (;;) {
    siginfo_t info;
    long sig = syscall(SYS_rt_sigtimedwait, waited, &info, NULL, NSIG / 8);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      syscall(SYS_kill, target, sig);
      continue;
    }
    int status = 0;
    long reaped;
    while ((reaped = syscall(SYS_wait4, -1, &status, WNOHANG, NULL)) > 0)
      if (reaped == target) syscall(SYS_exit_group, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
}

static void child(const struct min_launch *cfg, int ruleset, int sync_fd, const int *tasks, int n_tasks) {
  for (int i = 0; i < n_tasks; ++i)
    if (write(tasks[i], "0", 1) != 1) _exit(119);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(123);
  char go;
  if (read(sync_fd, &go, 1) != 1) _exit(120);
  build_root(cfg);
  for (int i = 0; i < 3; ++i)
    if (dup2(cfg->stdio[i], i) < 0) _exit(121);
  if (setsid() < 0) _exit(122);
  /* The ruleset stays open (moved to 3) until it is applied; everything else goes. */
  if (dup2(ruleset, 3) != 3 || syscall(SYS_close_range, 4U, ~0U, 0U) != 0) _exit(128);
  ruleset = 3;
  struct rlimit as = {cfg->as_bytes, cfg->as_bytes}, cpu = {cfg->cpu_seconds, cfg->cpu_seconds + 1},
                nofile = {cfg->open_files, cfg->open_files}, nproc = {cfg->processes, cfg->processes}, zero = {0, 0};
  if (setrlimit(RLIMIT_AS, &as) || setrlimit(RLIMIT_CPU, &cpu) || setrlimit(RLIMIT_NOFILE, &nofile) ||
      setrlimit(RLIMIT_NPROC, &nproc) || setrlimit(RLIMIT_FSIZE, &zero) || setrlimit(RLIMIT_CORE, &zero))
    _exit(124);
  drop_capabilities();
  const long uid = (long)geteuid(), gid = (long)getegid();
  if (syscall(SYS_setresgid, gid, gid, gid) != 0 || syscall(SYS_setresuid, uid, uid, uid) != 0) _exit(144);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(123);
  clear_capabilities();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(125);
  if (chdir(cfg->workspace) != 0) _exit(126);
  /* The private procfs and home are file systems the parent never saw: their rules come here. */
  if (add_path(ruleset, "/proc", LL_FS_READ_FILE | LL_FS_READ_DIR) != 0) _exit(127);
  if (cfg->home && add_path(ruleset, cfg->home, LL_FS_READ_FILE | LL_FS_READ_DIR) != 0) _exit(127);
  if (syscall(SYS_landlock_restrict_self, ruleset, 0U) != 0) _exit(127);
  close(ruleset);
  sigset_t waited;
  sigemptyset(&waited);
  int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCHLD};
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i) sigaddset(&waited, forwarded[i]);
  sigprocmask(SIG_BLOCK, &waited, NULL);
  long target = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
  if (target < 0) _exit(145);
  if (target > 0) run_init((pid_t)target, &waited);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(123);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, cfg->filter) != 0) _exit(129);
  execve(cfg->exe, cfg->argv, cfg->envp);
  _exit(130);
}

pid_t min_launch_start(const struct min_launch *cfg, struct min_launch_state *state) {
  memset(state, 0, sizeof *state);
  int tasks[3], n_tasks = 0;
  struct {
    const char *root, *file, *file2;
    unsigned long value, value2;
  } groups[3] = {
      {cfg->cgroup_pids, "pids.max", NULL, cfg->processes, 0},
      {cfg->cgroup_memory, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", cfg->memory_bytes,
       cfg->memory_bytes},
      {cfg->cgroup_cpu, "cpu.cfs_period_us", "cpu.cfs_quota_us", 100000, cfg->cpu_quota_us},
  };
  int ruleset = -1, sync[2] = {-1, -1}, saved = 0;
  for (int i = 0; i < 3; ++i) {
    if (!groups[i].root) continue;
    /* memsw exists only with swap accounting; without it the memory limit alone. */
    const char *file2 = groups[i].file2;
    if (i == 1) {
      char probe[320];
      snprintf(probe, sizeof probe, "%s/memory.memsw.limit_in_bytes", groups[i].root);
      if (access(probe, F_OK) != 0) file2 = NULL;
    }
    if (make_cgroup(groups[i].root, groups[i].file, groups[i].value, file2, groups[i].value2, state->cgroup_dirs[i],
                    sizeof state->cgroup_dirs[i], &tasks[n_tasks]) != 0)
      goto fail;
    ++n_tasks;
  }
  ruleset = build_ruleset(cfg);
  if (ruleset < 0 || pipe2(sync, O_CLOEXEC) != 0) goto fail;
  const unsigned long flags =
      CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS | SIGCHLD;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* no parent handler may run in the child */
  /* The raw clone syscall with no stack behaves like fork, with namespace flags. */
  long pid = syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
  if (pid == 0) child(cfg, ruleset, sync[0], tasks, n_tasks);
  saved = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  for (int i = 0; i < n_tasks; ++i) close(tasks[i]);
  n_tasks = 0;
  close(sync[0]);
  close(ruleset);
  ruleset = -1;
  if (pid < 0) {
    close(sync[1]);
    errno = saved;
    min_launch_cleanup(state);
    return -1;
  }
  state->pid = (pid_t)pid;
  char path[64], map[64];
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
  snprintf(path, sizeof path, "/proc/%ld/uid_map", pid);
  int ok = write_file(path, map) == 0;
  snprintf(path, sizeof path, "/proc/%ld/setgroups", pid);
  ok = ok && write_file(path, "deny") == 0;
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)getegid(), (unsigned)getegid());
  snprintf(path, sizeof path, "/proc/%ld/gid_map", pid);
  ok = ok && write_file(path, map) == 0;
  char go = 1;
  ok = ok && write(sync[1], &go, 1) == 1;
  close(sync[1]);
  if (!ok) {
    saved = errno;
    kill((pid_t)pid, SIGKILL); /* pid > 0 here */
    errno = saved;
    return -1;
  }
  return (pid_t)pid;
fail:
  saved = errno;
  for (int i = 0; i < n_tasks; ++i) close(tasks[i]);
  if (ruleset >= 0) close(ruleset);
  if (sync[0] >= 0) close(sync[0]);
  if (sync[1] >= 0) close(sync[1]);
  min_launch_cleanup(state);
  errno = saved;
  return -1;
}
