#include "seccomp.hpp"

#include <errno.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "sandbox/launch.hpp"
#include "syscalls.hpp"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

namespace sandbox {
namespace {

// Denied with EPERM in every preset: escapes from the sandbox, the kernel's biggest attack surface
// for unprivileged code, and operations on machine-wide state.
constexpr const char* kBaselineDenied[] = {"ptrace",
                                           "process_vm_readv",
                                           "process_vm_writev",
                                           "pidfd_getfd",
                                           "io_uring_setup",
                                           "io_uring_enter",
                                           "io_uring_register",
                                           "bpf",
                                           "perf_event_open",
                                           "userfaultfd",
                                           "keyctl",
                                           "add_key",
                                           "request_key",
                                           "mount",
                                           "umount2",
                                           "fsopen",
                                           "fsconfig",
                                           "fsmount",
                                           "fspick",
                                           "move_mount",
                                           "open_tree",
                                           "mount_setattr",
                                           "unshare",
                                           "setns",
                                           "chroot",
                                           "pivot_root",
                                           "init_module",
                                           "finit_module",
                                           "delete_module",
                                           "kexec_load",
                                           "kexec_file_load",
                                           "reboot",
                                           "swapon",
                                           "swapoff",
                                           "settimeofday",
                                           "clock_settime",
                                           "clock_adjtime",
                                           "adjtimex",
                                           "open_by_handle_at",
                                           "name_to_handle_at",
                                           "acct",
                                           "quotactl",
                                           "iopl",
                                           "ioperm",
                                           "syslog",
                                           "vhangup",
                                           "uselib"};

struct NamedFlag {
  const char* name;
  unsigned long value;
};

// CLONE_NEWTIME (0x80) overlaps the exit-signal byte of clone(2); only clone3 and unshare take it,
// and both are refused whole.
constexpr NamedFlag kNamespaceFlags[] = {
    {"CLONE_NEWUSER", CLONE_NEWUSER},    {"CLONE_NEWPID", CLONE_NEWPID},
    {"CLONE_NEWNET", CLONE_NEWNET},      {"CLONE_NEWNS", CLONE_NEWNS},
    {"CLONE_NEWIPC", CLONE_NEWIPC},      {"CLONE_NEWUTS", CLONE_NEWUTS},
    {"CLONE_NEWCGROUP", CLONE_NEWCGROUP}};

struct Rule {
  std::string syscall;
  std::uint32_t action;
  std::string action_text;
  std::vector<scmp_arg_cmp> args;
  std::string condition;
};

std::vector<Rule> rules_for(const Policy& policy) {
  std::vector<Rule> rules;
  std::set<std::string> whole;  // syscalls denied unconditionally
  auto deny = [&](const std::string& name, int err, const char* err_text) {
    if (!whole.insert(name).second) return;
    rules.push_back({name, SCMP_ACT_ERRNO(err), std::string("errno ") + err_text, {}, ""});
  };
  deny("clone3", ENOSYS, "ENOSYS");  // flags live in memory; libc falls back to clone(2)
  for (const char* name : kBaselineDenied) deny(name, EPERM, "EPERM");
  for (const std::string& name : policy.extra_denied_syscalls) deny(name, EPERM, "EPERM");
  if (policy.network == "none") {
    // Every family, AF_UNIX too: Landlock (ABI 7) does not mediate connect(2) or sendto(2) to a
    // path-bound Unix socket, so an AF_UNIX socket could reach any listener on the filesystem
    // (the network namespace hides only abstract names). Connected pairs remain, below.
    deny("socket", EAFNOSUPPORT, "EAFNOSUPPORT");
  }

  auto conditional = [&](Rule rule) {
    if (whole.count(rule.syscall) == 0) rules.push_back(std::move(rule));
  };
  for (const NamedFlag& flag : kNamespaceFlags)
    conditional({"clone",
                 SCMP_ACT_ERRNO(EPERM),
                 "errno EPERM",
                 {SCMP_A0(SCMP_CMP_MASKED_EQ, flag.value, flag.value)},
                 std::string("flags & ") + flag.name});
  // The request argument is an int in the kernel: compare only its low 32 bits (CVE-2019-10063).
  conditional({"ioctl",
               SCMP_ACT_ERRNO(EPERM),
               "errno EPERM",
               {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCSTI)},
               "request == TIOCSTI"});
  conditional({"ioctl",
               SCMP_ACT_ERRNO(EPERM),
               "errno EPERM",
               {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCLINUX)},
               "request == TIOCLINUX"});
  if (policy.network == "none") {
    // Not-equal on the full 64 bits fails closed when the high bits of the int hold garbage.
    conditional({"socketpair",
                 SCMP_ACT_ERRNO(EAFNOSUPPORT),
                 "errno EAFNOSUPPORT",
                 {SCMP_A0(SCMP_CMP_NE, AF_UNIX)},
                 "domain != AF_UNIX"});
    // A datagram pair could still sendto(2) a named socket (and be reconnected with connect(2));
    // stream and seqpacket pairs are connected for good and ignore a destination address.
    // 0xf is the kernel's SOCK_TYPE_MASK: SOCK_CLOEXEC and SOCK_NONBLOCK lie above it.
    conditional({"socketpair",
                 SCMP_ACT_ERRNO(EAFNOSUPPORT),
                 "errno EAFNOSUPPORT",
                 {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xfULL, SOCK_DGRAM)},
                 "(type & SOCK_TYPE_MASK) == SOCK_DGRAM"});
  }
  return rules;
}

