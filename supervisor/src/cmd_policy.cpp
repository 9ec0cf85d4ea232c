// `subagent-supervisor policy check|explain|list`: for security reviewers.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "sandbox/explain.hpp"
#include "supervisor/cli.hpp"
#include "supervisor/policy_lint.hpp"
#include "supervisor/preset.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPolicyHelp = R"(usage: subagent-supervisor policy check FILE...
       subagent-supervisor policy explain NAME [--workspace DIR] [--policy-dir DIR] [--json]
       subagent-supervisor policy list [--policy-dir DIR]

check    validates each policy file against policies/schema.json and the parser, and lints it for
         widening: a read-only preset with a write root, an "ask" in a preset that runs unattended,
         a write root holding .git without protecting it, a rule that widens a denied tool. Exit 0
         when every file is clean, 1 when any has an error or a warning.
explain  prints what a preset's child may do: every tool decision and rule, every syscall decision,
         every path rule (with ${workspace} filled in when --workspace is given), every limit and
         namespace, the environment, the budgets, and what the running kernel supports.
list     names the presets in the policy directory.
)";

std::string pad(std::string s, std::size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s.empty() ? "(none)" : s;
}

std::string subst(std::string s, const std::string& workspace) {
  if (workspace.empty()) return s;
  for (std::size_t p; (p = s.find("${workspace}")) != std::string::npos;) s.replace(p, 12, workspace);
  return s;
}

int check(Args& args) {
  std::vector<std::string> files;
  std::string policy_dir;
  while (auto a = args.next()) {
    if (*a == "--policy-dir") policy_dir = args.value(*a);
    else if (a->rfind("--", 0) == 0) throw UsageError("unknown option '" + *a + "'");
    else files.push_back(*a);
  }
  if (files.empty()) throw UsageError("policy check needs at least one FILE");
  fs::path schema_dir = policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir);
  int bad = 0;
  for (const auto& f : files) {
    auto findings = lint_policy_file(f, schema_dir / "schema.json");
    if (findings.empty()) {
      std::printf("%s: ok\n", f.c_str());
      continue;
    }
    ++bad;
    for (const auto& x : findings) std::printf("%s: %s: %s\n", f.c_str(), x.severity.c_str(), x.message.c_str());
  }
  return bad ? 1 : 0;
}

