/* A minimal launcher doing the sandbox recipe by hand: the peer "a small C
 * launcher" of the spawn benchmark. Namespaces (user, pid, net, ipc, uts,
 * mount), id maps, setsid, pdeathsig, close fds, rlimits, no_new_privs,
 * Landlock (fs rights, TCP denied, scopes), a given seccomp BPF program, exec.
 * No capability dropping, no cgroup, no error reporting beyond the exit code:
 * the least a careful person would write. Linux x86-64; kernel >= 6.12 for the
 * Landlock scopes. */
#ifndef SUBAGENT_BENCH_MIN_LAUNCHER_H
#define SUBAGENT_BENCH_MIN_LAUNCHER_H

#include <linux/filter.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct min_launch {
  const char *exe;
  char *const *argv;
  char *const *envp;
  const char *workspace;         /* chdir target */
  const char *const *read_paths; /* Landlock: read files and directories beneath */
  int n_read;
  const char *const *exec_paths; /* Landlock: execute and read beneath */
  int n_exec;
  const struct sock_fprog *filter; /* loaded last, just before execve */
  int stdio[3];                    /* become the child's 0, 1, 2 */
  unsigned long as_bytes, cpu_seconds, open_files;
};

/* Returns the child's pid (in the caller's PID namespace) or -1 with errno set.
 */
pid_t min_launch_start(const struct min_launch *cfg);

#ifdef __cplusplus
}
#endif

#endif
