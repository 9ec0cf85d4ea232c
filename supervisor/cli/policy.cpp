// `subagent-supervisor policy check|explain|list`: for security reviewers.
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "sandbox/explain.hpp"
#include "sandbox/seccomp_programs.hpp"
#include "workspace/later_execution.hpp"
#include "cli/cli.hpp"
#include "cli/install_layout.hpp"
#include "policy/policy_lint.hpp"
#include "policy/decide.hpp"
#include "policy/preset.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPolicyHelp = R"(usage: subagent-supervisor policy check [--strict] [--policy-dir DIR] FILE...
       subagent-supervisor policy explain NAME [--workspace DIR] [--policy-dir DIR] [--syscalls] [--json]
       subagent-supervisor policy list [--policy-dir DIR]

check    checks each policy file the way `run` loads it, then lints it. Findings name FILE:LINE:COLUMN.
         error (exit 1): what `run` refuses or the file contradicts — not JSON, a key given twice, a
           schema violation, an unknown field (the valid names listed), a "preset" that differs from
           the file name, a write root `run` refuses ("/", the home directory, /etc, /usr, ...), a
           read-only preset with write roots or the filesystem_write syscall group, a granted
           parent-only capability.
         warning (printed, exit 0; exit 1 with --strict): legal but dangerous — network "host", "/",
           the home directory or a host-wide tree (/etc, /proc, /sys, /dev, /var, ...) as a read or
           execute root, an empty "required", missing namespaces, run_command with no write root, an
           unprotected .git in an absolute write root, "ask" in an unattended preset, the "watch"
           group; and every way the file grants more than the shipped preset of the same name (in
           --policy-dir, else the default policy directory) — tools, rules, paths, network,
           syscalls, namespaces, required layers, environment, limits, budgets, web, writes.
         note (never an exit code): a required layer this kernel lacks.
         skipped: a JSON Schema file (one with a "$schema" key: policies/schema.json), so
           `policy check policies/*.json` checks every preset and passes on the shipped ones.
explain  what a preset's child may do to this machine: first a summary (what it reads, writes and
         executes, network and web, what runs without approval, later-execution paths, the layers
         this kernel lacks), then every tool decision and rule, every path rule (with ${workspace}
         filled in when --workspace is given), network, web, the syscall groups (the full table
         with argument filters: --syscalls; every rule: --json), limits, namespaces, environment,
         budgets, writes and what the running kernel supports.
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

// Where the launch's seccomp program comes from (sandbox/seccomp_programs.hpp): the table compiled
// with this program, or libseccomp at launch. The filter is the same either way; a reviewer sees
// which policies the build compiled.
struct SeccompOrigin {
  std::size_t instructions = 0;
  bool at_build = false;
  std::string text;
};

SeccompOrigin seccomp_origin(const sandbox::Policy& s) {
  SeccompOrigin o;
  if (const auto* built = sandbox::find_precompiled_seccomp(sandbox::seccomp_program_key(s))) {
    const auto* table = sandbox::precompiled_seccomp_table();
    o.instructions = built->count;
    o.at_build = true;
    o.text = "compiled when this program was built (libseccomp " + std::to_string(table->libseccomp_major) + "." +
             std::to_string(table->libseccomp_minor) + "." + std::to_string(table->libseccomp_micro) + ")";
  } else {
    o.instructions = sandbox::compile_seccomp_uncached(s).size();
    o.text = "compiled by libseccomp at launch, once per process (its rules are no shipped preset's)";
  }
  return o;
}

