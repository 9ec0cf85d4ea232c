// Raw kernel ABI used by the sandbox: every syscall glibc 2.36 does not wrap, and the constants
// Debian 12's linux-libc-dev 6.1 headers lack. Everything here is async-signal-safe (a single
// syscall, no allocation) and may be called between fork and exec.
// Errors: as the kernel's: -1 with errno (raw syscall convention), never exceptions.
#pragma once

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

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

inline int landlock_create_ruleset(const LandlockRulesetAttr* attr, std::size_t size, unsigned flags) noexcept {
  return static_cast<int>(::syscall(SYS_landlock_create_ruleset, attr, size, flags));
}
inline int landlock_add_rule(int ruleset_fd, int rule_type, const void* attr) noexcept {
  return static_cast<int>(::syscall(SYS_landlock_add_rule, ruleset_fd, rule_type, attr, 0U));
}
inline int landlock_restrict_self(int ruleset_fd) noexcept {
  return static_cast<int>(::syscall(SYS_landlock_restrict_self, ruleset_fd, 0U));
}
// Highest Landlock ABI the kernel offers, or 0 when Landlock is absent or disabled.
inline int landlock_abi() noexcept {
  int abi = landlock_create_ruleset(nullptr, 0, kLandlockCreateRulesetVersion);
  return abi < 0 ? 0 : abi;
}

inline long clone3(struct clone_args* args) noexcept { return ::syscall(SYS_clone3, args, sizeof(*args)); }
// Legacy clone without a new stack: the child continues like after fork(). x86_64 argument order
// is (flags, stack, parent_tid, child_tid, tls); with CLONE_PIDFD the pidfd lands in *parent_tid.
inline long clone_legacy(unsigned long flags, int* pidfd) noexcept {
  return ::syscall(SYS_clone, flags, nullptr, pidfd, nullptr, nullptr);
}
inline int pidfd_open(pid_t pid) noexcept { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U)); }
inline int close_range(unsigned first, unsigned last, unsigned flags) noexcept {
  return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}
inline int seccomp_set_filter(const struct sock_fprog* prog) noexcept {
  return static_cast<int>(::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0U, prog));
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
// A detached copy of the mount tree at `path` (relative to `dirfd`), close-on-exec.
inline int open_tree_clone(int dirfd, const char* path, unsigned extra_flags) noexcept {
  return static_cast<int>(
      ::syscall(SYS_open_tree, dirfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | extra_flags));
}
// Attaches the detached tree `from_fd` at `to_path` (relative to `to_dirfd`).
inline int move_mount_fd(int from_fd, int to_dirfd, const char* to_path) noexcept {
  return static_cast<int>(::syscall(SYS_move_mount, from_fd, "", to_dirfd, to_path, MOVE_MOUNT_F_EMPTY_PATH));
}
inline int mount_setattr(int dirfd, const char* path, unsigned flags, const MountAttr* attr) noexcept {
  return static_cast<int>(::syscall(SYS_mount_setattr, dirfd, path, flags, attr, sizeof *attr));
}
// A new, detached tmpfs for the child's root: mode 0755, 64 KiB, 4096 inodes, nosuid, nodev.
// Created by whoever will be able to write it (the parent as root, else the child).
inline int make_root_tmpfs() noexcept {
  constexpr unsigned kFsopenCloexec = 1, kSetString = 1, kCmdCreate = 6;
  constexpr unsigned kFsmountCloexec = 1, kAttrNosuid = 0x2, kAttrNodev = 0x4;
  int fs = static_cast<int>(::syscall(SYS_fsopen, "tmpfs", kFsopenCloexec));
  if (fs < 0) return -1;
  int mnt = -1;
  if (::syscall(SYS_fsconfig, fs, kSetString, "mode", "0755", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kSetString, "size", "64k", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kSetString, "nr_inodes", "4096", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kCmdCreate, nullptr, nullptr, 0) == 0)
    mnt = static_cast<int>(::syscall(SYS_fsmount, fs, kFsmountCloexec, kAttrNosuid | kAttrNodev));
  int err = errno;
  ::close(fs);
  errno = err;
  return mnt;
}
// The child's private home: a new, detached tmpfs, mode 0700 and owned by uid:gid (ids of the
// caller's user namespace), nosuid, nodev, noexec; writable up to `size` ("256m"), read-only when
// `size` is null. Its pages are charged to the memory cgroup of whoever writes them.
inline int make_home_tmpfs(unsigned uid, unsigned gid, const char* size) noexcept {
  const bool read_only = size == nullptr;
  constexpr unsigned kFsopenCloexec = 1, kSetString = 1, kCmdCreate = 6, kFsmountCloexec = 1;
  constexpr unsigned kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4, kAttrNoexec = 0x8;
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
  int fs = static_cast<int>(::syscall(SYS_fsopen, "tmpfs", kFsopenCloexec));
  if (fs < 0) return -1;
  int mnt = -1;
  if (::syscall(SYS_fsconfig, fs, kSetString, "mode", "0700", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kSetString, "uid", uid_text, 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kSetString, "gid", gid_text, 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kSetString, "size", read_only ? "64k" : size, 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kSetString, "nr_inodes", read_only ? "16" : "16384", 0) == 0 &&
      ::syscall(SYS_fsconfig, fs, kCmdCreate, nullptr, nullptr, 0) == 0)
    mnt = static_cast<int>(::syscall(SYS_fsmount, fs, kFsmountCloexec,
                                     kAttrNosuid | kAttrNodev | kAttrNoexec | (read_only ? kAttrRdonly : 0)));
  int err = errno;
  ::close(fs);
  errno = err;
  return mnt;
}

// A new, detached procfs of the calling process's PID namespace: read-only, nosuid, nodev,
// noexec. The kernel refuses it (EPERM) unless a procfs it could replace is fully visible in the
// caller's mount namespace, so it must be made before the host's tree is detached.
inline int make_proc_mount() noexcept {
  constexpr unsigned kFsopenCloexec = 1, kCmdCreate = 6, kFsmountCloexec = 1;
  constexpr unsigned kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4, kAttrNoexec = 0x8;
  int fs = static_cast<int>(::syscall(SYS_fsopen, "proc", kFsopenCloexec));
  if (fs < 0) return -1;
  int mnt = -1;
  if (::syscall(SYS_fsconfig, fs, kCmdCreate, nullptr, nullptr, 0) == 0)
    mnt = static_cast<int>(
        ::syscall(SYS_fsmount, fs, kFsmountCloexec, kAttrRdonly | kAttrNosuid | kAttrNodev | kAttrNoexec));
  int err = errno;
  ::close(fs);
  errno = err;
  return mnt;
}
inline int pivot_root(const char* new_root, const char* put_old) noexcept {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

inline int capset_zero() noexcept {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return static_cast<int>(::syscall(SYS_capset, &header, data));
}

}  // namespace sandbox::sys
