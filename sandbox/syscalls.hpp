// Raw kernel ABI used by the sandbox: every syscall glibc 2.36 does not wrap, and the constants
// Debian 12's linux-libc-dev 6.1 headers lack. Everything here is async-signal-safe (a single
// syscall, no allocation) and may be called between fork and exec.
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

inline int landlock_create_ruleset(const LandlockRulesetAttr* attr, std::size_t size,
                                   unsigned flags) noexcept {
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

inline long clone3(struct clone_args* args) noexcept {
  return ::syscall(SYS_clone3, args, sizeof(*args));
}
// Legacy clone without a new stack: the child continues like after fork(). x86_64 argument order
// is (flags, stack, parent_tid, child_tid, tls); with CLONE_PIDFD the pidfd lands in *parent_tid.
inline long clone_legacy(unsigned long flags, int* pidfd) noexcept {
  return ::syscall(SYS_clone, flags, nullptr, pidfd, nullptr, nullptr);
}
inline int pidfd_open(pid_t pid) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U));
}
inline int close_range(unsigned first, unsigned last, unsigned flags) noexcept {
  return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}
inline int seccomp_set_filter(const struct sock_fprog* prog) noexcept {
  return static_cast<int>(::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0U, prog));
}
inline int capset_zero() noexcept {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return static_cast<int>(::syscall(SYS_capset, &header, data));
}

}  // namespace sandbox::sys
