#include "seccomp.hpp"

#include <errno.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "sandbox/launch.hpp"
#include "sandbox/seccomp_programs.hpp"
#include "syscall_groups.hpp"
#include "syscalls.hpp"

#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

namespace sandbox {
namespace {

struct NamedFlag {
  const char* name;
  unsigned long value;
};

// CLONE_NEWTIME (0x80) overlaps the exit-signal byte of clone(2); only clone3 and unshare take it,
// and both are refused whole.
constexpr NamedFlag kNamespaceFlags[] = {{"CLONE_NEWUSER", CLONE_NEWUSER},    {"CLONE_NEWPID", CLONE_NEWPID},
                                         {"CLONE_NEWNET", CLONE_NEWNET},      {"CLONE_NEWNS", CLONE_NEWNS},
                                         {"CLONE_NEWIPC", CLONE_NEWIPC},      {"CLONE_NEWUTS", CLONE_NEWUTS},
                                         {"CLONE_NEWCGROUP", CLONE_NEWCGROUP}};

// ioctl requests refused whatever the high 32 bits hold. Each has bit 31 clear, so no
// sign-extended request (high bits all ones, bit 31 set) can name one.
constexpr std::uint64_t kDeniedIoctls[] = {TIOCSTI, TIOCLINUX};
static_assert(TIOCSTI < TIOCLINUX && TIOCLINUX < 0x80000000U, "kDeniedIoctls must stay sorted");

// The personas Docker's default profile allows: PER_LINUX, PER_LINUX | UNAME26 (0x20000),
// PER_LINUX32 (0x8) and both, and 0xffffffff, which only queries.
constexpr std::uint64_t kAllowedPersonas[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};
constexpr std::uint64_t kReadImpliesExec = 0x0400000;

// The filter's action for any syscall no rule names: ENOSYS, the answer of a kernel that lacks the
// syscall, so that libc and runtimes take their fallback (glibc: statx, faccessat2, clone3,
// fchmodat2 ...) instead of failing, as runc and Docker answer syscalls newer than their profile.
constexpr std::uint32_t kDefaultAction = SCMP_ACT_ERRNO(ENOSYS);

struct Rule {
  std::string syscall;
  std::uint32_t action;
  std::string action_text;
  std::vector<scmp_arg_cmp> args;
  std::string condition;
  std::string origin;
};

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Aligned blocks that cover [lo, hi] exactly, as (mask, value) pairs for a 64-bit MASKED_EQ: a
// range test with one comparison per rule (libseccomp compares each argument once per rule).
std::vector<std::pair<std::uint64_t, std::uint64_t>> aligned_blocks(std::uint64_t lo, std::uint64_t hi) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (;;) {
    std::uint64_t size = lo == 0 ? (std::uint64_t{1} << 63) : (lo & (~lo + 1));
    while (size - 1 > hi - lo) size >>= 1;
    out.emplace_back(~(size - 1), lo);
    if (hi - lo == size - 1) break;
    lo += size;
  }
  return out;
}

class RuleSet {
 public:
  explicit RuleSet(const Policy& policy) : policy_(policy) {
    for (const std::string& g : effective_syscall_groups(policy)) granted_.insert(g);
  }

  std::vector<Rule> build() {
    // Decided first, so that no group can allow them.
    whole("clone3", ENOSYS, "ENOSYS", "always (its flags live in memory, out of the filter's reach)");
    for (std::string_view name : always_denied_syscalls()) whole(std::string(name), EPERM, "EPERM", "always denied");
    for (const std::string& name : policy_.extra_denied_syscalls) whole(name, EPERM, "EPERM", "sandbox.syscalls.deny");

    for (const SyscallGroupDef& g : syscall_group_defs())
      if (granted_.count(std::string(g.name)))
        for (std::string_view name : g.members) allow(std::string(name), std::string(g.name));
    for (const std::string& name : policy_.extra_allowed_syscalls) allow(name, "sandbox.syscalls.allow");

    // Known syscalls of the groups the policy does not list: EPERM, a clear "refused here".
    for (const SyscallGroupDef& g : syscall_group_defs())
      if (!granted_.count(std::string(g.name)))
        for (std::string_view name : g.members)
          whole(std::string(name), EPERM, "EPERM", "group " + std::string(g.name) + " not allowed");
    return std::move(rules_);
  }

 private:
  void whole(const std::string& name, int err, const char* err_text, std::string origin) {
    if (!decided_.insert(name).second) return;
    rules_.push_back({name, SCMP_ACT_ERRNO(err), std::string("errno ") + err_text, {}, "", std::move(origin)});
  }

