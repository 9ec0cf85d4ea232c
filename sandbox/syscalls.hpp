// Raw kernel ABI used by the sandbox: every syscall glibc 2.36 does not wrap, and the constants
// Debian 12's linux-libc-dev 6.1 headers lack. Everything here is async-signal-safe (a single
// syscall, no allocation) and may be called between fork and exec.
// Errors: in sys::raw the kernel's own (a negative errno, no errno written: what the child calls
// between clone and execve); the functions of sys itself are libc-style (-1 with errno). Never
// exceptions.
#pragma once

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsconfig
#define SYS_fsconfig 431
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#endif
#ifndef PR_CAP_AMBIENT_CLEAR_ALL
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

namespace sandbox::sys {

// Landlock (include/uapi/linux/landlock.h, kernel 6.18). Our own names: the 6.1 header only knows
// ABI 1-2 and its struct landlock_ruleset_attr lacks the net and scope fields.
inline constexpr unsigned kLandlockCreateRulesetVersion = 1U << 0;
inline constexpr int kLandlockRulePathBeneath = 1;
inline constexpr int kLandlockRuleNetPort = 2;

inline constexpr std::uint64_t kFsExecute = 1ULL << 0;
inline constexpr std::uint64_t kFsWriteFile = 1ULL << 1;
inline constexpr std::uint64_t kFsReadFile = 1ULL << 2;
inline constexpr std::uint64_t kFsReadDir = 1ULL << 3;
inline constexpr std::uint64_t kFsRemoveDir = 1ULL << 4;
inline constexpr std::uint64_t kFsRemoveFile = 1ULL << 5;
inline constexpr std::uint64_t kFsMakeChar = 1ULL << 6;
inline constexpr std::uint64_t kFsMakeDir = 1ULL << 7;
inline constexpr std::uint64_t kFsMakeReg = 1ULL << 8;
inline constexpr std::uint64_t kFsMakeSock = 1ULL << 9;
inline constexpr std::uint64_t kFsMakeFifo = 1ULL << 10;
inline constexpr std::uint64_t kFsMakeBlock = 1ULL << 11;
inline constexpr std::uint64_t kFsMakeSym = 1ULL << 12;
inline constexpr std::uint64_t kFsRefer = 1ULL << 13;     // ABI 2
inline constexpr std::uint64_t kFsTruncate = 1ULL << 14;  // ABI 3
inline constexpr std::uint64_t kFsIoctlDev = 1ULL << 15;  // ABI 5

inline constexpr std::uint64_t kNetBindTcp = 1ULL << 0;     // ABI 4
inline constexpr std::uint64_t kNetConnectTcp = 1ULL << 1;  // ABI 4

inline constexpr std::uint64_t kScopeAbstractUnixSocket = 1ULL << 0;  // ABI 6
inline constexpr std::uint64_t kScopeSignal = 1ULL << 1;              // ABI 6

struct LandlockRulesetAttr {
  std::uint64_t handled_access_fs;
  std::uint64_t handled_access_net;
  std::uint64_t scoped;
};

struct __attribute__((packed)) LandlockPathBeneathAttr {
  std::uint64_t allowed_access;
  std::int32_t parent_fd;
};

// One system call, straight to the kernel: its result as the kernel gives it (a negative errno on
// failure). Unlike libc's wrappers it writes no errno: errno is thread-local storage of the thread
// that cloned, which a child cloned with CLONE_VM (launch.cpp) shares with that thread.
#if defined(__x86_64__)
inline long raw_syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) noexcept {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
inline long raw_syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) noexcept {
  register long x8 asm("x8") = nr;
  register long x0 asm("x0") = a;
  register long x1 asm("x1") = b;
  register long x2 asm("x2") = c;
  register long x3 asm("x3") = d;
  register long x4 asm("x4") = e;
  register long x5 asm("x5") = f;
  asm volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory", "cc");
  return x0;
}
#else
// Elsewhere through libc (errno is written): launch.cpp then never clones with CLONE_VM.
inline long raw_syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) noexcept {
  const int saved = errno;
  long r = ::syscall(nr, a, b, c, d, e, f);
  if (r == -1) r = -errno;
  errno = saved;
  return r;
}
#endif

// Casts for raw_syscall's arguments.
template <class T>
inline long arg(T v) noexcept {
  if constexpr (std::is_pointer_v<T>)
    return reinterpret_cast<long>(v);
  else
    return static_cast<long>(v);
}
inline long arg(std::nullptr_t) noexcept { return 0; }