void explain_text(const Preset& p, const std::string& workspace) {
  const auto& s = p.sandbox;
  std::printf("preset %s  (%s, sha256 %s)\n%s\n\n", p.name.c_str(), p.source.string().c_str(), p.digest.substr(0, 16).c_str(),
              p.description.c_str());
  std::printf("TOOLS\n");
  std::printf("  allow    %s\n  ask      %s\n  deny     %s\n  blocked  %s  (parent-only, never granted)\n",
              join(p.allow).c_str(), join(p.ask).c_str(), join(p.deny).c_str(), join(p.blocked).c_str());
  for (std::size_t i = 0; i < p.rules.size(); ++i)
    std::printf("  rule %zu   %s when %s -> %s\n", i, p.rules[i].tool.c_str(), p.rules[i].when.dump().c_str(),
                to_string(p.rules[i].decision));
  std::printf("  unattended: %s (an \"ask\" with no approver is denied at once)\n\n", p.unattended ? "yes" : "no");

  // Rights per path as landlock.cpp grants them, merged (Landlock rights only add up).
  std::vector<std::pair<std::string, std::string>> rights;  // path -> "rwx"
  auto grant = [&](const std::string& path, char bit, std::size_t pos) {
    for (auto& [p2, r2] : rights)
      if (p2 == path) {
        r2[pos] = bit;
        return;
      }
    std::string r3 = "---";
    r3[pos] = bit;
    rights.emplace_back(path, r3);
  };
  for (const auto& r : s.read_paths) grant(subst(r, workspace), 'r', 0);
  for (const auto& r : s.write_paths) grant(subst(r, workspace), 'r', 0), grant(subst(r, workspace), 'w', 1);
  for (const auto& r : s.exec_paths) grant(subst(r, workspace), 'r', 0), grant(subst(r, workspace), 'x', 2);
  std::printf("FILESYSTEM (Landlock at the kernel's highest ABI; any access not granted here is denied)\n");
  std::printf("  r = READ_FILE READ_DIR\n"
              "  w = WRITE_FILE TRUNCATE MAKE_{REG,DIR,SYM,SOCK,FIFO,CHAR,BLOCK} REMOVE_{FILE,DIR} REFER IOCTL_DEV\n"
              "  x = EXECUTE   (rights apply to the path and everything beneath it; on a file, only the file rights)\n");
  for (const auto& [path, r] : rights) std::printf("  %s  %s\n", r.c_str(), path.c_str());
  for (const auto& r : s.protected_paths)
    std::printf("  r--  %s%s  protected: read-only bind mount in the child's mount namespace (writes: EROFS)\n",
                r.front() == '/' ? "" : "<each write root>/", subst(r, workspace).c_str());
  if (s.write_paths.empty()) std::printf("  (no write roots: nothing may be created, changed or deleted)\n");
  std::printf("  ${child} is the child program (for `sandbox`, CMD's executable); ${interpreter} is its '#!'\n"
              "  interpreter, resolved to the real path at launch (env and the program it runs), nothing for a binary.\n"
              "  Rules follow inodes, resolved when the plan is made: a symlink inside a root that points outside is\n"
              "  denied; a hard link that already exists inside a root is readable (path-based: see policies/README.md);\n"
              "  the child cannot make one (EACCES, or EXDEV from REFER). Not mediated: stat, readlink, access, chdir,\n"
              "  path walk. /proc is the host's (not remounted)%s.\n\n",
              std::any_of(rights.begin(), rights.end(), [](const auto& e) { return e.first.rfind("/proc", 0) == 0; })
                  ? ": the rules above that name /proc/... expose host processes' entries"
                  : " and no rule grants it, so it is unreadable");

  std::printf("NETWORK\n");
  if (s.network == "none")
    std::printf("  none: new network namespace with no interfaces; seccomp refuses socket(2) for every family and\n"
                "  socketpair(2) except AF_UNIX stream/seqpacket; Landlock denies TCP bind/connect on every port (ABI 4+).\n\n");
  else if (s.network == "loopback")
    std::printf("  loopback: new network namespace with only lo (up); sockets allowed. Path-bound Unix sockets on the\n"
                "  host filesystem stay reachable (Landlock ABI <= 7 does not mediate them).\n\n");
  else
    std::printf("  host: the host's network stack, unrestricted (no network namespace, no socket filtering).\n\n");

  std::printf("SYSCALLS (seccomp, loaded last with no_new_privs; inherited by every descendant)\n"
              "  errno rows return that error and the process goes on; \"kill process\" ends it with SIGSYS.\n");
  for (const auto& d : sandbox::syscall_table(s)) {
    if (d.syscall == "*")
      std::printf("  %s %s: %s\n", pad(d.action == "allow" ? "(default)" : "(other ABI)", 22).c_str(), d.action.c_str(),
                  d.condition.c_str());
    else
      std::printf("  %s %s%s%s\n", pad(d.syscall, 22).c_str(), d.action.c_str(),
                  d.condition.empty() ? "" : ("  when " + d.condition).c_str(),
                  d.syscall == "clone3"   ? "  (its flags live in memory, out of the filter's reach; libc falls back to clone)"
                  : d.syscall == "ioctl"  ? "  (compared on the low 32 bits: the kernel's int)"
                  : d.syscall == "socket" ? "  (every family: no socket can name a path or an address)"
                                          : "");
  }

  const auto& r = s.rlimits;
  auto lim = [](std::uint64_t v, const char* unit) { return v ? std::to_string(v) + unit : std::string("unlimited"); };
  std::printf("\nLIMITS (setrlimit, soft = hard unless noted)\n");
  std::printf("  RLIMIT_AS      address space %s\n", lim(r.address_space_mb, " MiB").c_str());
  std::printf("  RLIMIT_CPU     cpu %s%s\n", lim(r.cpu_seconds, " s").c_str(),
              r.cpu_seconds ? " (SIGXCPU at the soft limit, SIGKILL one second later)" : "");
  std::printf("  RLIMIT_NOFILE  open files %s\n", lim(r.open_files, "").c_str());
  std::printf("  RLIMIT_FSIZE   file size %s\n",
              r.file_size_mb ? (std::to_string(r.file_size_mb) + " MiB").c_str()
                             : "0: no file may grow (EFBIG), stdout/stderr too when they are regular files");
  std::printf("  RLIMIT_CORE    core %llu MiB\n", (unsigned long long)r.core_mb);
  std::printf("  processes      %s%s\n", lim(r.processes, "").c_str(),
              r.processes ? " (as root: pids.max of a per-launch pids cgroup; otherwise RLIMIT_NPROC; see THIS KERNEL)" : "");

  std::printf("\nNAMESPACES (each where the kernel allows it; without root, only inside the user namespace)\n  %s\n",
              join(s.namespaces).c_str());
  std::printf("  user: identity map of the supervisor's uid/gid, no capabilities; pid: the child is PID 1 and every\n"
              "  descendant dies with it; mount: private table for the protected paths (the root is not pivoted)\n");
  std::printf("\nENVIRONMENT (nothing else is passed)\n  copied  %s\n", join(s.env_allow).c_str());
  for (const auto& [k, v] : s.env_set) std::printf("  set     %s=%s\n", k.c_str(), subst(v, workspace).c_str());
  std::printf("\nREQUIRED LAYERS (the child is refused when the kernel lacks one)\n  %s\n", join(s.required).c_str());

  const auto& b = p.budgets;
  std::printf("\nBUDGETS (enforced by the supervisor; spawns may only tighten them)\n"
              "  steps %llu · tool calls %llu · tokens %llu · thinking tokens %llu · timeout %llu s · wrap-up grace %llu s\n"
              "  summary %llu B · answer %llu B · one tool result %llu B\n",
              (unsigned long long)b.max_steps, (unsigned long long)b.max_tool_calls, (unsigned long long)b.max_tokens,
              (unsigned long long)b.max_thinking_tokens, (unsigned long long)(b.timeout_ms / 1000),
              (unsigned long long)(b.wrap_up_grace_ms / 1000), (unsigned long long)b.summary_bytes,
              (unsigned long long)b.answer_bytes, (unsigned long long)b.tool_result_bytes);

  std::printf("\nTHIS KERNEL\n");
  std::set<std::string> required(s.required.begin(), s.required.end());
  for (const auto& l : sandbox::kernel_support())
    std::printf("  %s %s %s%s\n", pad(l.name, 18).c_str(), l.applied ? "yes" : "NO ", l.detail.c_str(),
                !l.applied && required.count(l.name) ? "  (REQUIRED: children of this preset are refused)" : "");
}