  void add(const std::string& name, std::uint32_t action, std::string text, std::vector<scmp_arg_cmp> args,
           std::string condition, const std::string& origin) {
    rules_.push_back({name, action, std::move(text), std::move(args), std::move(condition), origin});
  }

  void allow(const std::string& name, const std::string& origin) {
    if (!decided_.insert(name).second) return;
    // Every filtered syscall's rules are disjoint: libseccomp does not define which of two
    // matching rules with different actions wins, and an unconditional allow would shadow them.
    if (name == "clone") {
      unsigned long ns = 0;
      for (const NamedFlag& flag : kNamespaceFlags) ns |= flag.value;
      if (granted_.count("process")) {
        add(name, SCMP_ACT_ALLOW, "allow", {SCMP_A0(SCMP_CMP_MASKED_EQ, ns, 0)}, "no namespace flag", origin);
      } else {
        // One masked compare tests both: no namespace flag, and CLONE_THREAD set or clear.
        add(name, SCMP_ACT_ALLOW, "allow", {SCMP_A0(SCMP_CMP_MASKED_EQ, ns | CLONE_THREAD, CLONE_THREAD)},
            "CLONE_THREAD, no namespace flag", origin);
        add(name, SCMP_ACT_ERRNO(EPERM), "errno EPERM", {SCMP_A0(SCMP_CMP_MASKED_EQ, ns | CLONE_THREAD, 0)},
            "no CLONE_THREAD (a new process: group process not allowed)", origin);
      }
      for (const NamedFlag& flag : kNamespaceFlags)
        add(name, SCMP_ACT_ERRNO(EPERM), "errno EPERM", {SCMP_A0(SCMP_CMP_MASKED_EQ, flag.value, flag.value)},
            std::string("flags & ") + flag.name, origin);
    } else if (name == "ioctl") {
      // The kernel takes the request as an int: refuse on the low 32 bits (CVE-2019-10063), and
      // allow every other request whose high bits are clear or a sign extension.
      std::uint64_t lo = 0;
      for (std::uint64_t denied : kDeniedIoctls) {
        if (denied > lo) allow_request_range(lo, denied - 1, origin);
        lo = denied + 1;
      }
      allow_request_range(lo, 0xffffffffULL, origin);
      add(name, SCMP_ACT_ALLOW, "allow", {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff80000000ULL, 0xffffffff80000000ULL)},
          "request sign-extended from a negative int", origin);
      add(name, SCMP_ACT_ERRNO(EPERM), "errno EPERM", {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCSTI)},
          "request == TIOCSTI", origin);
      add(name, SCMP_ACT_ERRNO(EPERM), "errno EPERM", {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCLINUX)},
          "request == TIOCLINUX", origin);
    } else if (name == "personality") {
      for (std::uint64_t persona : kAllowedPersonas)
        add(name, SCMP_ACT_ALLOW, "allow", {SCMP_A0(SCMP_CMP_EQ, persona)}, "persona == " + hex(persona), origin);
      // Bit 31 clear keeps the rule disjoint from the 0xffffffff query; every real persona has it
      // clear. Other values fall to the default.
      add(name, SCMP_ACT_ERRNO(EPERM), "errno EPERM",
          {SCMP_A0(SCMP_CMP_MASKED_EQ, kReadImpliesExec | 0x80000000ULL, kReadImpliesExec)},
          "persona & READ_IMPLIES_EXEC", origin);
    } else if (name == "socket" && policy_.network == Network::none) {
      // Every family, AF_UNIX too: Landlock (ABI 7) does not mediate connect(2) or sendto(2) to a
      // path-bound Unix socket, so an AF_UNIX socket could reach any listener on the filesystem
      // (the network namespace hides only abstract names). Connected pairs remain, below.
      add(name, SCMP_ACT_ERRNO(EAFNOSUPPORT), "errno EAFNOSUPPORT", {}, "", origin);
    } else if (name == "socketpair" && policy_.network == Network::none) {
      // A datagram pair could still sendto(2) a named socket (and be reconnected with connect(2));
      // stream and seqpacket pairs are connected for good and ignore a destination address.
      // 0xf is the kernel's SOCK_TYPE_MASK: SOCK_CLOEXEC and SOCK_NONBLOCK lie above it.
      for (auto [type, type_name] :
           {std::pair{SOCK_STREAM, "SOCK_STREAM"}, std::pair{SOCK_SEQPACKET, "SOCK_SEQPACKET"}})
        add(name, SCMP_ACT_ALLOW, "allow",
            {SCMP_A0(SCMP_CMP_EQ, AF_UNIX), SCMP_A1(SCMP_CMP_MASKED_EQ, 0xfULL, static_cast<std::uint64_t>(type))},
            std::string("domain == AF_UNIX, (type & SOCK_TYPE_MASK) == ") + type_name, origin);
      // Not-equal on the full 64 bits fails closed when the high bits of the int hold garbage.
      add(name, SCMP_ACT_ERRNO(EAFNOSUPPORT), "errno EAFNOSUPPORT", {SCMP_A0(SCMP_CMP_NE, AF_UNIX)},
          "domain != AF_UNIX", origin);
      add(name, SCMP_ACT_ERRNO(EAFNOSUPPORT), "errno EAFNOSUPPORT", {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xfULL, SOCK_DGRAM)},
          "(type & SOCK_TYPE_MASK) == SOCK_DGRAM", origin);
    } else {
      add(name, SCMP_ACT_ALLOW, "allow", {}, "", origin);
    }
  }

  void allow_request_range(std::uint64_t lo, std::uint64_t hi, const std::string& origin) {
    for (auto [mask, value] : aligned_blocks(lo, hi))
      add("ioctl", SCMP_ACT_ALLOW, "allow", {SCMP_A1(SCMP_CMP_MASKED_EQ, mask, value)},
          "request in " + hex(value) + ".." + hex(value | ~mask), origin);
  }

  const Policy& policy_;
  std::set<std::string> granted_;
  std::set<std::string> decided_;
  std::vector<Rule> rules_;
};

