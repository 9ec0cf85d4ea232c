// prepare(): a policy and a launch request become a Plan, in the parent. One builder per layer
// (or per group of layers that share one decision); each fills its part of the plan and returns
// that part's layer statuses. prepare() runs them in dependency order and layers() reports the
// statuses in kLayers order, whatever order they were built in.
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "cgroup.hpp"
#include "interpreter.hpp"
#include "landlock.hpp"
#include "namespaces.hpp"
#include "plan.hpp"
#include "rootfs.hpp"
#include "sandbox/launch.hpp"
#include "sandbox/workspace_guard.hpp"
#include "seccomp.hpp"

extern char** environ;

namespace sandbox {
namespace {

namespace fs = std::filesystem;

SandboxError policy_error(const Policy& policy, const std::string& what) {
  return SandboxError("policy " + policy.source + ": " + what);
}

// The statuses the builders decided, one slot per layer.
class LayerReport {
 public:
  void set(LayerStatus status) { slots_[static_cast<std::size_t>(status.layer)] = std::move(status); }
  const LayerStatus* find(Layer layer) const {
    const auto& slot = slots_[static_cast<std::size_t>(layer)];
    return slot ? &*slot : nullptr;
  }
  LayerStatus& at(Layer layer) { return *slots_[static_cast<std::size_t>(layer)]; }
  // Every layer, in kLayers order; a layer no builder decided is a bug here, not the policy's.
  std::vector<LayerStatus> in_order() && {
    std::vector<LayerStatus> out;
    for (Layer layer : kLayers) {
      auto& slot = slots_[static_cast<std::size_t>(layer)];
      if (!slot) throw SandboxError("prepare: no builder decided the '" + std::string(to_string(layer)) + "' layer");
      out.push_back(std::move(*slot));
    }
    return out;
  }

 private:
  std::array<std::optional<LayerStatus>, kLayers.size()> slots_;
};

struct Substitution {
  std::string workspace, child;
  std::vector<std::string> interpreters;  // ${interpreter}: the child script's, resolved (empty: a binary)
  std::string home = kHomePath;           // ${home}: the private home's path in the child's root
};

// Returns false when the template names ${child} and the request has no child directory.
bool substitute(const std::string& in, const Substitution& sub, std::string* out) {
  std::string result = in;
  for (const auto& [key, value] : {std::pair<std::string, const std::string*>{"${workspace}", &sub.workspace},
                                   {"${child}", &sub.child},
                                   {"${home}", &sub.home}}) {
    std::size_t pos;
    while ((pos = result.find(key)) != std::string::npos) {
      if (value->empty()) return false;
      result.replace(pos, key.size(), *value);
    }
  }
  *out = std::move(result);
  return true;
}

std::vector<std::string> substitute_all(const std::vector<std::string>& in, const Substitution& sub,
                                        std::string* dropped) {
  std::vector<std::string> out;
  for (const auto& t : in) {
    if (t == "${interpreter}") {  // one entry per interpreter; nothing for a child that is no script
      for (const auto& i : sub.interpreters) out.push_back(i);
      continue;
    }
    if (t == "${home}") continue;  // no host path: the new root makes it (RootPaths::home)
    std::string s;
    if (substitute(t, sub, &s))
      out.push_back(fs::path(s).lexically_normal().string());
    else
      *dropped += (dropped->empty() ? "" : ", ") + t;
  }
  return out;
}

bool has_cap_setpcap() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> 8) & 1;  // CAP_SETPCAP
    }
  }
  return false;
}

std::string mb(std::uint64_t v) { return std::to_string(v) + " MiB"; }