// The allowlist one line per group (its members folded into a count and what the group is for),
// the argument filters, then the refusals; `--json` keeps every rule and every group's members.
void print_syscalls(const sandbox::Policy& s) {
  std::printf(
      "SYSCALLS (seccomp allowlist, loaded last with no_new_privs; inherited by every descendant)\n"
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
    std::string line =
        d.syscall == "ioctl"
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
      std::printf(
          "    %s errno EAFNOSUPPORT for every family (network \"none\": no socket can name a path or an address)\n",
          pad("socket", 12).c_str());

  for (const auto& g : groups)
    // Counted from the table: members a policy allows one by one are not refused.
    if (!g.allowed && g.name != "always_denied")
      group_line("EPERM ", g, named("group " + g.name + " not allowed").size());
  if (auto denied = named("sandbox.syscalls.deny"); !denied.empty())
    std::printf("  EPERM  %s %s\n", pad("(policy deny)", 22).c_str(), fold(denied, 32).c_str());
  for (const auto& g : groups)
    if (g.name == "always_denied") group_line("EPERM ", g, g.members.size());
  std::printf("  ENOSYS %s its flags live in memory, out of the filter's reach; libc falls back to clone\n",
              pad("clone3", 22).c_str());
  std::printf("  ENOSYS %s any syscall not named above, as on a kernel without it (libc and runtimes fall back)\n",
              pad("(default)", 22).c_str());
  std::printf("  kill   %s non-native architecture (ia32 int 0x80) or x32 number: SIGSYS\n",
              pad("(other ABI)", 22).c_str());
}

// The groups only, one line for the allowed and one for the refused: the rest of the table is the
// same for every preset (--syscalls).
void print_syscall_groups(const sandbox::Policy& s) {
  std::printf(
      "SYSCALLS (seccomp allowlist, loaded last with no_new_privs; every rule and argument filter: --syscalls)\n");
  std::vector<std::string> allowed, refused;
  for (const auto& g : sandbox::syscall_groups(s))
    (g.allowed ? allowed : refused).push_back(g.name + " (" + std::to_string(g.members.size()) + ")");
  std::printf("  allow  %s\n", fold(allowed, 9).c_str());
  if (!s.extra_allowed_syscalls.empty())
    std::printf("  allow  %s (policy allow)\n", fold(s.extra_allowed_syscalls, 9).c_str());
  std::printf("  EPERM  %s\n", fold(refused, 9).c_str());
  if (!s.extra_denied_syscalls.empty())
    std::printf("  EPERM  %s (policy deny)\n", fold(s.extra_denied_syscalls, 9).c_str());
  std::printf("  ENOSYS everything else (and clone3); another ABI (ia32, x32): SIGSYS%s\n",
              s.network == sandbox::Network::none ? "; socket(2) EAFNOSUPPORT for every family" : "");
}

// Research's brokered web access: the child has no network; the supervisor fetches for it.
void explain_web(const Preset& p) {
  const bool fetch = widest_decision(p, "web_fetch") != Decision::deny,
             search = widest_decision(p, "web_search") != Decision::deny;
  if (!fetch && !search) return;
  std::printf("WEB (brokered: the supervisor runs these tools; the child's own network is the one above)\n");
  std::printf("  tools          %s%s\n", fetch ? "web_fetch " : "",
              search ? "web_search (needs a search endpoint: --search-endpoint or $SUBAGENT_SEARCH_ENDPOINT)" : "");
  std::printf("  hosts          %s\n", p.web.allow_domains.empty()
                                           ? "every public host (web.allow_domains is empty)"
                                           : (join(p.web.allow_domains) + ", each with its subdomains").c_str());
  std::printf(
      "  refused        %s; every address that is not public (loopback, RFC 1918, ULA, link-local,\n"
      "                 CGNAT, multicast, cloud metadata), checked on the URL and before each connect,\n"
      "                 redirects included; a spawn's \"domains\" may only narrow the hosts\n",
      p.web.deny_domains.empty() ? "no domain listed" : (join(p.web.deny_domains) + " and subdomains").c_str());
  std::printf("  per fetch      %llu bytes, %llu s (web.max_fetch_bytes, web.fetch_timeout_seconds); no proxy\n\n",
              (unsigned long long)p.web.max_fetch_bytes, (unsigned long long)(p.web.fetch_timeout_ms / 1000));
}

int check(Args& args) {
  std::vector<std::string> files;
  std::string policy_dir;
  bool strict = false;
  while (auto a = args.next()) {
    if (*a == "--policy-dir")
      policy_dir = args.value(*a);
    else if (*a == "--strict")
      strict = true;
    else if (a->rfind("--", 0) == 0)
      throw UsageError("unknown option '" + *a + "'");
    else
      files.push_back(*a);
  }
  if (files.empty()) throw UsageError("policy check needs at least one FILE");
  fs::path dir = policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir);
  int failed = 0;
  for (const auto& f : files) {
    auto findings = lint_policy_file(f, dir / "schema.json", dir);
    if (findings.empty()) {
      std::printf("%s: ok\n", f.c_str());
      continue;
    }
    bool fails = false, faults = false, skipped = false;
    for (const auto& x : findings) {
      fails = fails || x.severity == Severity::error || (strict && x.severity == Severity::warning);
      faults = faults || x.severity == Severity::error || x.severity == Severity::warning;
      skipped = skipped || x.severity == Severity::skipped;
      std::printf("%s%s: %s: %s\n", f.c_str(), x.at.line ? (":" + x.at.text()).c_str() : "", to_string(x.severity),
                  x.message.c_str());
    }
    if (!faults && !skipped) std::printf("%s: ok\n", f.c_str());  // notes only: about this machine
    failed += fails;
  }
  return failed ? 1 : 0;
}

