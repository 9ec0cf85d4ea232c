#include "syscall_groups.hpp"

#include <algorithm>
#include <array>

namespace sandbox {
namespace {

using namespace std::string_view_literals;

// What every process needs to run at all, even one that only reads: memory, reading files and
// directories, descriptors, pipes and polling, signals, time, its own ids and limits, threads and
// futexes, the restrictions it may add to itself (seccomp, Landlock), exit, and the execve that
// starts it (the filter is loaded before it). clone, ioctl and personality are argument-filtered
// (seccomp.cpp): here clone makes threads only (CLONE_THREAD), as Go, Java, Node or Python need.
constexpr std::array kBase = {
    // memory
    "brk"sv, "mmap"sv, "munmap"sv, "mprotect"sv, "mremap"sv, "madvise"sv, "msync"sv, "mincore"sv, "mlock"sv, "mlock2"sv,
    "munlock"sv, "membarrier"sv, "memfd_create"sv, "pkey_alloc"sv, "pkey_free"sv, "pkey_mprotect"sv,
    // files: open, read, and write through descriptors already open
    "read"sv, "readv"sv, "pread64"sv, "preadv"sv, "preadv2"sv, "write"sv, "writev"sv, "pwrite64"sv, "pwritev"sv,
    "pwritev2"sv, "open"sv, "openat"sv, "openat2"sv, "close"sv, "close_range"sv, "lseek"sv, "dup"sv, "dup2"sv, "dup3"sv,
    "fcntl"sv, "flock"sv, "ioctl"sv, "fadvise64"sv, "readahead"sv, "sendfile"sv, "splice"sv, "tee"sv,
    "copy_file_range"sv, "umask"sv,
    // names and metadata, read only
    "stat"sv, "fstat"sv, "lstat"sv, "newfstatat"sv, "statx"sv, "statfs"sv, "fstatfs"sv, "getdents"sv, "getdents64"sv,
    "access"sv, "faccessat"sv, "faccessat2"sv, "readlink"sv, "readlinkat"sv, "getcwd"sv, "chdir"sv, "fchdir"sv,
    "getxattr"sv, "lgetxattr"sv, "fgetxattr"sv, "listxattr"sv, "llistxattr"sv, "flistxattr"sv,
    // pipes, polling, event descriptors
    "pipe"sv, "pipe2"sv, "poll"sv, "ppoll"sv, "select"sv, "pselect6"sv, "epoll_create"sv, "epoll_create1"sv,
    "epoll_ctl"sv, "epoll_wait"sv, "epoll_pwait"sv, "epoll_pwait2"sv, "eventfd"sv, "eventfd2"sv, "timerfd_create"sv,
    "timerfd_settime"sv, "timerfd_gettime"sv, "signalfd"sv, "signalfd4"sv,
    // signals and timers
    "rt_sigaction"sv, "rt_sigprocmask"sv, "rt_sigreturn"sv, "rt_sigpending"sv, "rt_sigtimedwait"sv, "rt_sigsuspend"sv,
    "rt_sigqueueinfo"sv, "rt_tgsigqueueinfo"sv, "sigaltstack"sv, "kill"sv, "tgkill"sv, "tkill"sv, "pause"sv, "alarm"sv,
    "getitimer"sv, "setitimer"sv, "timer_create"sv, "timer_settime"sv, "timer_gettime"sv, "timer_getoverrun"sv,
    "timer_delete"sv, "restart_syscall"sv,
    // time
    "clock_gettime"sv, "clock_getres"sv, "clock_nanosleep"sv, "nanosleep"sv, "gettimeofday"sv, "time"sv,
    // the process itself
    "getpid"sv, "getppid"sv, "gettid"sv, "getuid"sv, "geteuid"sv, "getgid"sv, "getegid"sv, "getresuid"sv, "getresgid"sv,
    "getgroups"sv, "getpgid"sv, "getpgrp"sv, "getsid"sv, "getrlimit"sv, "setrlimit"sv, "prlimit64"sv, "getrusage"sv,
    "times"sv, "uname"sv, "sysinfo"sv, "getcpu"sv, "getrandom"sv, "capget"sv, "getpriority"sv, "sched_yield"sv,
    "sched_getaffinity"sv, "sched_getparam"sv, "sched_getscheduler"sv, "sched_getattr"sv, "sched_get_priority_max"sv,
    "sched_get_priority_min"sv, "sched_rr_get_interval"sv, "arch_prctl"sv, "prctl"sv, "personality"sv,
    "set_tid_address"sv, "set_robust_list"sv, "get_robust_list"sv, "rseq"sv, "clone"sv, "futex"sv, "futex_waitv"sv,
    "seccomp"sv, "landlock_create_ruleset"sv, "landlock_add_rule"sv, "landlock_restrict_self"sv, "execve"sv, "exit"sv,
    "exit_group"sv};

// Starting, waiting for and steering other processes; dropping or permuting ids (no capability is
// left to gain any). With this group clone(2) may also make processes (still no namespace flags).
constexpr std::array kProcess = {"fork"sv,
                                 "vfork"sv,
                                 "execveat"sv,
                                 "wait4"sv,
                                 "waitid"sv,
                                 "setpgid"sv,
                                 "setsid"sv,
                                 "pidfd_open"sv,
                                 "pidfd_send_signal"sv,
                                 "setpriority"sv,
                                 "sched_setaffinity"sv,
                                 "sched_setparam"sv,
                                 "sched_setscheduler"sv,
                                 "sched_setattr"sv,
                                 "ioprio_get"sv,
                                 "ioprio_set"sv,
                                 "setuid"sv,
                                 "setgid"sv,
                                 "setreuid"sv,
                                 "setregid"sv,
                                 "setresuid"sv,
                                 "setresgid"sv,
                                 "setgroups"sv,
                                 "setfsuid"sv,
                                 "setfsgid"sv,
                                 "capset"sv};

// Creating, changing and removing files and directories and their metadata. Landlock and the mount
// namespace still decide where; without this group nothing can be changed anywhere, which is why
// the read-only presets do not list it.
constexpr std::array kFilesystemWrite = {
    "creat"sv,     "mkdir"sv,           "mkdirat"sv,      "rmdir"sv,       "unlink"sv,
    "unlinkat"sv,  "rename"sv,          "renameat"sv,     "renameat2"sv,   "link"sv,
    "linkat"sv,    "symlink"sv,         "symlinkat"sv,    "mknod"sv,       "mknodat"sv,
    "truncate"sv,  "ftruncate"sv,       "fallocate"sv,    "fsync"sv,       "fdatasync"sv,
    "syncfs"sv,    "sync_file_range"sv, "chmod"sv,        "fchmod"sv,      "fchmodat"sv,
    "chown"sv,     "fchown"sv,          "lchown"sv,       "fchownat"sv,    "utime"sv,
    "utimes"sv,    "utimensat"sv,       "futimesat"sv,    "setxattr"sv,    "lsetxattr"sv,
    "fsetxattr"sv, "removexattr"sv,     "lremovexattr"sv, "fremovexattr"sv};

// Sockets. With sandbox.network "none" the filter still refuses socket(2) for every family and
// socketpair(2) except AF_UNIX stream and seqpacket pairs, so only connected pairs remain.
constexpr std::array kNetwork = {"socket"sv,     "socketpair"sv, "connect"sv,     "bind"sv,        "listen"sv,
                                 "accept"sv,     "accept4"sv,    "getsockname"sv, "getpeername"sv, "setsockopt"sv,
                                 "getsockopt"sv, "sendto"sv,     "recvfrom"sv,    "sendmsg"sv,     "recvmsg"sv,
                                 "sendmmsg"sv,   "recvmmsg"sv,   "shutdown"sv};

// System V and POSIX message queues, semaphores and shared memory (private to the child's IPC
// namespace when the policy lists "ipc").
constexpr std::array kIpc = {"shmget"sv,          "shmat"sv,      "shmdt"sv,        "shmctl"sv,    "semget"sv,
                             "semop"sv,           "semtimedop"sv, "semctl"sv,       "msgget"sv,    "msgsnd"sv,
                             "msgrcv"sv,          "msgctl"sv,     "mq_open"sv,      "mq_unlink"sv, "mq_timedsend"sv,
                             "mq_timedreceive"sv, "mq_notify"sv,  "mq_getsetattr"sv};

// Watching files: a watch on a directory outside every root reports the names created there, which
// Landlock does not mediate. No shipped preset needs it (tail -f falls back to polling).
constexpr std::array kWatch = {"inotify_init"sv,     "inotify_init1"sv, "inotify_add_watch"sv,
                               "inotify_rm_watch"sv, "fanotify_init"sv, "fanotify_mark"sv};

constexpr std::array kGroups = {
    SyscallGroupDef{
        "base", "what every process needs: memory, reading files, descriptors, signals, time, threads, exit, execve",
        kBase},
    SyscallGroupDef{"process", "new processes (fork, clone without CLONE_THREAD), wait, process groups, dropping ids",
                    kProcess},
    SyscallGroupDef{"filesystem_write", "create, change, remove files and their metadata (Landlock decides where)",
                    kFilesystemWrite},
    SyscallGroupDef{"network", "sockets (with network \"none\": AF_UNIX stream/seqpacket pairs only)", kNetwork},
    SyscallGroupDef{"ipc", "System V and POSIX IPC", kIpc},
    SyscallGroupDef{"watch", "inotify and fanotify", kWatch},
};

// Escapes from the sandbox, the kernel's largest attack surface for unprivileged code, and
// machine-wide state. Explicit EPERM rather than the default ENOSYS: these are known and refused.
constexpr std::array kAlwaysDenied = {"ptrace"sv,
                                      "process_vm_readv"sv,
                                      "process_vm_writev"sv,
                                      "pidfd_getfd"sv,
                                      "kcmp"sv,
                                      "io_uring_setup"sv,
                                      "io_uring_enter"sv,
                                      "io_uring_register"sv,
                                      "bpf"sv,
                                      "perf_event_open"sv,
                                      "userfaultfd"sv,
                                      "keyctl"sv,
                                      "add_key"sv,
                                      "request_key"sv,
                                      "mount"sv,
                                      "umount2"sv,
                                      "fsopen"sv,
                                      "fsconfig"sv,
                                      "fsmount"sv,
                                      "fspick"sv,
                                      "move_mount"sv,
                                      "open_tree"sv,
                                      "mount_setattr"sv,
                                      "unshare"sv,
                                      "setns"sv,
                                      "chroot"sv,
                                      "pivot_root"sv,
                                      "init_module"sv,
                                      "finit_module"sv,
                                      "delete_module"sv,
                                      "kexec_load"sv,
                                      "kexec_file_load"sv,
                                      "reboot"sv,
                                      "swapon"sv,
                                      "swapoff"sv,
                                      "settimeofday"sv,
                                      "clock_settime"sv,
                                      "clock_adjtime"sv,
                                      "adjtimex"sv,
                                      "open_by_handle_at"sv,
                                      "name_to_handle_at"sv,
                                      "acct"sv,
                                      "quotactl"sv,
                                      "quotactl_fd"sv,
                                      "iopl"sv,
                                      "ioperm"sv,
                                      "modify_ldt"sv,
                                      "syslog"sv,
                                      "vhangup"sv,
                                      "uselib"sv,
                                      "sethostname"sv,
                                      "setdomainname"sv,
                                      "lookup_dcookie"sv};

}  // namespace

std::span<const SyscallGroupDef> syscall_group_defs() { return kGroups; }

const SyscallGroupDef* find_syscall_group(std::string_view name) {
  for (const SyscallGroupDef& g : kGroups)
    if (g.name == name) return &g;
  return nullptr;
}

std::span<const std::string_view> always_denied_syscalls() { return kAlwaysDenied; }

std::vector<std::string> effective_syscall_groups(const Policy& policy) {
  std::vector<std::string> out;
  for (const SyscallGroupDef& g : kGroups) {
    bool listed =
        std::find(policy.syscall_groups.begin(), policy.syscall_groups.end(), g.name) != policy.syscall_groups.end();
    if (listed || (g.name == "network" && policy.network != Network::none)) out.emplace_back(g.name);
  }
  return out;
}

}  // namespace sandbox
