// `subagent-supervisor policy check|explain|list`: for security reviewers.
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

  std::printf("FILESYSTEM (Landlock; everything not listed is denied)\n");
  for (const auto& r : s.read_paths) std::printf("  read       %s\n", subst(r, workspace).c_str());
  for (const auto& r : s.write_paths) std::printf("  read+write %s\n", subst(r, workspace).c_str());
  for (const auto& r : s.exec_paths) std::printf("  execute    %s\n", subst(r, workspace).c_str());
  for (const auto& r : s.protected_paths) std::printf("  protected  %s (read-only inside the write roots)\n", r.c_str());
  if (s.write_paths.empty()) std::printf("  (no write roots: nothing may be created, changed or deleted)\n");
  std::printf("\nNETWORK\n  %s\n\n", s.network == "none" ? "none: only AF_UNIX socketpair; new network namespace; Landlock TCP rules"
                                                         : s.network.c_str());

  std::printf("SYSCALLS (seccomp; default allow, these decided otherwise)\n");
  for (const auto& d : sandbox::syscall_table(s))
    std::printf("  %s %s%s\n", pad(d.syscall, 22).c_str(), d.action.c_str(),
                d.condition.empty() ? "" : ("  when " + d.condition).c_str());

  const auto& r = s.rlimits;
  auto lim = [](std::uint64_t v, const char* unit) { return v ? std::to_string(v) + unit : std::string("unlimited"); };
  std::printf("\nLIMITS (setrlimit)\n  address space %s · cpu %s · open files %s · file size %s · core %s · processes %s\n",
              lim(r.address_space_mb, " MiB").c_str(), lim(r.cpu_seconds, " s").c_str(), lim(r.open_files, "").c_str(),
              r.file_size_mb ? (std::to_string(r.file_size_mb) + " MiB").c_str() : "0 (no file may grow)",
              (std::to_string(r.core_mb) + " MiB").c_str(), lim(r.processes, "").c_str());
  std::printf("\nNAMESPACES\n  %s\n", join(s.namespaces).c_str());
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