// What a writer may not change unseen, and the caps on its patch.
void explain_writes(const Preset& p, const std::string& workspace) {
  if (p.workspace_mode == WorkspaceMode::read) return;
  const WritePolicy& w = p.writes;
  std::printf("\nWRITES (workspace mode %s)\n", to_string(p.workspace_mode));
  std::printf(
      "  later-execution paths (contents that run on the user's next ordinary command), relative to the\n"
      "  workspace; **/NAME: NAME at any depth. Always added: **/.git and the repository's core.hooksPath\n"
      "  target, read at spawn.\n");
  std::printf("    %s\n", fold(w.later_execution, 4).c_str());
  if (p.workspace_mode == WorkspaceMode::write_locked)
    std::printf(
        "  existing ones: read-only bind mounts in the child (writes: EROFS); ones the child creates (the kernel\n"
        "  cannot refuse a name that does not exist yet): moved out of the workspace when its tree has died and\n"
        "  held until `apply ID --allow-flagged` (the envelope's artifacts.later_execution.held).\n"
        "  lock: exclusive on the repository top (or the workspace), shared on every ancestor: no other writer\n"
        "  above or below runs at the same time, in any supervisor process.\n");
  else
    std::printf(
        "  a patch that touches them is flagged in artifacts.patch.review; apply refuses flagged changes\n"
        "  (these, symlinks, mode changes, new executables) without --allow-flagged, and symlinks that are\n"
        "  absolute or leave the workspace always. Nested repositories are left out of the patch.\n"
        "  patch caps: %llu bytes, %llu files (writes.max_patch_bytes, writes.max_patch_files)\n",
        (unsigned long long)w.max_patch_bytes, (unsigned long long)w.max_patch_files);
  if (p.workspace_mode == WorkspaceMode::write_locked)
    std::printf(
        "  disk: %llu bytes (writes.max_disk_bytes): no file grows past it (RLIMIT_FSIZE); wrapped up (budget\n"
        "  \"disk\") once the workspace's filesystem lost that much free space (checked per tool call and second)\n",
        (unsigned long long)w.max_disk_bytes);
  else
    std::printf(
        "  disk: %llu bytes (writes.max_disk_bytes): the worktree is a tmpfs of the checkout plus that much (root;\n"
        "  counted in memory), full: ENOSPC and a wrap-up (budget \"disk\"); else \"disk_cap\" in sandbox.missing\n",
        (unsigned long long)w.max_disk_bytes);
  if (!workspace.empty() && p.workspace_mode == WorkspaceMode::write_locked) {
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
  std::printf(
      "  git steps the supervisor runs on these trees (worktree add, patch collection, apply) run sandboxed\n"
      "  (exec only /usr/bin/git and /usr/lib, no network) with every executable git setting overridden.\n");
}

bool lists(const std::vector<sandbox::Layer>& v, sandbox::Layer x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool lists(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Paths for one summary line: roots as they are, single entries of /etc, /dev and /proc counted.
std::string roots_text(const std::vector<std::string>& paths, const std::string& workspace) {
  std::vector<std::string> shown;
  std::vector<std::pair<std::string, int>> counted;  // "/etc" -> entries
  for (const auto& path : paths) {
    bool entry = false;
    for (const char* top : {"/etc/", "/dev/", "/proc/"})
      if (path.rfind(top, 0) == 0) {
        entry = true;
        std::string t(top, std::strlen(top) - 1);
        auto it = std::find_if(counted.begin(), counted.end(), [&](const auto& c) { return c.first == t; });
        if (it == counted.end())
          counted.push_back({t, 1});
        else
          ++it->second;
      }
    if (!entry)
      shown.push_back(path == "${home}" ? "${home} (private, empty, ends with the child)" : subst(path, workspace));
  }
  std::string out = shown.empty() ? "" : join(shown, " ");
  for (const auto& [top, n] : counted)
    out += (out.empty() ? "" : "; ") + std::to_string(n) + (n == 1 ? " entry of " : " entries of ") + top;
  return out.empty() ? "nothing" : out;
}

// At most a dozen lines: what a reviewer needs to answer "what can this preset do to my machine".
void explain_summary(const Preset& p, const std::string& workspace) {
  const auto& s = p.sandbox;
  auto line = [](const char* label, const std::string& text) {
    std::printf("  %s %s\n", pad(label, 10).c_str(), text.c_str());
  };
  std::printf("SUMMARY (details below)\n");
  line("reads", roots_text(s.read_paths, workspace) +
                    (s.read_paths.empty() ? "" : ", and what the write and execute roots hold"));

  std::vector<std::string> writes;
  for (const auto& w : s.write_paths)
    if (w != "/dev/null") writes.push_back(w);
  std::string w = writes.empty() ? "nothing" : roots_text(writes, workspace);
  if (!writes.empty() && !s.protected_paths.empty())
    w += " (read-only inside: " + join(s.protected_paths, " ") +
         (p.workspace_mode == WorkspaceMode::write_locked ? ", and the existing later-execution paths)" : ")");
  if (p.workspace_mode == WorkspaceMode::worktree)
    w += "; ${workspace} is an isolated worktree (or copy), the parent applies the patch";
  if (lists(s.write_paths, "/dev/null")) w += "; /dev/null (discarded)";
  line("writes", w);

  std::string x = roots_text(s.exec_paths, workspace);
  for (const auto& e : s.exec_paths)
    if (std::any_of(s.write_paths.begin(), s.write_paths.end(), [&](const std::string& r) {
          return r != "/dev/null" && (r == e || r.rfind(e + "/", 0) == 0 || e.rfind(r + "/", 0) == 0);
        })) {
      x += " — " + subst(e, workspace) + " is also writable: the child can run programs it wrote itself";
      break;
    }
  line("executes", x);

  line("network", s.network == sandbox::Network::none
                      ? "none (own empty network namespace; no socket but AF_UNIX pairs)"
                  : s.network == sandbox::Network::loopback ? "loopback only (own network namespace with lo)"
                                                            : "HOST: the host's network stack, unfiltered");

  const bool fetch = widest_decision(p, "web_fetch") != Decision::deny,
             search = widest_decision(p, "web_search") != Decision::deny;
  if (fetch || search) {
    std::string hosts =
        p.web.allow_domains.empty() ? "every public host" : join(p.web.allow_domains, " ") + " (and subdomains)";
    if (!p.web.deny_domains.empty()) hosts += " except " + join(p.web.deny_domains, " ");
    line("web", std::string(fetch && search ? "web_fetch and web_search"
                            : fetch         ? "web_fetch"
                                            : "web_search") +
                    ", run by the supervisor: " + hosts + "; private, loopback and metadata addresses refused; " +
                    std::to_string(p.web.max_fetch_bytes) + " B and " + std::to_string(p.web.fetch_timeout_ms / 1000) +
                    " s per fetch" + (search ? "; web_search needs a search endpoint" : ""));
  } else {
    line("web", "none (no web tool)");
  }

  // Without approval: the tools allowed outright, and run_command's prefixes.
  std::vector<std::string> free;
  for (const auto& t : p.allow)
    if (!lists(p.blocked, t)) free.push_back(t);
  line("no asking", join(free, " "));
  std::vector<std::string> prefixes;
  for (const auto& r : p.rules)
    if (r.tool == "run_command" && r.decision == Decision::allow && r.when.contains("command_prefix"))
      for (const auto& v : r.when["command_prefix"]) prefixes.push_back(v.get<std::string>());
  const Decision rc = widest_decision(p, "run_command");
  if (lists(p.allow, "run_command")) {
    line("commands", "run_command: ANY command line without approval, running whatever the execute roots hold");
  } else if (!prefixes.empty()) {
    std::string shown;
    for (std::size_t i = 0; i < prefixes.size() && i < 12; ++i) shown += (i ? ", " : "") + prefixes[i];
    if (prefixes.size() > 12) shown += " ... (" + std::to_string(prefixes.size()) + " prefixes)";
    line("commands", "without approval: " + shown +
                         (writes.empty() ? ""
                                         : " — build and test commands run code the child can "
                                           "write (Makefiles, tests, scripts): in effect any program "
                                           "the execute roots allow") +
                         "; other commands " + (lists(p.ask, "run_command") ? "ask" : "are denied"));
  } else {
    line("commands",
         rc == Decision::ask ? "run_command asks for approval for every command line" : "none (no run_command)");
  }
  std::vector<std::string> asks = p.ask;
  if (!asks.empty())
    line("approval", join(asks, " ") + ": each call asks the parent" +
                         (p.unattended ? "; the preset runs unattended, so with no approver each is denied at once"
                                       : " (no approver: denied at once)"));

  if (p.workspace_mode == WorkspaceMode::read) {
    line("later-run", "none: nothing that runs later outside the sandbox can be written");
  } else {
    std::vector<std::string> later = p.writes.later_execution;
    if (!lists(later, "**/.git")) later.insert(later.begin(), "**/.git");  // added at every spawn
    std::string shown;
    for (std::size_t i = 0; i < later.size() && i < 6; ++i) shown += (i ? " " : "") + later[i];
    line("later-run", std::to_string(later.size()) + " later-execution paths (" + shown +
                          (later.size() > 6 ? " ..." : "") + "): " +
                          (p.workspace_mode == WorkspaceMode::write_locked
                               ? "existing ones read-only, new ones held until apply --allow-flagged"
                               : "patch changes to them flagged; apply refuses them unless --allow-flagged"));
  }

  std::vector<std::string> lacking;
  for (const auto& l : sandbox::kernel_support())
    if (!l.applied) lacking.push_back(l.name + (lists(s.required, l.layer) ? " (REQUIRED: children refused)" : ""));
  line("kernel", lacking.empty() ? "has every layer" : "lacks " + join(lacking, ", ") + " (see THIS KERNEL)");
  std::printf("\n");
}

void explain_text(const Preset& p, const std::string& workspace, bool all_syscalls) {
  const auto& s = p.sandbox;
  std::printf("preset %s  (%s, sha256 %s)\n%s\n\n", p.name.c_str(), p.source.string().c_str(),
              p.digest.substr(0, 16).c_str(), p.description.c_str());
  explain_summary(p, workspace);
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
  std::printf(
      "  r = READ_FILE READ_DIR\n"
      "  w = WRITE_FILE TRUNCATE MAKE_{REG,DIR,SYM,SOCK,FIFO,CHAR,BLOCK} REMOVE_{FILE,DIR} REFER IOCTL_DEV\n"
      "  x = EXECUTE   (rights apply to the path and everything beneath it; on a file, only the file rights)\n");
  // Single entries of one directory with the same rights on one line: /etc/{passwd, group, ...}.
  std::vector<bool> shown(rights.size());
  for (std::size_t i = 0; i < rights.size(); ++i) {
    if (shown[i]) continue;
    const fs::path parent = fs::path(rights[i].first).parent_path();
    std::vector<std::string> names;
    for (std::size_t j = i; j < rights.size(); ++j)
      if (!shown[j] && rights[j].second == rights[i].second && rights[j].first.front() == '/' && parent != "/" &&
          fs::path(rights[j].first).parent_path() == parent) {
        names.push_back(fs::path(rights[j].first).filename().string() + ",");
        shown[j] = true;
      }
    if (names.size() < 2) {
      std::printf("  %s  %s\n", rights[i].second.c_str(), rights[i].first.c_str());
      shown[i] = true;
      continue;
    }
    names.back().pop_back();
    names.front() = parent.string() + "/{" + names.front();
    names.back() += "}";
    std::printf("  %s  %s\n", rights[i].second.c_str(), fold(names, 7).c_str());
  }
  for (const auto& r : s.protected_paths)
    std::printf("  r--  %s%s  protected: read-only bind mount in the child's mount namespace (writes: EROFS)\n",
                r.front() == '/' ? "" : "<each write root>/", subst(r, workspace).c_str());
  if (s.write_paths.empty()) std::printf("  (no write roots: nothing may be created, changed or deleted)\n");
  std::printf(
      "  ${child} is the child program (for `sandbox`, CMD's executable); ${interpreter} is its '#!'\n"
      "  interpreter, resolved to the real path at launch (env and the program it runs), nothing for a binary.\n"
      "  ${home} is /home/subagent, the child's private home: an empty tmpfs of its own (mode 0700, noexec),\n"
      "  writable only when it is a write root (256 MiB, counted in the tree's memory), gone when it ends.\n"
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
  if (s.network == sandbox::Network::none)
    std::printf(
        "  none: new network namespace with no interfaces; seccomp refuses socket(2) for every family and\n"
        "  socketpair(2) except AF_UNIX stream/seqpacket; Landlock denies TCP bind/connect on every port (ABI "
        "4+).\n\n");
  else if (s.network == sandbox::Network::loopback)
    std::printf(
        "  loopback: new network namespace with only lo (up); sockets allowed. Path-bound Unix sockets on the\n"
        "  host filesystem stay reachable (Landlock ABI <= 7 does not mediate them).\n\n");
  else
    std::printf("  host: the host's network stack, unrestricted (no network namespace, no socket filtering).\n\n");

  explain_web(p);
  if (all_syscalls)
    print_syscalls(s);
  else
    print_syscall_groups(s);
  const auto origin = seccomp_origin(s);
  std::printf("  program: %zu BPF instructions, %s\n", origin.instructions, origin.text.c_str());

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
  std::printf(
      "  processes      %s%s\n", lim(r.processes, "").c_str(),
      r.processes ? " (as root: pids.max of a per-launch pids cgroup; otherwise RLIMIT_NPROC; see THIS KERNEL)" : "");

  const auto& t = s.tree_limits;
  std::printf("\nTREE LIMITS (cgroups over every process of the child together; see THIS KERNEL)\n");
  std::printf(
      "  memory         %s\n",
      t.memory_mb
          ? (std::to_string(t.memory_mb) + " MiB, swap included; the OOM killer picks a process in the tree").c_str()
          : "no cap");
  std::printf("  cpu            %s\n",
              t.cpu_percent ? (std::to_string(t.cpu_percent) + "% of one CPU (CFS quota per 100 ms period)").c_str()
                            : "no quota");

  std::printf("\nNAMESPACES (each where the kernel allows it; without root, only inside the user namespace)\n  %s\n",
              join(s.namespaces).c_str());
  std::printf(
      "  user: as root, the child's own host id (0x6f000000 + pid) mapped to the workspace owner; otherwise an\n"
      "  identity map of the supervisor's uid/gid; no capabilities either way. pid: the child is PID 1 and every\n"
      "  descendant dies with it. mount: the root is a read-only tmpfs holding only the paths above (pivot_root),\n"
      "  read-only except the write roots; protected paths are read-only binds inside them\n");
  std::printf("\nENVIRONMENT (nothing else is passed)\n  copied  %s\n", join(s.env_allow).c_str());
  for (const auto& [k, v] : s.env_set) std::printf("  set     %s=%s\n", k.c_str(), subst(v, workspace).c_str());
  std::printf("\nREQUIRED LAYERS (the child is refused when the kernel lacks one)\n  %s\n",
              join(sandbox::layer_names(s.required)).c_str());

  const auto& b = p.budgets;
  std::printf(
      "\nBUDGETS (enforced by the supervisor; spawns may only tighten them)\n"
      "  steps %llu · tool calls %llu · tokens %llu · thinking tokens %llu · timeout %llu s · wrap-up grace %llu s\n"
      "  summary %llu B · answer %llu B · one tool result %llu B\n",
      (unsigned long long)b.max_steps, (unsigned long long)b.max_tool_calls, (unsigned long long)b.max_tokens,
      (unsigned long long)b.max_thinking_tokens, (unsigned long long)(b.timeout_ms / 1000),
      (unsigned long long)(b.wrap_up_grace_ms / 1000), (unsigned long long)b.summary_bytes,
      (unsigned long long)b.answer_bytes, (unsigned long long)b.tool_result_bytes);
  explain_writes(p, workspace);

  std::printf("\nTHIS KERNEL\n");
  const std::set<sandbox::Layer> required(s.required.begin(), s.required.end());
  for (const auto& l : sandbox::kernel_support())
    std::printf("  %s %s %s%s\n", pad(l.name, 18).c_str(), l.applied ? "yes" : "NO ", l.detail.c_str(),
                !l.applied && required.count(l.layer) ? "  (REQUIRED: children of this preset are refused)" : "");
}

int explain(Args& args) {
  std::string name, workspace, policy_dir;
  bool as_json = false, all_syscalls = false;
  while (auto a = args.next()) {
    if (*a == "--workspace")
      workspace = fs::absolute(args.value(*a)).lexically_normal().string();
    else if (*a == "--policy-dir")
      policy_dir = args.value(*a);
    else if (*a == "--json")
      as_json = true;
    else if (*a == "--syscalls")
      all_syscalls = true;
    else if (a->rfind("--", 0) == 0)
      throw UsageError("unknown option '" + *a + "'");
    else if (name.empty())
      name = *a;
    else
      throw UsageError("policy explain takes one preset name");
  }
  if (name.empty()) throw UsageError("policy explain needs a preset NAME (see policy list)");
  Preset p = load_preset(name, policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir));
  if (!as_json) {
    explain_text(p, workspace, all_syscalls);
    return 0;
  }
  json out;
  out["preset"] = p.name;
  out["source"] = p.source.string();
  out["sha256"] = p.digest;
  out["policy"] = p.raw;
  out["writes"] = {{"later_execution", p.writes.later_execution},
                   {"max_patch_bytes", p.writes.max_patch_bytes},
                   {"max_patch_files", p.writes.max_patch_files},
                   {"max_disk_bytes", p.writes.max_disk_bytes}};
  out["syscalls"] = json::array();
  for (const auto& d : sandbox::syscall_table(p.sandbox))
    out["syscalls"].push_back(
        {{"syscall", d.syscall}, {"action", d.action}, {"condition", d.condition}, {"origin", d.origin}});
  const auto origin = seccomp_origin(p.sandbox);
  out["seccomp_program"] = {{"instructions", origin.instructions}, {"compiled", origin.at_build ? "build" : "launch"}};
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
      if (*a == "--policy-dir")
        dir = args.value(*a);
      else
        throw UsageError("unknown option '" + *a + "'");
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
