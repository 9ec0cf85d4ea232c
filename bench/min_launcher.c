/* See min_launcher.h. Written for the benchmark only; the supervisor never uses
 * it. */
#define _GNU_SOURCE
#include "min_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LL_CREATE_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
#define LL_FS_ALL_ABI5 ((1ULL << 16) - 1)
#define LL_FS_FILE_ONLY ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))
#define LL_NET_TCP ((1ULL << 0) | (1ULL << 1))
#define LL_SCOPES ((1ULL << 0) | (1ULL << 1))

struct ll_ruleset_attr {
  uint64_t fs, net, scoped;
};
struct __attribute__((packed)) ll_path_beneath {
  uint64_t allowed;
  int32_t fd;
};

static int add_path(int ruleset, const char *path, uint64_t rights) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return -1;
  }
  struct ll_path_beneath rule = {S_ISDIR(st.st_mode) ? rights : (rights & LL_FS_FILE_ONLY), fd};
  int rc = (int)syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &rule, 0U);
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

static void child(const struct min_launch *cfg, int ruleset, int sync_fd) {
  char go;
  if (read(sync_fd, &go, 1) != 1) _exit(120);
  for (int i = 0; i < 3; ++i)
    if (dup2(cfg->stdio[i], i) < 0) _exit(121);
  if (setsid() < 0) _exit(122);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(123);
  struct rlimit as = {cfg->as_bytes, cfg->as_bytes}, cpu = {cfg->cpu_seconds, cfg->cpu_seconds + 1},
                nofile = {cfg->open_files, cfg->open_files}, zero = {0, 0};
  if (setrlimit(RLIMIT_AS, &as) || setrlimit(RLIMIT_CPU, &cpu) || setrlimit(RLIMIT_NOFILE, &nofile) ||
      setrlimit(RLIMIT_FSIZE, &zero) || setrlimit(RLIMIT_CORE, &zero))
    _exit(124);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(125);
  if (chdir(cfg->workspace) != 0) _exit(126);
  if (syscall(SYS_landlock_restrict_self, ruleset, 0U) != 0) _exit(127);
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) _exit(128);
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, cfg->filter) != 0) _exit(129);
  execve(cfg->exe, cfg->argv, cfg->envp);
  _exit(130);
}

pid_t min_launch_start(const struct min_launch *cfg) {
  int ruleset = build_ruleset(cfg);
  if (ruleset < 0) return -1;
  int sync[2];
  if (pipe2(sync, O_CLOEXEC) != 0) {
    close(ruleset);
    return -1;
  }
  const unsigned long flags =
      CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS | SIGCHLD;
  /* The raw clone syscall with no stack behaves like fork, with namespace
   * flags. */
  long pid = syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
  if (pid == 0) child(cfg, ruleset, sync[0]);
  int saved = errno;
  close(sync[0]);
  close(ruleset);
  if (pid < 0) {
    close(sync[1]);
    errno = saved;
    return -1;
  }
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
}