// The request itself: absolute paths, an existing and safe workspace, open stdio fds.
void check_request(const LaunchRequest& request) {
  if (request.executable.empty() || request.executable.front() != '/')
    throw SandboxError("launch request: executable must be an absolute path (got '" + request.executable + "')");
  if (request.argv.empty()) throw SandboxError("launch request: argv must hold at least argv[0]");
  if (!request.workspace.is_absolute())
    throw SandboxError("launch request: workspace must be an absolute path (got '" + request.workspace.string() + "')");
  std::error_code ec;
  if (!fs::is_directory(request.workspace, ec))
    throw SandboxError("launch request: workspace '" + request.workspace.string() + "' is not an existing directory");
  if (!request.allow_unsafe_workspace) check_workspace(request.workspace, "launch request: workspace");
  for (int fd : {request.stdin_fd, request.stdout_fd, request.stderr_fd})
    if (::fcntl(fd, F_GETFD) < 0) throw SandboxError("launch request: stdio fd " + std::to_string(fd) + " is not open");
}

Substitution make_substitution(const Policy& policy, const LaunchRequest& request) {
  Substitution sub{request.workspace.lexically_normal().string(),
                   request.child_dir.empty() ? std::string() : request.child_dir.lexically_normal().string(),
                   {},
                   kHomePath};
  auto path = policy.env_set.find("PATH");
  std::string path_env = "/usr/bin:/bin";
  if (path != policy.env_set.end()) substitute(path->second, sub, &path_env);
  sub.interpreters = detail::script_interpreters(request.executable, path_env);
  return sub;
}

// clean_env: argv and envp, every string final before fork; the child only reads the pointer arrays.
LayerStatus build_environment(const Policy& policy, const LaunchRequest& request, const Substitution& sub, Plan& plan) {
  plan.argv_store = request.argv;
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (std::find(policy.env_allow.begin(), policy.env_allow.end(), name) != policy.env_allow.end())
      env[name] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : policy.env_set) {
    std::string v;
    if (!substitute(value, sub, &v))
      throw policy_error(policy, "sandbox.environment.set." + name +
                                     " uses ${child}, but the launch request has "
                                     "no child directory");
    env[name] = v;
  }
  for (const std::string& entry : request.extra_env) {
    auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw SandboxError("launch request: extra_env entry '" + entry + "' is not NAME=value");
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  std::string env_names;
  for (const auto& [name, value] : env) {
    plan.env_store.push_back(name + "=" + value);
    env_names += (env_names.empty() ? "" : " ") + name;
  }
  for (auto& s : plan.argv_store) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  for (auto& s : plan.env_store) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  return {Layer::kCleanEnv, true, std::to_string(env.size()) + " variables: " + env_names};
}

// rlimits: per-process limits, set in the child before exec.
LayerStatus build_rlimits(const Policy& policy, Plan& plan) {
  const Rlimits& r = policy.rlimits;
  constexpr rlim_t kMiB = 1024 * 1024;
  auto add = [&](int resource, rlim_t soft, rlim_t hard) { plan.limits.push_back({resource, {soft, hard}}); };
  std::string limits;
#ifdef SUBAGENT_SANITIZER_BUILD
  // ASan and TSan reserve terabytes of address space for shadow memory before main, so a sanitized
  // child under RLIMIT_AS dies at once. Sanitizer builds run tests only; the layer says what is missing.
  if (r.address_space_mb) limits += "address space not limited (sanitizer build), ";
#else
  if (r.address_space_mb) {
    add(RLIMIT_AS, r.address_space_mb * kMiB, r.address_space_mb * kMiB);
    limits += "address space " + mb(r.address_space_mb) + ", ";
  }
#endif
  if (r.cpu_seconds) {  // SIGXCPU at the soft limit, SIGKILL one second later
    add(RLIMIT_CPU, r.cpu_seconds, r.cpu_seconds + 1);
    limits += "cpu " + std::to_string(r.cpu_seconds) + " s, ";
  }
  if (r.open_files) {
    add(RLIMIT_NOFILE, r.open_files, r.open_files);
    limits += "open files " + std::to_string(r.open_files) + ", ";
  }
  add(RLIMIT_FSIZE, r.file_size_mb * kMiB, r.file_size_mb * kMiB);
  limits += "file size " + mb(r.file_size_mb) + ", ";
  add(RLIMIT_CORE, r.core_mb * kMiB, r.core_mb * kMiB);
  limits += "core " + mb(r.core_mb);
  if (r.processes) {
    add(RLIMIT_NPROC, r.processes, r.processes);
    limits += ", processes " + std::to_string(r.processes);
  }
  return {Layer::kRlimits, true, limits};
}

