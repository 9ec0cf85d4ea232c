/* A minimal launcher doing the supervisor's sandbox recipe by hand: the peer "a small C launcher"
 * of the spawn benchmark. Written independently of sandbox/ (the classic mount calls where they
 * do, no layer table, no error reporting beyond the exit code): the least a careful person would
 * write for the same result.
 *
 * The recipe, in the order the supervisor's launch takes it:
 *  - parent: per-launch cgroup v1 directories (pids, memory, cpu) with their limits, the `tasks`
 *    files opened before clone; clone into new user, pid, net, ipc, uts and mount namespaces;
 *    uid/gid maps; release.
 *  - child (pid 1 of its namespace): joins the cgroups by writing "0" into the tasks files, default
 *    signal dispositions, pdeathsig; a read-only tmpfs root holding read-only clones of the given
 *    paths, the given symlinks, a procfs of its own and an empty read-only home, then pivot_root and
 *    the host's tree detached; stdio, setsid, every other fd closed; rlimits; securebits, the
 *    bounding set emptied, its ids set, ambient and permitted capabilities cleared; no_new_privs;
 *    chdir; Landlock (the given paths; TCP denied; scopes; rules for its own /proc and home).
 *  - then it forks: the parent stays as init under a filter of its own (forwards signals, reaps,
 *    leaves with the target's status); the target loads the given seccomp program and execs.
 * Linux x86-64; kernel >= 6.12 for the Landlock scopes. */
#ifndef SUBAGENT_BENCH_MIN_LAUNCHER_H
#define SUBAGENT_BENCH_MIN_LAUNCHER_H

#include <linux/filter.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MIN_LAUNCH_MAX_BINDS 32

struct min_launch {
  const char *exe;
  char *const *argv;
  char *const *envp;
  const char *workspace;         /* chdir target */
  const char *const *read_paths; /* Landlock: read files and directories beneath */
  int n_read;
  const char *const *exec_paths; /* Landlock: execute and read beneath */
  int n_exec;
  /* The new root: each bind is a canonical host path, cloned read-only to the same path; each
   * link is a symlink made at links[i] (absolute) with the text link_targets[i]. */
  const char *const *binds;
  int n_binds;
  const char *const *links, *const *link_targets;
  int n_links;
  const char *home;                /* an empty read-only tmpfs here, with a read rule (NULL: none) */
  const struct sock_fprog *filter; /* the target's, loaded last, just before execve */
  int stdio[3];                    /* become the child's 0, 1, 2 */
  unsigned long as_bytes, cpu_seconds, open_files, processes;
  /* Per-launch cgroups (as root): the v1 hierarchy roots, e.g. "/sys/fs/cgroup/pids"; NULL skips
   * one. The directories are made under <root>/subagent-bench-minc/. */
  const char *cgroup_pids, *cgroup_memory, *cgroup_cpu;
  unsigned long memory_bytes, cpu_quota_us; /* per 100 ms period */
};

/* What one launch left to clean up after the child is reaped. */
struct min_launch_state {
  pid_t pid;
  char cgroup_dirs[3][256];
};

/* Starts the child; returns its pid (in the caller's PID namespace) or -1 with errno set. */
pid_t min_launch_start(const struct min_launch *cfg, struct min_launch_state *state);
/* Removes the launch's cgroups; call after the child was reaped. */
void min_launch_cleanup(struct min_launch_state *state);

#ifdef __cplusplus
}
#endif

#endif
