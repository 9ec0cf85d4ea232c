// The seccomp layer, an allowlist of named groups: every refusal (the always-denied syscalls, the
// argument filters, the groups a preset does not list, the ENOSYS default), each next to its twin
// showing the same action works without the sandbox or where the policy allows it. Exit codes are
// the probe's errno (see tests/programs/sandbox_probe.cpp).
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/explain.hpp"
#include "sandbox/launch.hpp"
#include "policy/preset.hpp"
#include "sandbox/policy.hpp"
#include "sandbox/seccomp_programs.hpp"
#include "sandbox_test_util.hpp"
#include "seccomp.hpp"  // compile_seccomp, the cached path launches take

namespace fs = std::filesystem;
using namespace sandbox_test;

namespace {

struct Case {
  const char* action;
  int sandboxed;  // probe exit code (errno) or -signal
  int plain;
};

// explore with processes and sockets allowed, so that the argument filters (not a missing group)
// are what refuses.
sandbox::Policy with_groups(std::vector<std::string> groups) {
  auto policy = explore_policy();
  for (auto& g : groups) policy.syscall_groups.push_back(std::move(g));
  return policy;
}

int boxed(const sandbox::Policy& policy, const fs::path& ws, std::vector<std::string> args) {
  return exit_code(run_sandboxed(policy, request_for(ws, std::move(args))).status);
}

int plain(std::vector<std::string> args) { return exit_code(run_plain(std::move(args)).status); }

void touch(const fs::path& p) { std::ofstream(p) << "x\n"; }

}  // namespace

TEST_CASE("each always-denied syscall and argument filter, and the same action without the sandbox") {
  TempDir ws;
  auto policy = with_groups({"process", "network"});
  // TIOCSTI needs a pty; grant it in Landlock so that the EPERM can only come from seccomp. The
  // whole /dev is bound, so that /dev/ptmx finds the /dev/pts instance beside it as on the host.
  policy.read_paths.push_back("/dev");
  policy.write_paths.push_back("/dev/ptmx");
  policy.write_paths.push_back("/dev/pts");
  const Case cases[] = {
      {"ptrace", EPERM, 0},
      {"process_vm_readv", EPERM, 0},
      {"io_uring_setup", EPERM, 0},
      {"unshare", EPERM, 0},
      {"mount", EPERM, 0},
      {"clone_newuser", EPERM, 0},
      {"clone_newnet", EPERM, 0},
      {"clone3", ENOSYS, 0},
      {"bpf", EPERM, 0},
      {"keyctl", EPERM, 0},
      {"tiocsti", EPERM, 0},
      {"tiocsti_high", EPERM, 0},  // request with garbage in the high 32 bits
      {"socket_inet", EAFNOSUPPORT, 0},
      {"socket_inet6_udp", EAFNOSUPPORT, 0},
      {"socket_netlink", EAFNOSUPPORT, 0},
      {"socketpair_inet", EAFNOSUPPORT, EOPNOTSUPP},
      // AF_UNIX sockets could connect to path-bound listeners, which Landlock does not mediate.
      {"socket_unix", EAFNOSUPPORT, 0},
      {"socketpair_unix_dgram", EAFNOSUPPORT, 0},
      // Legitimate work still succeeds.
      {"socketpair_unix", 0, 0},
      {"socketpair_unix_seqpacket", 0, 0},
      {"clone_plain", 0, 0},
      {"true", 0, 0},
  };
  // Without the sandbox these need privilege (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF; TIOCSTI
  // on another terminal needs CAP_SYS_ADMIN since Linux 6.2): as a user only the sandboxed half runs.
  const std::vector<std::string> twin_needs_root = {"unshare", "mount",   "clone_newnet",
                                                    "bpf",     "tiocsti", "tiocsti_high"};
  for (const Case& c : cases) {
    INFO("action: " << std::string(c.action));
    if (::geteuid() != 0 &&
        std::find(twin_needs_root.begin(), twin_needs_root.end(), std::string(c.action)) != twin_needs_root.end())
      MESSAGE("not root: the unsandboxed twin of " << std::string(c.action) << " needs root");
    else
      CHECK(plain({c.action}) == c.plain);
    CHECK(boxed(policy, ws.path, {c.action}) == c.sandboxed);
  }
}