// seccomp: the policy's filter compiled to BPF here; the child only loads it (and the init's own).
LayerStatus build_seccomp(const Policy& policy, const LaunchRequest& request, Plan& plan) {
  plan.bpf = compile_seccomp(policy);
  plan.init = request.init;
  if (plan.init) plan.init_bpf = compile_init_seccomp();
  return {Layer::kSeccomp, true, std::to_string(plan.bpf.size()) + " BPF instructions; see the syscall table"};
}

// What the Landlock builder leaves for the builders after it.
struct LandlockPart {
  LandlockPaths paths;  // the substituted read, write and execute roots
  bool home_named = false, home_write = false;
};

// landlock, landlock_scopes: the ruleset is opened here; the child only restricts itself with it.
LandlockPart build_landlock_layers(const Policy& policy, const LaunchRequest& request, const Substitution& sub,
                                   Plan& plan, LayerReport& report) {
  LandlockPart part;
  std::string dropped;
  LandlockPaths& paths = part.paths;
  paths.read = substitute_all(policy.read_paths, sub, &dropped);
  paths.write = substitute_all(policy.write_paths, sub, &dropped);
  paths.execute = substitute_all(policy.exec_paths, sub, &dropped);
  if (!request.allow_unsafe_workspace) {
    for (const std::string& root : paths.write) {
      std::error_code dir_ec;
      if (fs::is_directory(root, dir_ec)) check_workspace(root, "policy " + policy.source + ": write root");
    }
    // Literal read and execute roots (the templates are the workspace, checked above, and the
    // child's own private paths): none may reach credentials.
    for (const auto* list : {&policy.read_paths, &policy.exec_paths})
      for (const std::string& root : *list)
        if (!root.empty() && root.front() == '/')
          check_read_root(root,
                          "policy " + policy.source + (list == &policy.read_paths ? ": read root" : ": execute root"));
  }
  paths.deny_tcp = policy.network == Network::none;
  {
    bool names_interpreter = false;
    for (const auto& e : policy.exec_paths) names_interpreter |= e == "${interpreter}";
    plan.exec_hint = detail::exec_refusal_hint(request.executable, sub.interpreters, paths.execute, names_interpreter);
  }
  LandlockRuleset landlock = build_landlock(paths, sub.workspace);
  plan.landlock_fd = landlock.fd;
  // The private home: made whenever the policy names ${home}, writable when it is a write root.
  const auto lists = [](const std::vector<std::string>& v, const char* t) {
    return std::find(v.begin(), v.end(), t) != v.end();
  };
  const bool home_read = lists(policy.read_paths, "${home}");
  part.home_write = lists(policy.write_paths, "${home}");
  part.home_named = home_read || part.home_write;
  for (const auto& [name, value] : policy.env_set) part.home_named |= value.find("${home}") != std::string::npos;
  plan.home_access = landlock_directory_access(landlock.abi, home_read || part.home_write, part.home_write);
  if (!dropped.empty()) landlock.detail += ", dropped (no child directory in the request): " + dropped;
  report.set({Layer::kLandlock, landlock.fd >= 0, landlock.detail});
  report.set({Layer::kLandlockScopes, landlock.scoped,
              landlock.scoped
                  ? "signals and abstract unix sockets scoped to the sandbox"
                  : "needs Landlock ABI 6 (Linux 6.12); this kernel has ABI " + std::to_string(landlock.abi)});
  return part;
}