template <class... A>
inline long call(long nr, A... a) noexcept {
  return raw_syscall(nr, arg(a)...);
}

// libc's convention from the kernel's: -1 with errno.
inline long with_errno(long r) noexcept {
  if (r < 0 && r > -4096) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

// Mount API (Linux 5.2; mount_setattr 5.12, id-mapped mounts of ext4/xfs/btrfs 5.12, tmpfs 6.3).
// glibc 2.36 declares open_tree and move_mount only with <linux/mount.h>-clashing headers, so all
// three go through syscall(); struct mount_attr is our own copy of the 5.12 layout.
struct MountAttr {
  std::uint64_t attr_set;
  std::uint64_t attr_clr;
  std::uint64_t propagation;
  std::uint64_t userns_fd;
};

// The kernel's convention (a negative errno), no errno written: what the child calls between clone
// and execve (child.cpp). The functions of the same name in sys, below, are libc-style.
namespace raw {

inline int landlock_create_ruleset(const LandlockRulesetAttr* attr, std::size_t size, unsigned flags) noexcept {
  return static_cast<int>(call(SYS_landlock_create_ruleset, attr, size, flags));
}
inline int landlock_add_rule(int ruleset_fd, int rule_type, const void* attr) noexcept {
  return static_cast<int>(call(SYS_landlock_add_rule, ruleset_fd, rule_type, attr, 0U));
}
inline int landlock_restrict_self(int ruleset_fd) noexcept {
  return static_cast<int>(call(SYS_landlock_restrict_self, ruleset_fd, 0U));
}
inline long clone3(struct clone_args* args) noexcept { return call(SYS_clone3, args, sizeof(*args)); }
// Legacy clone without a new stack: the child continues like after fork(). x86_64 argument order
// is (flags, stack, parent_tid, child_tid, tls); with CLONE_PIDFD the pidfd lands in *parent_tid.
inline long clone_legacy(unsigned long flags, int* pidfd) noexcept {
  return call(SYS_clone, flags, nullptr, pidfd, nullptr, nullptr);
}
inline int close_range(unsigned first, unsigned last, unsigned flags) noexcept {
  return static_cast<int>(call(SYS_close_range, first, last, flags));
}
inline int seccomp_set_filter(const struct sock_fprog* prog) noexcept {
  return static_cast<int>(call(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0U, prog));
}
// A detached copy of the mount tree at `path` (relative to `dirfd`), close-on-exec.
inline int open_tree_clone(int dirfd, const char* path, unsigned extra_flags) noexcept {
  return static_cast<int>(
      call(SYS_open_tree, dirfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | extra_flags));
}
// Attaches the detached tree `from_fd` at `to_path` (relative to `to_dirfd`).
inline int move_mount_fd(int from_fd, int to_dirfd, const char* to_path) noexcept {
  return static_cast<int>(call(SYS_move_mount, from_fd, "", to_dirfd, to_path, MOVE_MOUNT_F_EMPTY_PATH));
}
inline int mount_setattr(int dirfd, const char* path, unsigned flags, const MountAttr* attr) noexcept {
  return static_cast<int>(call(SYS_mount_setattr, dirfd, path, flags, attr, sizeof *attr));
}
// Configures and mounts the filesystem context `fs` (its "key", "value" string pairs, then create),
// detached and close-on-exec with `attrs`; closes `fs`. The new mount's fd, or a negative errno.
inline int mount_configured(int fs, const char* const* pairs, int count, unsigned attrs) noexcept {
  constexpr unsigned kSetString = 1, kCmdCreate = 6, kFsmountCloexec = 1;
  if (fs < 0) return fs;
  long r = 0;
  for (int i = 0; r == 0 && i + 1 < count; i += 2) r = call(SYS_fsconfig, fs, kSetString, pairs[i], pairs[i + 1], 0);
  if (r == 0) r = call(SYS_fsconfig, fs, kCmdCreate, nullptr, nullptr, 0);
  if (r == 0) r = call(SYS_fsmount, fs, kFsmountCloexec, attrs);
  call(SYS_close, fs);
  return static_cast<int>(r);
}
inline constexpr unsigned kFsopenCloexec = 1;
inline constexpr unsigned kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4, kAttrNoexec = 0x8;
// A new, detached tmpfs for the child's root: mode 0755, 64 KiB, 4096 inodes, nosuid, nodev.
// Created by whoever will be able to write it (the parent as root, else the child).
inline int make_root_tmpfs() noexcept {
  const char* const pairs[] = {"mode", "0755", "size", "64k", "nr_inodes", "4096"};
  return mount_configured(static_cast<int>(call(SYS_fsopen, "tmpfs", kFsopenCloexec)), pairs, 6,
                          kAttrNosuid | kAttrNodev);
}
// The child's private home: a new, detached tmpfs, mode 0700 and owned by uid:gid (ids of the
// caller's user namespace), nosuid, nodev, noexec; writable up to `size` ("256m"), read-only when
// `size` is null. Its pages are charged to the memory cgroup of whoever writes them.
inline int make_home_tmpfs(unsigned uid, unsigned gid, const char* size) noexcept {
  const bool read_only = size == nullptr;
  auto decimal = [](unsigned v, char(&out)[12]) noexcept {
    char tmp[12];
    int n = 0;
    do {
      tmp[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    for (int i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
    out[n] = '\0';
  };
  char uid_text[12], gid_text[12];
  decimal(uid, uid_text);
  decimal(gid, gid_text);
  const char* const pairs[] = {"mode",      "0700",
                               "uid",       uid_text,
                               "gid",       gid_text,
                               "size",      read_only ? "64k" : size,
                               "nr_inodes", read_only ? "16" : "16384"};
  return mount_configured(static_cast<int>(call(SYS_fsopen, "tmpfs", kFsopenCloexec)), pairs, 10,
                          kAttrNosuid | kAttrNodev | kAttrNoexec | (read_only ? kAttrRdonly : 0));
}
// A new, detached procfs of the calling process's PID namespace: read-only, nosuid, nodev,
// noexec. The kernel refuses it (EPERM) unless a procfs it could replace is fully visible in the
// caller's mount namespace, so it must be made before the host's tree is detached.
inline int make_proc_mount() noexcept {
  return mount_configured(static_cast<int>(call(SYS_fsopen, "proc", kFsopenCloexec)), nullptr, 0,
                          kAttrRdonly | kAttrNosuid | kAttrNodev | kAttrNoexec);
}
inline int pivot_root(const char* new_root, const char* put_old) noexcept {
  return static_cast<int>(call(SYS_pivot_root, new_root, put_old));
}
// Drops every capability of the calling thread (capset with all three sets empty).
inline int capset_zero() noexcept {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return static_cast<int>(call(SYS_capset, &header, data));
}

}  // namespace raw

// The same, libc-style (-1 with errno), for the supervisor's own threads.
inline int landlock_create_ruleset(const LandlockRulesetAttr* attr, std::size_t size, unsigned flags) noexcept {
  return static_cast<int>(with_errno(raw::landlock_create_ruleset(attr, size, flags)));
}
inline int landlock_add_rule(int ruleset_fd, int rule_type, const void* attr) noexcept {
  return static_cast<int>(with_errno(raw::landlock_add_rule(ruleset_fd, rule_type, attr)));
}
// Highest Landlock ABI the kernel offers, or 0 when Landlock is absent or disabled.
inline int landlock_abi() noexcept {
  int abi = raw::landlock_create_ruleset(nullptr, 0, kLandlockCreateRulesetVersion);
  return abi < 0 ? 0 : abi;
}
inline long clone_legacy(unsigned long flags, int* pidfd) noexcept {
  return with_errno(raw::clone_legacy(flags, pidfd));
}
inline int pidfd_open(pid_t pid) noexcept { return static_cast<int>(with_errno(call(SYS_pidfd_open, pid, 0U))); }
inline int close_range(unsigned first, unsigned last, unsigned flags) noexcept {
  return static_cast<int>(with_errno(raw::close_range(first, last, flags)));
}
inline int open_tree_clone(int dirfd, const char* path, unsigned extra_flags) noexcept {
  return static_cast<int>(with_errno(raw::open_tree_clone(dirfd, path, extra_flags)));
}
inline int mount_setattr(int dirfd, const char* path, unsigned flags, const MountAttr* attr) noexcept {
  return static_cast<int>(with_errno(raw::mount_setattr(dirfd, path, flags, attr)));
}
inline int make_root_tmpfs() noexcept { return static_cast<int>(with_errno(raw::make_root_tmpfs())); }
inline int make_proc_mount() noexcept { return static_cast<int>(with_errno(raw::make_proc_mount())); }

}  // namespace sandbox::sys