TEST_CASE("explore as shipped: what its groups leave out is refused with EPERM, threads still work") {
  TempDir ws, outside;
  auto policy = explore_policy();
  REQUIRE(policy.syscall_groups == std::vector<std::string>{"base"});
  touch(ws.path / "file");
  const std::string file = (ws.path / "file").string();
  const std::string dir = (ws.path / "dir").string();
  const Case cases[] = {
      {"fork", EPERM, 0},         // group process
      {"socket_unix", EPERM, 0},  // group network
      {"socketpair_unix", EPERM, 0},
      {"inotify_init1", EPERM, 0},  // group watch
      {"thread", 0, 0},             // clone(CLONE_THREAD) is base, after glibc's clone3 fallback
      {"true", 0, 0},
  };
  for (const Case& c : cases) {
    INFO("action: " << std::string(c.action));
    CHECK(plain({c.action}) == c.plain);
    CHECK(boxed(policy, ws.path, {c.action}) == c.sandboxed);
  }
  // Metadata changes (group filesystem_write) on a file the child may read, in its own workspace:
  // refused by seccomp before Landlock or the mount table are asked. Twins: unsandboxed, and a
  // policy with the group and the workspace as a write root.
  auto writer = with_groups({"filesystem_write"});
  writer.write_paths = {"${workspace}"};
  for (const char* action : {"chmod", "utimensat", "mkdir"}) {
    const std::string& target = std::string(action) == "mkdir" ? dir : file;
    INFO("action: " << action);
    CHECK(boxed(policy, ws.path, {action, target}) == EPERM);
    CHECK(plain({action, target}) == 0);
    fs::remove(dir);
    CHECK(boxed(writer, ws.path, {action, target}) == 0);
    fs::remove(dir);
  }
  CHECK(boxed(policy, ws.path, {"rename", file, (ws.path / "moved").string()}) == EPERM);
  CHECK(fs::exists(file));
  CHECK(boxed(writer, ws.path, {"rename", file, (ws.path / "moved").string()}) == 0);
  CHECK(fs::exists(ws.path / "moved"));
}

TEST_CASE("inotify and fanotify are refused unless a policy lists the watch group") {
  TempDir ws, outside;
  // Searchable by others: a root supervisor's child runs as an id of its own, and the refusal
  // must be seccomp's, not the directory's mode.
  REQUIRE(::chmod(outside.path.c_str(), 0755) == 0);
  // The attack: a watch on a directory outside every root reports the names created there.
  const std::string dir = outside.path.string();
  CHECK(plain({"inotify_watch", dir}) == 0);
  auto policy = explore_policy();
  policy.read_paths.push_back(dir);  // so that only seccomp can refuse
  CHECK(boxed(policy, ws.path, {"inotify_watch", dir}) == EPERM);
  if (::geteuid() == 0) CHECK(plain({"fanotify_init"}) == 0);  // needs CAP_SYS_ADMIN
  CHECK(boxed(policy, ws.path, {"fanotify_init"}) == EPERM);
  for (const auto& name : {"worker", "implementation", "reviewer", "research"}) {
    std::ifstream in(std::string(SUBAGENT_SOURCE_DIR "/policies/") + name + ".json");
    std::stringstream text;
    text << in.rdbuf();
    auto doc = nlohmann::json::parse(text.str(), nullptr, true, true);
    auto shipped = sandbox::parse_policy(doc.at("sandbox"), name);
    INFO(name);
    shipped.read_paths.push_back(dir);
    CHECK(boxed(shipped, ws.path, {"inotify_watch", dir}) == EPERM);
  }
  // Opting in: the group, or the single syscalls.
  auto watcher = policy;
  watcher.syscall_groups.push_back("watch");
  CHECK(boxed(watcher, ws.path, {"inotify_watch", dir}) == 0);
  auto single = policy;
  single.extra_allowed_syscalls = {"inotify_init1", "inotify_add_watch"};
  CHECK(boxed(single, ws.path, {"inotify_watch", dir}) == 0);
  // Programs are kept by what they are made of (compile_seccomp): the policy without the group
  // still gets its own, after the two that allow the watch were compiled in this process.
  CHECK(boxed(policy, ws.path, {"inotify_watch", dir}) == EPERM);
  auto denied_again = single;
  denied_again.extra_denied_syscalls = {"inotify_add_watch"};
  CHECK(boxed(denied_again, ws.path, {"inotify_watch", dir}) == EPERM);
}