struct CtxDeleter {
  void operator()(scmp_filter_ctx ctx) const noexcept { seccomp_release(ctx); }
};

[[noreturn]] void fail(const std::string& what, int rc) {
  throw SandboxError("seccomp: " + what + ": " + std::strerror(rc < 0 ? -rc : rc));
}

}  // namespace

std::vector<sock_filter> compile_seccomp(const Policy& policy) {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) throw SandboxError("seccomp: seccomp_init failed");
  // Only the native architecture is in the filter; anything else (ia32 int 0x80, where socketcall
  // arguments cannot be inspected) kills the process. libseccomp also treats x32 syscall numbers on
  // x86_64 as a bad architecture when x32 is not added (tested in sandbox_seccomp_test).
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0)
    fail("setting the bad-architecture action", rc);
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0); rc != 0)
    fail("clearing the no_new_privs attribute", rc);
  for (const Rule& rule : rules_for(policy)) {
    int nr = seccomp_syscall_resolve_name(rule.syscall.c_str());
    if (nr == __NR_SCMP_ERROR)
      throw SandboxError("seccomp: unknown syscall '" + rule.syscall + "'");
    int rc = seccomp_rule_add_array(ctx.get(), rule.action, nr,
                                    static_cast<unsigned>(rule.args.size()), rule.args.data());
    if (rc != 0) fail("adding the rule for " + rule.syscall, rc);
  }

  int fd = ::memfd_create("subagent-seccomp", MFD_CLOEXEC);
  if (fd < 0) fail("memfd_create", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (int rc = seccomp_export_bpf(ctx.get(), fd); rc != 0) fail("seccomp_export_bpf", rc);
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0)
    throw SandboxError("seccomp: exported filter has an invalid size");
  std::vector<sock_filter> program(static_cast<std::size_t>(size) / sizeof(sock_filter));
  std::size_t done = 0;
  auto* bytes = reinterpret_cast<char*>(program.data());
  while (done < static_cast<std::size_t>(size)) {
    ssize_t n =
        ::pread(fd, bytes + done, static_cast<std::size_t>(size) - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("reading the exported filter", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (program.size() > BPF_MAXINSNS) throw SandboxError("seccomp: filter exceeds BPF_MAXINSNS");
  return program;
}

std::vector<SyscallDecision> syscall_table(const Policy& policy) {
  std::vector<SyscallDecision> table;
  table.push_back({"*", "allow", "any syscall not listed below (native x86_64 ABI)"});
  table.push_back({"*", "kill process", "non-native architecture (ia32 int 0x80) or x32 number"});
  for (Rule& rule : rules_for(policy))
    table.push_back(
        {std::move(rule.syscall), std::move(rule.action_text), std::move(rule.condition)});
  return table;
}

}  // namespace sandbox