struct NamespaceKind {
  Layer layer;
  const char* name;  // the policy's spelling (sandbox.namespaces)
  unsigned long flag;
};
constexpr NamespaceKind kNamespaces[] = {
    {Layer::kUserNamespace, "user", CLONE_NEWUSER}, {Layer::kPidNamespace, "pid", CLONE_NEWPID},
    {Layer::kNetNamespace, "net", CLONE_NEWNET},    {Layer::kIpcNamespace, "ipc", CLONE_NEWIPC},
    {Layer::kUtsNamespace, "uts", CLONE_NEWUTS},    {Layer::kMountNamespace, "mount", CLONE_NEWNS}};

// The namespaces the policy asks for, minus what this kernel (or our privilege) refuses, and why.
struct NamespacePart {
  unsigned long flags = 0;
  std::map<Layer, std::string> refused;  // namespaces asked for and not granted: the reason
  std::vector<Layer> wanted;
  bool wants(Layer layer) const { return std::find(wanted.begin(), wanted.end(), layer) != wanted.end(); }
};

// The namespace choice and the process settings that follow from it (clone flags, id maps,
// groups, capabilities, loopback). Their layers are reported later (namespace_layers), once the
// identity and the protected paths they describe are planned.
NamespacePart choose_namespaces(const Policy& policy, bool root, Plan& plan) {
  NamespacePart part;
  for (const NamespaceKind& ns : kNamespaces)
    if (std::find(policy.namespaces.begin(), policy.namespaces.end(), ns.name) != policy.namespaces.end())
      part.wanted.push_back(ns.layer);
  unsigned long& flags = part.flags;
  // Known, or assumed until the launch's clone says otherwise (namespaces.hpp): no probe here.
  const auto granted = [&plan](unsigned long f) { return namespaces_expected(f, &plan.assumed_namespaces); };
  if (part.wants(Layer::kUserNamespace)) {
    if (granted(CLONE_NEWUSER))
      flags |= CLONE_NEWUSER;
    else
      part.refused[Layer::kUserNamespace] = "the kernel refused CLONE_NEWUSER (disabled, or nested too deeply)";
  }
  for (const NamespaceKind& ns : kNamespaces) {
    if (ns.flag == CLONE_NEWUSER || !part.wants(ns.layer)) continue;
    unsigned long with_user = ns.flag | (flags & CLONE_NEWUSER);
    if (!root && !(flags & CLONE_NEWUSER))
      part.refused[ns.layer] = "needs a user namespace when the supervisor is not root";
    else if (granted(with_user))
      flags |= ns.flag;
    else
      part.refused[ns.layer] = "the kernel refused it";
  }
  if (flags != 0 && !granted(flags))
    throw policy_error(policy, "namespaces work one by one but not together on this kernel");
  plan.clone_flags = flags;
  plan.user_ns = flags & CLONE_NEWUSER;
  plan.uid = ::geteuid();
  plan.gid = ::getegid();
  plan.drop_groups = root;
  plan.dumpable_for_maps = plan.user_ns && !root;
  plan.have_setpcap = plan.user_ns || has_cap_setpcap();
  plan.loopback = policy.network == Network::loopback && (flags & CLONE_NEWNET);
  return part;
}