TEST_CASE("a syscall no group names fails with ENOSYS, as on a kernel without it") {
  TempDir ws;
  auto policy = with_groups({"process", "filesystem_write", "network", "ipc"});
  policy.write_paths = {"${workspace}"};
  // get_mempolicy (NUMA) works unsandboxed and is in no group.
  CHECK(plain({"get_mempolicy"}) == 0);
  CHECK(boxed(policy, ws.path, {"get_mempolicy"}) == ENOSYS);
  // fchmodat2 is newer than libseccomp's table: ENOSYS, so a libc that tries it first falls back
  // to fchmodat, which the group allows.
  touch(ws.path / "f");
  const std::string f = (ws.path / "f").string();
  int direct = plain({"fchmodat2", f});
  CHECK((direct == 0 || direct == ENOSYS || direct == EOPNOTSUPP));  // 0 from Linux 6.6
  CHECK(boxed(policy, ws.path, {"fchmodat2", f}) == ENOSYS);
  CHECK(boxed(policy, ws.path, {"chmod", f}) == 0);
  // A number no kernel has: ENOSYS both ways; the filter neither kills nor says EPERM.
  CHECK(plain({"syscall", "1000"}) == ENOSYS);
  CHECK(boxed(policy, ws.path, {"syscall", "1000"}) == ENOSYS);
  // clone3 stays ENOSYS even where processes are allowed: glibc falls back to clone.
  CHECK(boxed(policy, ws.path, {"clone3"}) == ENOSYS);
  CHECK(boxed(policy, ws.path, {"fork"}) == 0);
}

TEST_CASE("personality: Docker's values pass, READ_IMPLIES_EXEC is refused") {
  TempDir ws;
  auto policy = explore_policy();
  const Case cases[] = {
      {"0x400000", EPERM, 0},     // READ_IMPLIES_EXEC
      {"0x400008", EPERM, 0},     // with PER_LINUX32
      {"0x100400000", EPERM, 0},  // garbage in the high bits: the kernel takes an unsigned int
      {"0x40000", ENOSYS, 0},     // ADDR_NO_RANDOMIZE: not in Docker's list, the default answers
      {"0xffffffff", 0, 0},       // the query
      {"0x0", 0, 0},
      {"0x8", 0, 0},
      {"0x20000", 0, 0},
      {"0x20008", 0, 0},
  };
  for (const Case& c : cases) {
    INFO("persona " << c.action);
    CHECK(plain({"personality", c.action}) == c.plain);
    CHECK(boxed(policy, ws.path, {"personality", c.action}) == c.sandboxed);
  }
}

TEST_CASE("ioctl: only TIOCSTI and TIOCLINUX are refused; other requests reach the kernel") {
  TempDir ws;
  auto policy = explore_policy();
  // The whole /dev is bound, so that /dev/ptmx finds the /dev/pts instance beside it as on the host.
  policy.read_paths.push_back("/dev");
  policy.write_paths.push_back("/dev/ptmx");
  policy.write_paths.push_back("/dev/pts");
  const Case cases[] = {
      {"0x541b", 0, 0},            // FIONREAD, between TIOCSTI (0x5412) and TIOCLINUX (0x541c)
      {"0x5451", 0, 0},            // FIOCLEX
      {"0x5413", ENOTTY, ENOTTY},  // TIOCGWINSZ on a pipe: the kernel answers, not the filter
      {"0x5411", ENOTTY, ENOTTY},  // just below TIOCSTI
      {"0x541d", ENOTTY, ENOTTY},  // just above TIOCLINUX
      {"0xc0045401", ENOTTY, ENOTTY},
      {"0x5412", EPERM, ENOTTY},   // TIOCSTI itself (a pipe is no tty: the twin's ENOTTY)
      {"0x10000541b", ENOSYS, 0},  // garbage in the high bits that is no sign extension
  };
  for (const Case& c : cases) {
    INFO("request " << c.action);
    CHECK(plain({"ioctl_pipe", c.action}) == c.plain);
    CHECK(boxed(policy, ws.path, {"ioctl_pipe", c.action}) == c.sandboxed);
  }
  // A request sign-extended from a negative int (TIOCGPTN has bit 31 set) is a real request.
  CHECK(plain({"ioctl_signext"}) == 0);
  CHECK(boxed(policy, ws.path, {"ioctl_signext"}) == 0);
}

TEST_CASE("an x32 syscall number kills the process") {
  TempDir ws;
  // Without the sandbox the process survives (ENOSYS when the kernel has no x32 ABI).
  int plain = exit_code(run_plain({"x32"}).status);
  CHECK((plain == 0 || plain == ENOSYS));
  CHECK(exit_code(run_sandboxed(explore_policy(), request_for(ws.path, {"x32"})).status) == -SIGSYS);
}