int explain(Args& args) {
  std::string name, workspace, policy_dir;
  bool as_json = false;
  while (auto a = args.next()) {
    if (*a == "--workspace") workspace = fs::absolute(args.value(*a)).lexically_normal().string();
    else if (*a == "--policy-dir") policy_dir = args.value(*a);
    else if (*a == "--json") as_json = true;
    else if (a->rfind("--", 0) == 0) throw UsageError("unknown option '" + *a + "'");
    else if (name.empty()) name = *a;
    else throw UsageError("policy explain takes one preset name");
  }
  if (name.empty()) throw UsageError("policy explain needs a preset NAME (see policy list)");
  Preset p = load_preset(name, policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir));
  if (!as_json) {
    explain_text(p, workspace);
    return 0;
  }
  json out;
  out["preset"] = p.name;
  out["source"] = p.source.string();
  out["sha256"] = p.digest;
  out["policy"] = p.raw;
  out["syscalls"] = json::array();
  for (const auto& d : sandbox::syscall_table(p.sandbox))
    out["syscalls"].push_back({{"syscall", d.syscall}, {"action", d.action}, {"condition", d.condition}});
  out["kernel"] = json::array();
  for (const auto& l : sandbox::kernel_support())
    out["kernel"].push_back({{"layer", l.name}, {"available", l.applied}, {"detail", l.detail}});
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int cmd_policy(Args args) {
  auto sub = args.next();
  if (!sub || *sub == "-h" || *sub == "--help") {
    std::fputs(kPolicyHelp, sub ? stdout : stderr);
    return sub ? 0 : kUsageError;
  }
  if (*sub == "check") return check(args);
  if (*sub == "explain") return explain(args);
  if (*sub == "list") {
    std::string dir;
    while (auto a = args.next()) {
      if (*a == "--policy-dir") dir = args.value(*a);
      else throw UsageError("unknown option '" + *a + "'");
    }
    fs::path d = dir.empty() ? default_policy_dir() : fs::path(dir);
    for (const auto& n : list_presets(d)) {
      try {
        Preset p = load_preset(n, d);
        std::printf("%s  %s\n", pad(n, 16).c_str(), p.description.c_str());
      } catch (const std::exception& e) {
        std::printf("%s  (invalid: %s)\n", pad(n, 16).c_str(), e.what());
      }
    }
    return 0;
  }
  throw UsageError("unknown policy command '" + *sub + "' (check, explain, list)");
}

}  // namespace supervisor::cli