// Protected paths inside write roots: Landlock rights only add up, so they are bind-mounted
// read-only over themselves in the child's mount namespace (EROFS for every write beneath).
// Returns what the mount_namespace layer adds to its detail.
std::string build_protected_paths(const Policy& policy, const Substitution& sub, const LandlockPaths& paths,
                                  const NamespacePart& ns, Plan& plan) {
  if (policy.protected_paths.empty()) return "";
  std::vector<std::string> targets;
  for (const std::string& entry : policy.protected_paths) {
    std::string resolved;
    if (!substitute(entry, sub, &resolved)) continue;
    if (resolved.front() == '/') {
      targets.push_back(fs::path(resolved).lexically_normal().string());
    } else {
      for (const std::string& write_root : paths.write) {
        std::error_code dir_ec;
        if (!fs::is_directory(write_root, dir_ec)) continue;  // e.g. /dev/null: nothing lies inside it
        targets.push_back((fs::path(write_root) / resolved).lexically_normal().string());
      }
    }
  }
  std::string protected_detail, missing;
  for (const std::string& target : targets) {
    struct statvfs vfs {};
    if (::statvfs(target.c_str(), &vfs) != 0) {
      if (errno != ENOENT)
        throw policy_error(policy, "protected path '" + target + "' cannot be inspected: " + std::strerror(errno));
      missing += (missing.empty() ? "" : ", ") + target;
      continue;
    }
    const unsigned long locked = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME;
    plan.protect.push_back({target, MS_BIND | MS_REMOUNT | MS_RDONLY | (vfs.f_flag & locked)});
    protected_detail += (protected_detail.empty() ? "" : ", ") + target;
  }
  if (!plan.protect.empty() && !(ns.flags & CLONE_NEWNS)) {
    auto refused = ns.refused.find(Layer::kMountNamespace);
    throw policy_error(
        policy,
        "protected paths (" + protected_detail + ") need the mount namespace, which is not available: " +
            (refused == ns.refused.end() || refused->second.empty() ? "not requested by the policy" : refused->second));
  }
  protected_detail = protected_detail.empty() ? "" : "; read-only: " + protected_detail;
  if (!missing.empty()) protected_detail += "; protected but absent: " + missing;
  return protected_detail;
}

// The six namespace layers: granted (with how), not asked for, or refused (with why).
void namespace_layers(const NamespacePart& ns, const Plan& plan, const std::string& protected_detail,
                      LayerReport& report) {
  auto layer = [&](Layer l, unsigned long flag, std::string how) {
    if (ns.flags & flag) return LayerStatus{l, true, std::move(how)};
    if (!ns.wants(l)) return LayerStatus{l, false, "not requested by the policy"};
    auto refused = ns.refused.find(l);
    return LayerStatus{l, false, refused == ns.refused.end() ? "" : refused->second};
  };
  report.set(layer(Layer::kUserNamespace, CLONE_NEWUSER,
                   plan.identity
                       ? "uid " + std::to_string(plan.inner_uid) + " and gid " + std::to_string(plan.inner_gid) +
                             " mapped to the child's own host id (see identity)"
                       : "identity map of uid " + std::to_string(plan.uid) + " and gid " + std::to_string(plan.gid)));
  report.set(layer(Layer::kPidNamespace, CLONE_NEWPID,
                   plan.init ? "a minimal init is PID 1 and the target its child; every "
                               "descendant dies with the init, which ends with the target"
                             : "the target is PID 1; every descendant dies with it"));
  report.set(layer(Layer::kNetNamespace, CLONE_NEWNET,
                   plan.loopback ? "no interfaces but loopback (up)" : "no interfaces (loopback down)"));
  report.set(layer(Layer::kIpcNamespace, CLONE_NEWIPC, "private System V IPC and POSIX queues"));
  report.set(layer(Layer::kUtsNamespace, CLONE_NEWUTS, "private hostname"));
  report.set(layer(Layer::kMountNamespace, CLONE_NEWNS, "private mount table" + protected_detail));
}

// read_only_host, identity, idmapped_roots (rootfs.hpp).
void build_root_layers(const LandlockPart& landlock, const Substitution& sub, bool root, Plan& plan,
                       LayerReport& report) {
  const LandlockPaths& paths = landlock.paths;
  RootLayers layers = plan_root_and_identity(
      plan, {paths.read, paths.write, paths.execute, sub.workspace, landlock.home_named, landlock.home_write}, root);
  report.set(std::move(layers.read_only_host));
  report.set(std::move(layers.identity));
  report.set(std::move(layers.idmapped_roots));
}

