// `subagent-supervisor policy check|explain|list`: for security reviewers.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "sandbox/explain.hpp"
#include "supervisor/workspace.hpp"
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
         a write root holding .git without protecting it, a rule that widens a denied tool, a syscall
         group that widens the filesystem rules (filesystem_write without a writing tool; watch). Exit 0
         when every file is clean, 1 when any has an error or a warning.
explain  prints what a preset's child may do: every tool decision and rule, the syscall allowlist by
         group with its argument filters (every rule with --json), every path rule (with ${workspace}
         filled in when --workspace is given), every limit and namespace, the environment, the
         budgets, and what the running kernel supports.
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

// Words wrapped at `width` columns, every line after the first indented by `indent`.
std::string fold(const std::vector<std::string>& words, std::size_t indent, std::size_t width = 100) {
  std::string out, line;
  for (const auto& w : words) {
    if (!line.empty() && indent + line.size() + 1 + w.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + line;
}

// The allowlist one line per group (its members folded into a count and what the group is for),
// the argument filters, then the refusals; `--json` keeps every rule and every group's members.
void print_syscalls(const sandbox::Policy& s) {
  std::printf("SYSCALLS (seccomp allowlist, loaded last with no_new_privs; inherited by every descendant)\n"
              "  EPERM, ENOSYS, errno ...: the call fails with that error and the process goes on; kill: SIGSYS.\n"
              "  Group members: policies/README.md, or policy explain NAME --json (syscall_groups).\n");
  const auto table = sandbox::syscall_table(s);
  auto named = [&](const std::string& origin) {
    std::vector<std::string> out;
    for (const auto& d : table)
      if (d.origin == origin && (out.empty() || out.back() != d.syscall)) out.push_back(d.syscall);
    return out;
  };
  auto group_line = [](const char* verdict, const sandbox::SyscallGroupInfo& g, std::size_t count) {
    std::printf("  %s %s %s %s\n", verdict, pad(g.name, 16).c_str(), pad("(" + std::to_string(count) + ")", 5).c_str(),
                g.purpose.c_str());
  };
  const auto groups = sandbox::syscall_groups(s);
  for (const auto& g : groups)
    if (g.allowed) group_line("allow ", g, g.members.size());
  if (auto extra = named("sandbox.syscalls.allow"); !extra.empty())
    std::printf("  allow  %s %s\n", pad("(policy allow)", 22).c_str(), fold(extra, 32).c_str());
  std::printf("  argument filters (on allowed syscalls):\n");
  std::string last;
  for (const auto& d : table) {
    if (d.syscall == "*" || d.condition.empty() || d.syscall == last) continue;
    last = d.syscall;
    std::vector<std::string> allows;
    std::vector<std::pair<std::string, std::vector<std::string>>> refusals;  // action -> conditions
    for (const auto& e : table) {
      if (e.syscall != d.syscall) continue;
      if (e.action == "allow") {
        allows.push_back("allow when " + e.condition);
        continue;
      }
      if (refusals.empty() || refusals.back().first != e.action) refusals.push_back({e.action, {}});
      refusals.back().second.push_back(e.condition);
    }
    // ioctl and personality have many allow rows (ranges, values): say what they add up to.
    std::string line = d.syscall == "ioctl"
                           ? "allow every other request (low 32 bits compared: the kernel's int; high bits clear or a sign extension)"
                       : d.syscall == "personality"
                           ? "allow when persona is 0x0, 0x8, 0x20000, 0x20008 or 0xffffffff (Docker's list; other values ENOSYS)"
                           : join(allows, "; ");
    for (const auto& [action, conditions] : refusals) line += "; " + action + " when " + join(conditions, " or ");
    std::vector<std::string> words;
    for (std::size_t b = 0, e; b < line.size(); b = e + 1) {
      e = line.find(' ', b);
      if (e == std::string::npos) e = line.size();
      words.push_back(line.substr(b, e - b));
    }
    std::printf("    %s %s\n", pad(d.syscall, 12).c_str(), fold(words, 17).c_str());
  }
  for (const auto& d : table)
    if (d.syscall == "socket" && d.action == "errno EAFNOSUPPORT")
      std::printf("    %s errno EAFNOSUPPORT for every family (network \"none\": no socket can name a path or an address)\n",
                  pad("socket", 12).c_str());

  for (const auto& g : groups)
    // Counted from the table: members a policy allows one by one are not refused.
    if (!g.allowed && g.name != "always_denied") group_line("EPERM ", g, named("group " + g.name + " not allowed").size());
  if (auto denied = named("sandbox.syscalls.deny"); !denied.empty())
    std::printf("  EPERM  %s %s\n", pad("(policy deny)", 22).c_str(), fold(denied, 32).c_str());
  for (const auto& g : groups)
    if (g.name == "always_denied") group_line("EPERM ", g, g.members.size());
  std::printf("  ENOSYS %s its flags live in memory, out of the filter's reach; libc falls back to clone\n",
              pad("clone3", 22).c_str());
  std::printf("  ENOSYS %s any syscall not named above, as on a kernel without it (libc and runtimes fall back)\n",
              pad("(default)", 22).c_str());
  std::printf("  kill   %s non-native architecture (ia32 int 0x80) or x32 number: SIGSYS\n", pad("(other ABI)", 22).c_str());
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

// What a writer may not change unseen, and the caps on its patch.
void explain_writes(const Preset& p, const std::string& workspace) {
  if (p.workspace_mode == "read") return;
  const WritePolicy& w = p.writes;
  std::printf("\nWRITES (workspace mode %s)\n", p.workspace_mode.c_str());
  std::printf("  later-execution paths (contents that run on the user's next ordinary command), relative to the\n"
              "  workspace; **/NAME: NAME at any depth. Always added: **/.git and the repository's core.hooksPath\n"
              "  target, read at spawn.\n");
  for (const auto& e : w.later_execution) std::printf("    %s\n", e.c_str());
  if (p.workspace_mode == "write_locked")
    std::printf("  existing ones: read-only bind mounts in the child (writes: EROFS); ones the child creates: flagged in\n"
                "  the envelope's artifacts.later_execution (the kernel cannot refuse a name that does not exist yet).\n"
                "  lock: exclusive on the repository top (or the workspace), shared on every ancestor: no other writer\n"
                "  above or below runs at the same time, in any supervisor process.\n");
  else
    std::printf("  a patch that touches them is flagged in artifacts.patch.review; apply refuses flagged changes\n"
                "  (these, symlinks, mode changes, new executables) without --allow-flagged, and symlinks that are\n"
                "  absolute or leave the workspace always. Nested repositories are left out of the patch.\n"
                "  patch caps: %llu bytes, %llu files (writes.max_patch_bytes, writes.max_patch_files)\n",
                (unsigned long long)w.max_patch_bytes, (unsigned long long)w.max_patch_files);
  if (!workspace.empty() && p.workspace_mode == "write_locked") {
    std::vector<std::string> list = w.later_execution;
    list.push_back("**/.git");
    const std::string hooks = hooks_path_inside(workspace);
    if (!hooks.empty()) list.push_back(hooks);
    bool complete = true;
    auto found = find_later_execution(workspace, list, 200000, &complete);
    std::printf("  in %s now%s:\n", workspace.c_str(), complete ? "" : " (scan stopped early)");
    for (const auto& f : found) std::printf("    r--  %s\n", f.c_str());
    if (found.empty()) std::printf("    (none exist)\n");
  }
  std::printf("  git steps the supervisor runs on these trees (worktree add, patch collection, apply) run sandboxed\n"
              "  (exec only /usr/bin/git and /usr/lib, no network) with every executable git setting overridden.\n");
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
              "  path walk. %s.\n\n",
              std::any_of(rights.begin(), rights.end(), [](const auto& e) { return e.first.rfind("/proc", 0) == 0; })
                  ? "/proc is the host's: the rules above that name /proc/... bind the host's entries into the child's root"
                  : "/proc is a read-only procfs of the child's own PID namespace (it lists the child's processes only),\n"
                    "  readable through one rule the child adds for it; without a PID namespace there is no /proc\n"
                    "  (read_only_host in THIS KERNEL and in the launch report says which)");

  std::printf("NETWORK\n");
  if (s.network == "none")
    std::printf("  none: new network namespace with no interfaces; seccomp refuses socket(2) for every family and\n"
                "  socketpair(2) except AF_UNIX stream/seqpacket; Landlock denies TCP bind/connect on every port (ABI 4+).\n\n");
  else if (s.network == "loopback")
    std::printf("  loopback: new network namespace with only lo (up); sockets allowed. Path-bound Unix sockets on the\n"
                "  host filesystem stay reachable (Landlock ABI <= 7 does not mediate them).\n\n");
  else
    std::printf("  host: the host's network stack, unrestricted (no network namespace, no socket filtering).\n\n");

  print_syscalls(s);

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

  const auto& t = s.tree_limits;
  std::printf("\nTREE LIMITS (cgroups over every process of the child together; see THIS KERNEL)\n");
  std::printf("  memory         %s\n",
              t.memory_mb ? (std::to_string(t.memory_mb) + " MiB, swap included; the OOM killer picks a process in the tree").c_str()
                          : "no cap");
  std::printf("  cpu            %s\n",
              t.cpu_percent ? (std::to_string(t.cpu_percent) + "% of one CPU (CFS quota per 100 ms period)").c_str()
                            : "no quota");

  std::printf("\nNAMESPACES (each where the kernel allows it; without root, only inside the user namespace)\n  %s\n",
              join(s.namespaces).c_str());
  std::printf("  user: as root, the child's own host id (0x6f000000 + pid) mapped to the workspace owner; otherwise an\n"
              "  identity map of the supervisor's uid/gid; no capabilities either way. pid: the child is PID 1 and every\n"
              "  descendant dies with it. mount: the root is a read-only tmpfs holding only the paths above (pivot_root),\n"
              "  read-only except the write roots; protected paths are read-only binds inside them\n");
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
  explain_writes(p, workspace);

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
  out["writes"] = {{"later_execution", p.writes.later_execution},
                   {"max_patch_bytes", p.writes.max_patch_bytes},
                   {"max_patch_files", p.writes.max_patch_files}};
  out["syscalls"] = json::array();
  for (const auto& d : sandbox::syscall_table(p.sandbox))
    out["syscalls"].push_back(
        {{"syscall", d.syscall}, {"action", d.action}, {"condition", d.condition}, {"origin", d.origin}});
  out["syscall_groups"] = json::array();
  for (const auto& g : sandbox::syscall_groups(p.sandbox))
    out["syscall_groups"].push_back(
        {{"group", g.name}, {"purpose", g.purpose}, {"allowed", g.allowed}, {"members", g.members}});
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