TEST_CASE("a policy's extra denials override its groups") {
  TempDir ws;
  auto policy = with_groups({"network"});
  CHECK(boxed(policy, ws.path, {"socketpair_unix"}) == 0);
  policy.extra_denied_syscalls = {"socketpair"};
  CHECK(boxed(policy, ws.path, {"socketpair_unix"}) == EPERM);
}

TEST_CASE("syscall_table lists every decision of the filter, with its origin") {
  auto table = sandbox::syscall_table(explore_policy());
  auto find = [&](const std::vector<sandbox::SyscallDecision>& t, const std::string& name,
                  const std::string& condition) {
    for (const auto& d : t)
      if (d.syscall == name && d.condition == condition) return d.action + " / " + d.origin;
    return std::string("missing");
  };
  CHECK(find(table, "*", "any syscall no row names (native x86_64 ABI)") == "errno ENOSYS / default");
  CHECK(find(table, "ptrace", "") == "errno EPERM / always denied");
  CHECK(find(table, "clone3", "").starts_with("errno ENOSYS / always"));
  CHECK(find(table, "read", "") == "allow / base");
  CHECK(find(table, "clone", "CLONE_THREAD, no namespace flag") == "allow / base");
  CHECK(find(table, "clone", "flags & CLONE_NEWUSER") == "errno EPERM / base");
  CHECK(find(table, "ioctl", "request == TIOCSTI") == "errno EPERM / base");
  CHECK(find(table, "personality", "persona & READ_IMPLIES_EXEC") == "errno EPERM / base");
  CHECK(find(table, "socket", "") == "errno EPERM / group network not allowed");
  CHECK(find(table, "inotify_init1", "") == "errno EPERM / group watch not allowed");
  CHECK(find(table, "chmod", "") == "errno EPERM / group filesystem_write not allowed");
  CHECK(find(table, "get_mempolicy", "") == "missing");  // the default answers

  auto wide = with_groups({"process", "network"});
  auto t2 = sandbox::syscall_table(wide);
  CHECK(find(t2, "clone", "no namespace flag") == "allow / base");
  CHECK(find(t2, "socket", "") == "errno EAFNOSUPPORT / network");
  CHECK(find(t2, "socketpair", "domain != AF_UNIX") == "errno EAFNOSUPPORT / network");
  CHECK(find(t2, "socketpair", "(type & SOCK_TYPE_MASK) == SOCK_DGRAM") == "errno EAFNOSUPPORT / network");
  // network "host" is itself a grant of sockets: the group comes with it, unfiltered.
  auto host = explore_policy();
  host.network = sandbox::Network::host;
  host.namespaces = {"user", "pid"};
  CHECK(find(sandbox::syscall_table(host), "socket", "") == "allow / network");
}

TEST_CASE("the groups: each syscall in one place, every name known to libseccomp, schema in step") {
  std::set<std::string> seen;
  std::vector<std::string> names;
  for (const auto& g : sandbox::syscall_groups(explore_policy())) {
    INFO("group " << g.name);
    CHECK(!g.members.empty());
    names.push_back(g.name);
    for (const auto& m : g.members) {
      INFO(m);
      CHECK(seen.insert(m).second);
      CHECK(seccomp_syscall_resolve_name(m.c_str()) != __NR_SCMP_ERROR);
    }
  }
  REQUIRE(names.back() == "always_denied");
  names.pop_back();
  std::ifstream in(SUBAGENT_SOURCE_DIR "/policies/schema.json");
  auto schema = nlohmann::json::parse(in);
  CHECK(schema["properties"]["sandbox"]["properties"]["syscalls"]["properties"]["groups"]["items"]["enum"] ==
        nlohmann::json(names));
  // Every shipped preset compiles to a filter the kernel accepts (< BPF_MAXINSNS) and starts.
  TempDir ws;
  for (const auto& name : {"explore", "reviewer", "worker", "implementation", "research"}) {
    std::ifstream f(std::string(SUBAGENT_SOURCE_DIR "/policies/") + name + ".json");
    std::stringstream text;
    text << f.rdbuf();
    auto doc = nlohmann::json::parse(text.str(), nullptr, true, true);
    auto policy = sandbox::parse_policy(doc.at("sandbox"), name);
    INFO(name);
    CHECK(boxed(policy, ws.path, {"true"}) == 0);
  }
}