// process_cap, memory_cap, cpu_cap: limits over the whole tree (RLIMIT_NPROC binds any uid but 0;
// root gets a pids cgroup; memory and CPU are cgroups; sandbox/cgroup.hpp). The memory cap also
// sizes a writable private home, which read_only_host reports.
void build_tree_limits(const Policy& policy, Plan& plan, LayerReport& report) {
  for (LayerStatus& l : plan_tree_limits(policy, &plan.cgroups)) report.set(std::move(l));
  if (plan.private_home && plan.home_writable) {
    // A tmpfs's pages are no process's address space: only the memory cap counts them.
    const bool capped = report.at(Layer::kMemoryCap).applied;
    plan.home_size = capped ? "256m" : "64m";
    report.at(Layer::kReadOnlyHost).detail +=
        capped ? " (at most 256 MiB, counted in the memory cap)"
               : " (at most 64 MiB: without the memory cap nothing else would count it)";
  }
}

// The layers every launch applies: no_new_privs, capabilities, session, pdeathsig, close_fds.
void process_layers(const Plan& plan, LayerReport& report) {
  report.set({Layer::kNoNewPrivs, true, "PR_SET_NO_NEW_PRIVS"});
  report.set({Layer::kCapabilities, true,
              plan.have_setpcap ? "effective, permitted, inheritable, ambient and bounding sets emptied; "
                                  "securebits NOROOT|NO_SETUID_FIXUP|NO_CAP_AMBIENT_RAISE locked"
                                : "effective, permitted, inheritable and ambient sets emptied; bounding set kept "
                                  "(no CAP_SETPCAP), which cannot grant anything under no_new_privs"});
  report.set({Layer::kSession, true, "setsid: new session, no controlling terminal"});
  report.set({Layer::kPdeathsig, true, "SIGKILL when the launching thread exits"});
  report.set({Layer::kCloseFds, true, "only fds 0, 1 and 2 stay open"});
}

// sandbox.required: every layer named there must be in force.
void check_required(const Policy& policy, const std::vector<LayerStatus>& layers) {
  for (const Layer layer : policy.required) {
    auto it = std::find_if(layers.begin(), layers.end(), [&](const LayerStatus& l) { return l.layer == layer; });
    if (it == layers.end() || !it->applied)
      throw policy_error(policy,
                         "requires the '" + std::string(to_string(layer)) +
                             "' layer, which is not available: " + (it == layers.end() ? "unknown layer" : it->detail));
  }
}

}  // namespace

PlanPtr prepare(const Policy& policy, const LaunchRequest& request) {
  check_request(request);
  PlanPtr plan(new Plan);
  plan->policy_source = policy.source;
  const Substitution sub = make_substitution(policy, request);
  plan->workspace = sub.workspace;
  plan->executable = request.executable;
  plan->stdio[0] = request.stdin_fd;
  plan->stdio[1] = request.stdout_fd;
  plan->stdio[2] = request.stderr_fd;

  // The order is the builders' dependencies: the root needs the Landlock paths and the namespace
  // flags; the namespace layers describe the identity and the protected paths; the tree limits
  // size the private home the root planned.
  LayerReport report;
  report.set(build_environment(policy, request, sub, *plan));
  report.set(build_rlimits(policy, *plan));
  report.set(build_seccomp(policy, request, *plan));
  const LandlockPart landlock = build_landlock_layers(policy, request, sub, *plan, report);
  const bool root = ::geteuid() == 0;
  const NamespacePart ns = choose_namespaces(policy, root, *plan);
  build_root_layers(landlock, sub, root, *plan, report);
  const std::string protected_detail = build_protected_paths(policy, sub, landlock.paths, ns, *plan);
  build_tree_limits(policy, *plan, report);
  namespace_layers(ns, *plan, protected_detail, report);
  process_layers(*plan, report);
  plan->layers = std::move(report).in_order();
  check_required(policy, plan->layers);
  return plan;
}

std::vector<LayerStatus> layers(const Plan& plan) { return plan.layers; }

}  // namespace sandbox