std::vector<Rule> rules_for(const Policy& policy) { return RuleSet(policy).build(); }

struct CtxDeleter {
  void operator()(scmp_filter_ctx ctx) const noexcept { seccomp_release(ctx); }
};

[[noreturn]] void fail(const std::string& what, int rc) {
  throw SandboxError("seccomp: " + what + ": " + std::strerror(rc < 0 ? -rc : rc));
}

std::vector<sock_filter> export_program(const std::vector<Rule>& rules) {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(kDefaultAction));
  if (!ctx) throw SandboxError("seccomp: seccomp_init failed");
  // Only the native architecture is in the filter; anything else (ia32 int 0x80, where socketcall
  // arguments cannot be inspected) kills the process. libseccomp also treats x32 syscall numbers on
  // x86_64 as a bad architecture when x32 is not added (tested in sandbox_seccomp_test).
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0)
    fail("setting the bad-architecture action", rc);
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0); rc != 0)
    fail("clearing the no_new_privs attribute", rc);
  // A binary search over syscall numbers instead of a linear chain of some 300 comparisons.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc != 0)
    fail("choosing the binary-tree layout", rc);
  for (const Rule& rule : rules) {
    int nr = seccomp_syscall_resolve_name(rule.syscall.c_str());
    if (nr == __NR_SCMP_ERROR) throw SandboxError("seccomp: unknown syscall '" + rule.syscall + "'");
    if (rule.action == kDefaultAction) continue;  // libseccomp refuses those (EACCES)
    int rc =
        seccomp_rule_add_array(ctx.get(), rule.action, nr, static_cast<unsigned>(rule.args.size()), rule.args.data());
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
  if (size <= 0 || size % sizeof(sock_filter) != 0) throw SandboxError("seccomp: exported filter has an invalid size");
  std::vector<sock_filter> program(static_cast<std::size_t>(size) / sizeof(sock_filter));
  std::size_t done = 0;
  auto* bytes = reinterpret_cast<char*>(program.data());
  while (done < static_cast<std::size_t>(size)) {
    ssize_t n = ::pread(fd, bytes + done, static_cast<std::size_t>(size) - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("reading the exported filter", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (program.size() > BPF_MAXINSNS) throw SandboxError("seccomp: filter exceeds BPF_MAXINSNS");
  return program;
}

}  // namespace

// Everything the rules are made of (RuleSet reads nothing else of the policy): two policies with
// the same key compile to the same program. The shipped presets' keys are looked up in the table
// compiled at build time, so the key's text is part of that table's contract: it starts with the
// layout's version, to be raised whenever RuleSet or export_program changes what a key produces
// (a stale table then matches nothing and every program is compiled at run time).
std::string seccomp_program_key(const Policy& policy) {
  std::string key = "rules-v1\nnetwork ";
  key += to_string(policy.network);
  for (const auto* list : {&policy.syscall_groups, &policy.extra_allowed_syscalls, &policy.extra_denied_syscalls}) {
    key += '\n';
    for (const std::string& name : *list) key += name + ',';
  }
  return key;
}

std::string init_seccomp_program_key() { return "rules-v1\ninit"; }

std::vector<sock_filter> compile_seccomp_uncached(const Policy& policy) { return export_program(rules_for(policy)); }

std::vector<sock_filter> compile_init_seccomp_uncached() {
  std::vector<Rule> rules;
  for (const char* name : {"rt_sigtimedwait", "wait4", "kill", "close", "write", "exit_group", "restart_syscall"})
    rules.push_back({name, SCMP_ACT_ALLOW, "allow", {}, "", "init"});
  return export_program(rules);
}

const PrecompiledSeccompTable* precompiled_seccomp_table() { return &subagent_precompiled_seccomp; }

const PrecompiledSeccompProgram* find_precompiled_seccomp(const std::string& key) {
  const PrecompiledSeccompTable* table = precompiled_seccomp_table();
  if (!table) return nullptr;
  // The programs are libseccomp's output: another version may lay them out otherwise (and fix
  // what this one got wrong), so a table from another version is not used.
  const scmp_version* v = seccomp_version();
  if (!v || v->major != table->libseccomp_major || v->minor != table->libseccomp_minor ||
      v->micro != table->libseccomp_micro)
    return nullptr;
  for (unsigned i = 0; i < table->count; ++i)
    if (key == table->programs[i].key) return &table->programs[i];
  return nullptr;
}

// Building the rules and libseccomp's export were most of a launch's preparation (some 3.5 ms of
// 4.5 for a preset), and a supervisor launches the same few presets again and again: programs are
// kept by what they are made of, and the shipped presets' are compiled at build time.
std::vector<sock_filter> compile_seccomp(const Policy& policy) {
  std::string key = seccomp_program_key(policy);
  static std::mutex mutex;
  static std::map<std::string, std::vector<sock_filter>> programs;
  {
    std::lock_guard lock(mutex);
    if (auto it = programs.find(key); it != programs.end()) return it->second;
  }
  std::vector<sock_filter> program;
  if (const PrecompiledSeccompProgram* built = find_precompiled_seccomp(key))
    program.assign(built->insns, built->insns + built->count);
  else
    program = compile_seccomp_uncached(policy);
  std::lock_guard lock(mutex);
  if (programs.size() >= 32) programs.clear();  // a bound, never reached by the shipped presets
  programs.emplace(std::move(key), program);
  return program;
}

// The init's own filter (plan.hpp): what its loop in child.cpp calls, through raw syscalls, and
// nothing else (close: its copies of stdio and the status pipe once the filter is in force; write:
// the status record should that fail). It holds a copy of the supervisor's memory for as long as the target runs, so it
// may not even open a file.
std::vector<sock_filter> compile_init_seccomp() {
  static const std::vector<sock_filter> program = [] {
    if (const PrecompiledSeccompProgram* built = find_precompiled_seccomp(init_seccomp_program_key()))
      return std::vector<sock_filter>(built->insns, built->insns + built->count);
    return compile_init_seccomp_uncached();
  }();
  return program;
}

std::vector<SyscallDecision> syscall_table(const Policy& policy) {
  std::vector<SyscallDecision> table;
  table.push_back({"*", "errno ENOSYS", "any syscall no row names (native x86_64 ABI)", "default"});
  table.push_back({"*", "kill process", "non-native architecture (ia32 int 0x80) or x32 number", "default"});
  for (Rule& rule : rules_for(policy))
    table.push_back(
        {std::move(rule.syscall), std::move(rule.action_text), std::move(rule.condition), std::move(rule.origin)});
  return table;
}

std::vector<SyscallGroupInfo> syscall_groups(const Policy& policy) {
  auto granted = effective_syscall_groups(policy);
  std::vector<SyscallGroupInfo> out;
  for (const SyscallGroupDef& g : syscall_group_defs()) {
    SyscallGroupInfo info{std::string(g.name), std::string(g.purpose), {}, false};
    for (std::string_view m : g.members) info.members.emplace_back(m);
    info.allowed = std::find(granted.begin(), granted.end(), info.name) != granted.end();
    out.push_back(std::move(info));
  }
  SyscallGroupInfo denied{"always_denied", "refused with EPERM in every preset", {}, false};
  for (std::string_view m : always_denied_syscalls()) denied.members.emplace_back(m);
  out.push_back(std::move(denied));
  return out;
}

}  // namespace sandbox