// The shipped presets' programs come from the table compiled at build time
// (sandbox/seccomp_programs.hpp). Each must be exactly what libseccomp compiles for the preset here
// and now, and a policy that differs in anything the rules are made of must not get one.
TEST_CASE("each shipped preset's seccomp program is compiled at build time, and is libseccomp's program for it") {
  const sandbox::PrecompiledSeccompTable* table = sandbox::precompiled_seccomp_table();
  REQUIRE(table != nullptr);  // the test binary links the table, as the programs do
  const scmp_version* v = seccomp_version();
  CHECK(table->libseccomp_major == v->major);
  CHECK(table->libseccomp_minor == v->minor);
  CHECK(table->libseccomp_micro == v->micro);
  const fs::path dir = SUBAGENT_SOURCE_DIR "/policies";
  const auto names = supervisor::list_presets(dir);
  REQUIRE(names.size() >= 5);
  for (const std::string& name : names) {
    INFO(name);
    const auto preset = supervisor::load_preset(name, dir);
    const auto* built = sandbox::find_precompiled_seccomp(sandbox::seccomp_program_key(preset.sandbox));
    REQUIRE(built != nullptr);
    const std::vector<sock_filter> table_program(built->insns, built->insns + built->count);
    const auto compiled = sandbox::compile_seccomp_uncached(preset.sandbox);
    REQUIRE(table_program.size() == compiled.size());
    CHECK(std::memcmp(table_program.data(), compiled.data(), compiled.size() * sizeof(sock_filter)) == 0);
    const auto used = sandbox::compile_seccomp(preset.sandbox);
    CHECK(std::memcmp(used.data(), compiled.data(), compiled.size() * sizeof(sock_filter)) == 0);
  }
  const auto* init = sandbox::find_precompiled_seccomp(sandbox::init_seccomp_program_key());
  REQUIRE(init != nullptr);
  const auto init_compiled = sandbox::compile_init_seccomp_uncached();
  REQUIRE(init->count == init_compiled.size());
  CHECK(std::memcmp(init->insns, init_compiled.data(), init_compiled.size() * sizeof(sock_filter)) == 0);
}

TEST_CASE("a policy that differs from a shipped preset's in its syscalls or network gets no precompiled program") {
  const auto preset = supervisor::load_preset("explore", SUBAGENT_SOURCE_DIR "/policies");
  const auto shipped = sandbox::compile_seccomp(preset.sandbox);
  REQUIRE(sandbox::find_precompiled_seccomp(sandbox::seccomp_program_key(preset.sandbox)) != nullptr);
  auto allowed = preset.sandbox;
  allowed.extra_allowed_syscalls.push_back("get_mempolicy");
  auto denied = preset.sandbox;
  denied.extra_denied_syscalls.push_back("getcwd");
  auto grouped = preset.sandbox;
  grouped.syscall_groups.push_back("watch");
  auto networked = preset.sandbox;
  networked.network = sandbox::Network::host;
  for (const auto* changed : {&allowed, &denied, &grouped, &networked}) {
    CHECK(sandbox::find_precompiled_seccomp(sandbox::seccomp_program_key(*changed)) == nullptr);
    const auto program = sandbox::compile_seccomp(*changed);
    const auto compiled = sandbox::compile_seccomp_uncached(*changed);
    REQUIRE(program.size() == compiled.size());
    CHECK(std::memcmp(program.data(), compiled.data(), compiled.size() * sizeof(sock_filter)) == 0);
    CHECK((program.size() != shipped.size() ||
           std::memcmp(program.data(), shipped.data(), shipped.size() * sizeof(sock_filter)) != 0));
  }
  // What the changes do: the allowed syscall works under the changed policy and not under the
  // shipped one (its twin), through programs the same process took from the table and compiled.
  TempDir ws;
  auto boxed_shipped = explore_policy();
  REQUIRE(sandbox::seccomp_program_key(boxed_shipped) == sandbox::seccomp_program_key(preset.sandbox));
  auto boxed_allowed = boxed_shipped;
  boxed_allowed.extra_allowed_syscalls.push_back("get_mempolicy");
  CHECK(boxed(boxed_shipped, ws.path, {"get_mempolicy"}) == ENOSYS);
  CHECK(boxed(boxed_allowed, ws.path, {"get_mempolicy"}) == 0);
}
