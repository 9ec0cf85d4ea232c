#include "sandbox/launch.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "cgroup.hpp"
#include "interpreter.hpp"
#include "landlock.hpp"
#include "namespaces.hpp"
#include "plan.hpp"
#include "rootfs.hpp"
#include "sandbox/workspace_guard.hpp"
#include "seccomp.hpp"
#include "syscalls.hpp"

extern char** environ;

namespace sandbox {
namespace {

namespace fs = std::filesystem;

struct Substitution {
  std::string workspace, child;
  std::vector<std::string> interpreters;  // ${interpreter}: the child script's, resolved (empty: a binary)
  std::string home = kHomePath;           // ${home}: the private home's path in the child's root
};

// Returns false when the template names ${child} and the request has no child directory.
bool substitute(const std::string& in, const Substitution& sub, std::string* out) {
  std::string result = in;
  for (const auto& [key, value] :
       {std::pair<std::string, const std::string*>{"${workspace}", &sub.workspace},
        {"${child}", &sub.child}, {"${home}", &sub.home}}) {
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

struct NamespaceFlag {
  const char* name;  // policy name
  unsigned long flag;
};
constexpr NamespaceFlag kNamespaces[] = {{"user", CLONE_NEWUSER}, {"pid", CLONE_NEWPID},
                                         {"net", CLONE_NEWNET},   {"ipc", CLONE_NEWIPC},
                                         {"uts", CLONE_NEWUTS},   {"mount", CLONE_NEWNS}};

std::string mb(std::uint64_t v) { return std::to_string(v) + " MiB"; }

void add_limit(Plan& plan, int resource, rlim_t soft, rlim_t hard) {
  plan.limits.push_back({resource, {soft, hard}});
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

void reap(pid_t pid) noexcept {
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

const char* step_name(Step step) noexcept {
  switch (step) {
    case Step::kMapsReady:
      return "id_maps_ready";
    case Step::kSignals:
      return "reset_signals";
    case Step::kDumpable:
      return "dumpable_for_id_maps";
    case Step::kPdeathsig:
      return "pdeathsig";
    case Step::kDupStdio:
      return "dup_stdio";
    case Step::kSetsid:
      return "setsid";
    case Step::kCloseFds:
      return "close_fds";
    case Step::kSetgroups:
      return "setgroups";
    case Step::kLoopback:
      return "loopback_up";
    case Step::kMountSlave:
      return "mount_make_slave";
    case Step::kProtect:
      return "protect_read_only";
    case Step::kRlimits:
      return "setrlimit";
    case Step::kSecurebits:
      return "securebits";
    case Step::kCapBounding:
      return "capability_bounding_set";
    case Step::kCapAmbient:
      return "capability_ambient_clear";
    case Step::kCapset:
      return "capset";
    case Step::kNoNewPrivs:
      return "no_new_privs";
    case Step::kChdir:
      return "chdir_workspace";
    case Step::kLandlock:
      return "landlock_restrict_self";
    case Step::kSeccomp:
      return "seccomp_set_mode_filter";
    case Step::kExecve:
      return "execve";
    case Step::kRootClone:
      return "clone_root_path";
    case Step::kRootTmpfs:
      return "root_tmpfs";
    case Step::kRootBuild:
      return "build_root";
    case Step::kPivotRoot:
      return "pivot_root";
    case Step::kIdentity:
      return "set_identity";
    case Step::kReceiveMounts:
      return "receive_root_fds";
    case Step::kCgroupJoin:
      return "join_cgroup";
    case Step::kProcMount:
      return "mount_proc";
    case Step::kHomeMount:
      return "mount_private_home";
    case Step::kInit:
      return "init";
  }
  return "unknown";
}

Plan::~Plan() {
  if (landlock_fd >= 0) ::close(landlock_fd);
}

void PlanDeleter::operator()(Plan* p) const noexcept { delete p; }

PlanPtr prepare(const Policy& policy, const LaunchRequest& request) {
  const std::string& src = policy.source;
  auto error = [&](const std::string& what) { return SandboxError("policy " + src + ": " + what); };
  if (request.executable.empty() || request.executable.front() != '/')
    throw SandboxError("launch request: executable must be an absolute path (got '" +
                       request.executable + "')");
  if (request.argv.empty()) throw SandboxError("launch request: argv must hold at least argv[0]");
  if (!request.workspace.is_absolute())
    throw SandboxError("launch request: workspace must be an absolute path (got '" +
                       request.workspace.string() + "')");
  std::error_code ec;
  if (!fs::is_directory(request.workspace, ec))
    throw SandboxError("launch request: workspace '" + request.workspace.string() +
                       "' is not an existing directory");
  if (!request.allow_unsafe_workspace) check_workspace(request.workspace, "launch request: workspace");
  for (int fd : {request.stdin_fd, request.stdout_fd, request.stderr_fd})
    if (::fcntl(fd, F_GETFD) < 0)
      throw SandboxError("launch request: stdio fd " + std::to_string(fd) + " is not open");

  PlanPtr plan(new Plan);
  plan->policy_source = src;
  Substitution sub{
      request.workspace.lexically_normal().string(),
      request.child_dir.empty() ? std::string() : request.child_dir.lexically_normal().string(),
      {},
      kHomePath};
  {
    auto path = policy.env_set.find("PATH");
    std::string path_env = "/usr/bin:/bin";
    if (path != policy.env_set.end()) substitute(path->second, sub, &path_env);
    sub.interpreters = detail::script_interpreters(request.executable, path_env);
  }
  plan->workspace = sub.workspace;
  plan->executable = request.executable;
  plan->stdio[0] = request.stdin_fd;
  plan->stdio[1] = request.stdout_fd;
  plan->stdio[2] = request.stderr_fd;

  // argv / envp: every string is final before fork; the child only reads the pointer arrays.
  plan->argv_store = request.argv;
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
      throw error("sandbox.environment.set." + name +
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
    plan->env_store.push_back(name + "=" + value);
    env_names += (env_names.empty() ? "" : " ") + name;
  }
  for (auto& s : plan->argv_store) plan->argv.push_back(s.data());
  plan->argv.push_back(nullptr);
  for (auto& s : plan->env_store) plan->envp.push_back(s.data());
  plan->envp.push_back(nullptr);

  const Rlimits& r = policy.rlimits;
  constexpr rlim_t kMiB = 1024 * 1024;
  std::string limits;
#ifdef SUBAGENT_SANITIZER_BUILD
  // ASan and TSan reserve terabytes of address space for shadow memory before main, so a sanitized
  // child under RLIMIT_AS dies at once. Sanitizer builds run tests only; the layer says what is missing.
  if (r.address_space_mb) limits += "address space not limited (sanitizer build), ";
#else
  if (r.address_space_mb) {
    add_limit(*plan, RLIMIT_AS, r.address_space_mb * kMiB, r.address_space_mb * kMiB);
    limits += "address space " + mb(r.address_space_mb) + ", ";
  }
#endif
  if (r.cpu_seconds) {  // SIGXCPU at the soft limit, SIGKILL one second later
    add_limit(*plan, RLIMIT_CPU, r.cpu_seconds, r.cpu_seconds + 1);
    limits += "cpu " + std::to_string(r.cpu_seconds) + " s, ";
  }
  if (r.open_files) {
    add_limit(*plan, RLIMIT_NOFILE, r.open_files, r.open_files);
    limits += "open files " + std::to_string(r.open_files) + ", ";
  }
  add_limit(*plan, RLIMIT_FSIZE, r.file_size_mb * kMiB, r.file_size_mb * kMiB);
  limits += "file size " + mb(r.file_size_mb) + ", ";
  add_limit(*plan, RLIMIT_CORE, r.core_mb * kMiB, r.core_mb * kMiB);
  limits += "core " + mb(r.core_mb);
  if (r.processes) {
    add_limit(*plan, RLIMIT_NPROC, r.processes, r.processes);
    limits += ", processes " + std::to_string(r.processes);
  }

  plan->bpf = compile_seccomp(policy);
  plan->init = request.init;
  if (plan->init) plan->init_bpf = compile_init_seccomp();

  std::string dropped;
  LandlockPaths paths;
  paths.read = substitute_all(policy.read_paths, sub, &dropped);
  paths.write = substitute_all(policy.write_paths, sub, &dropped);
  paths.execute = substitute_all(policy.exec_paths, sub, &dropped);
  if (!request.allow_unsafe_workspace) {
    for (const std::string& root : paths.write) {
      std::error_code dir_ec;
      if (fs::is_directory(root, dir_ec)) check_workspace(root, "policy " + src + ": write root");
    }
  }
  paths.deny_tcp = policy.network == "none";
  {
    bool names_interpreter = false;
    for (const auto& e : policy.exec_paths) names_interpreter |= e == "${interpreter}";
    plan->exec_hint = detail::exec_refusal_hint(request.executable, sub.interpreters, paths.execute, names_interpreter);
  }
  LandlockRuleset landlock = build_landlock(paths, sub.workspace);
  plan->landlock_fd = landlock.fd;
  // The private home: made whenever the policy names ${home}, writable when it is a write root.
  const auto lists = [](const std::vector<std::string>& v, const char* t) {
    return std::find(v.begin(), v.end(), t) != v.end();
  };
  const bool home_read = lists(policy.read_paths, "${home}");
  const bool home_write = lists(policy.write_paths, "${home}");
  bool home_named = home_read || home_write;
  for (const auto& [name, value] : policy.env_set) home_named |= value.find("${home}") != std::string::npos;
  plan->home_access = landlock_directory_access(landlock.abi, home_read || home_write, home_write);
  if (!dropped.empty())
    landlock.detail += ", dropped (no child directory in the request): " + dropped;

  // Namespaces: what the policy asks for, minus what this kernel (or our privilege) refuses.
  const bool root = ::geteuid() == 0;
  std::map<std::string, std::string> ns_detail;
  auto wants = [&](const char* name) {
    return std::find(policy.namespaces.begin(), policy.namespaces.end(), name) !=
           policy.namespaces.end();
  };
  unsigned long flags = 0;
  if (wants("user")) {
    if (namespaces_supported(CLONE_NEWUSER))
      flags |= CLONE_NEWUSER;
    else
      ns_detail["user"] = "the kernel refused CLONE_NEWUSER (disabled, or nested too deeply)";
  }
  for (const NamespaceFlag& ns : kNamespaces) {
    if (ns.flag == CLONE_NEWUSER || !wants(ns.name)) continue;
    unsigned long with_user = ns.flag | (flags & CLONE_NEWUSER);
    if (!root && !(flags & CLONE_NEWUSER))
      ns_detail[ns.name] = "needs a user namespace when the supervisor is not root";
    else if (namespaces_supported(with_user))
      flags |= ns.flag;
    else
      ns_detail[ns.name] = "the kernel refused it";
  }
  if (flags != 0 && !namespaces_supported(flags)) {
    throw SandboxError("policy " + src +
                       ": namespaces work one by one but not together on this kernel");
  }
  plan->clone_flags = flags;
  plan->user_ns = flags & CLONE_NEWUSER;
  plan->uid = ::geteuid();
  plan->gid = ::getegid();
  plan->drop_groups = root;
  plan->dumpable_for_maps = plan->user_ns && !root;
  plan->have_setpcap = plan->user_ns || has_cap_setpcap();
  plan->loopback = policy.network == "loopback" && (flags & CLONE_NEWNET);
  RootLayers root_layers = plan_root_and_identity(
      *plan, {paths.read, paths.write, paths.execute, sub.workspace, home_named, home_write}, root);

  // Protected paths inside write roots: Landlock rights only add up, so they are bind-mounted
  // read-only over themselves in the child's mount namespace (EROFS for every write beneath).
  std::string protected_detail;
  if (!policy.protected_paths.empty()) {
    std::vector<std::string> targets;
    for (const std::string& entry : policy.protected_paths) {
      std::string resolved;
      if (!substitute(entry, sub, &resolved)) continue;
      if (resolved.front() == '/') {
        targets.push_back(fs::path(resolved).lexically_normal().string());
      } else {
        for (const std::string& write_root : paths.write) {
          std::error_code dir_ec;
          if (!fs::is_directory(write_root, dir_ec))
            continue;  // e.g. /dev/null: nothing lies inside it
          targets.push_back((fs::path(write_root) / resolved).lexically_normal().string());
        }
      }
    }
    std::string missing;
    for (const std::string& target : targets) {
      struct statvfs vfs {};
      if (::statvfs(target.c_str(), &vfs) != 0) {
        if (errno != ENOENT)
          throw error("protected path '" + target +
                      "' cannot be inspected: " + std::strerror(errno));
        missing += (missing.empty() ? "" : ", ") + target;
        continue;
      }
      const unsigned long locked =
          MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME;
      plan->protect.push_back({target, MS_BIND | MS_REMOUNT | MS_RDONLY | (vfs.f_flag & locked)});
      protected_detail += (protected_detail.empty() ? "" : ", ") + target;
    }
    if (!plan->protect.empty() && !(flags & CLONE_NEWNS))
      throw error(
          "protected paths (" + protected_detail +
          ") need the mount namespace, which is not available: " +
          (ns_detail["mount"].empty() ? "not requested by the policy" : ns_detail["mount"]));
    protected_detail = protected_detail.empty() ? "" : "; read-only: " + protected_detail;
    if (!missing.empty()) protected_detail += "; protected but absent: " + missing;
  }

  // Limits over the whole tree: processes (RLIMIT_NPROC binds any uid but 0; root gets a pids
  // cgroup), memory and CPU (cgroups; sandbox/cgroup.hpp).
  std::vector<LayerStatus> tree_layers = plan_tree_limits(policy, &plan->cgroups);
  if (plan->private_home && plan->home_writable) {
    // A tmpfs's pages are no process's address space: only the memory cap counts them.
    const bool capped = std::any_of(tree_layers.begin(), tree_layers.end(),
                                    [](const LayerStatus& l) { return l.layer == Layer::kMemoryCap && l.applied; });
    plan->home_size = capped ? "256m" : "64m";
    root_layers.read_only_host.detail +=
        capped ? " (at most 256 MiB, counted in the memory cap)"
               : " (at most 64 MiB: without the memory cap nothing else would count it)";
  }

  auto ns_layer = [&](Layer layer, const char* name, unsigned long flag, std::string how) {
    if (flags & flag) return LayerStatus{layer, true, std::move(how)};
    if (!wants(name)) return LayerStatus{layer, false, "not requested by the policy"};
    return LayerStatus{layer, false, ns_detail[name]};
  };
  const bool bounding = plan->have_setpcap;
  plan->layers = {
      {Layer::kNoNewPrivs, true, "PR_SET_NO_NEW_PRIVS"},
      {Layer::kCapabilities, true,
       bounding ? "effective, permitted, inheritable, ambient and bounding sets emptied; "
                  "securebits NOROOT|NO_SETUID_FIXUP|NO_CAP_AMBIENT_RAISE locked"
                : "effective, permitted, inheritable and ambient sets emptied; bounding set kept "
                  "(no CAP_SETPCAP), which cannot grant anything under no_new_privs"},
      {Layer::kSession, true, "setsid: new session, no controlling terminal"},
      {Layer::kPdeathsig, true, "SIGKILL when the launching thread exits"},
      {Layer::kCloseFds, true, "only fds 0, 1 and 2 stay open"},
      {Layer::kCleanEnv, true, std::to_string(env.size()) + " variables: " + env_names},
      {Layer::kRlimits, true, limits},
      {Layer::kLandlock, landlock.fd >= 0, landlock.detail},
      {Layer::kLandlockScopes, landlock.scoped,
       landlock.scoped ? "signals and abstract unix sockets scoped to the sandbox"
                       : "needs Landlock ABI 6 (Linux 6.12); this kernel has ABI " +
                             std::to_string(landlock.abi)},
      {Layer::kSeccomp, true,
       std::to_string(plan->bpf.size()) + " BPF instructions; see the syscall table"},
      ns_layer(Layer::kUserNamespace, "user", CLONE_NEWUSER,
               plan->identity ? "uid " + std::to_string(plan->inner_uid) + " and gid " +
                                    std::to_string(plan->inner_gid) +
                                    " mapped to the child's own host id (see identity)"
                              : "identity map of uid " + std::to_string(plan->uid) +
                                    " and gid " + std::to_string(plan->gid)),
      ns_layer(Layer::kPidNamespace, "pid", CLONE_NEWPID,
               plan->init ? "a minimal init is PID 1 and the target its child; every "
                            "descendant dies with the init, which ends with the target"
                          : "the target is PID 1; every descendant dies with it"),
      ns_layer(
          Layer::kNetNamespace, "net", CLONE_NEWNET,
          plan->loopback ? "no interfaces but loopback (up)" : "no interfaces (loopback down)"),
      ns_layer(Layer::kIpcNamespace, "ipc", CLONE_NEWIPC, "private System V IPC and POSIX queues"),
      ns_layer(Layer::kUtsNamespace, "uts", CLONE_NEWUTS, "private hostname"),
      ns_layer(Layer::kMountNamespace, "mount", CLONE_NEWNS, "private mount table" + protected_detail),
      root_layers.read_only_host,
      root_layers.identity,
      root_layers.idmapped_roots,
  };
  for (LayerStatus& l : tree_layers) plan->layers.push_back(std::move(l));
  for (const std::string& name : policy.required) {  // names parse_policy checked
    const std::optional<Layer> layer = parse_layer(name);
    auto it = std::find_if(plan->layers.begin(), plan->layers.end(),
                           [&](const LayerStatus& l) { return layer && l.layer == *layer; });
    if (it == plan->layers.end() || !it->applied)
      throw error("requires the '" + name + "' layer, which is not available: " +
                  (it == plan->layers.end() ? "unknown layer" : it->detail));
  }
  return plan;
}

std::vector<LayerStatus> layers(const Plan& plan) { return plan.layers; }

Child launch(const Plan& plan) {
  int status_pipe[2], sync_pipe[2];  // sync: a socket, to pass the new root's fds (rootfs.hpp)
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: pipe2 failed: ") + std::strerror(err));
  }
  Fd status_read(status_pipe[0]), status_write(status_pipe[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync_pipe) != 0) {
    int err = errno;
    throw SandboxError(std::string("launch: socketpair failed: ") + std::strerror(err));
  }
  Fd sync_read(sync_pipe[0]), sync_write(sync_pipe[1]);

  Child child;
  std::optional<LaunchCgroups> cgroups;
  if (!plan.cgroups.empty()) cgroups.emplace(plan.cgroups);
  ChildFds fds{status_write.get(), sync_read.get(), cgroups ? cgroups->join_fds() : nullptr,
               cgroups ? cgroups->join_count() : 0};
  const int into_fd = cgroups ? cgroups->clone_into_fd() : -1;

  // No parent signal handler may run in the child (it would act on the parent's state).
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  struct clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = plan.clone_flags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (into_fd >= 0) {  // cgroup v2: born inside its cgroup, no migration at all
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<std::uint64_t>(into_fd);
  }
  bool v2_by_pid = false;
  long pid = sys::clone3(&args);
  if (pid < 0 && errno == EINVAL && into_fd >= 0) {  // clone3 before Linux 5.7: no CLONE_INTO_CGROUP
    args.flags &= ~static_cast<std::uint64_t>(CLONE_INTO_CGROUP);
    args.cgroup = 0;
    pid = sys::clone3(&args);
    v2_by_pid = true;
  }
  if (pid < 0 && errno == ENOSYS) {  // e.g. the supervisor itself runs under such a filter
    pid = sys::clone_legacy(plan.clone_flags | CLONE_PIDFD | SIGCHLD, &pidfd);
    v2_by_pid = into_fd >= 0;
  }
  if (pid == 0) run_child(plan, fds);
  int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (cgroups) cgroups->close_fds();
  if (pid < 0)
    throw SandboxError(std::string("sandbox step 'clone' failed: ") + std::strerror(clone_errno));
  child.pid = static_cast<pid_t>(pid);
  child.pidfd = pidfd;
  status_write.reset();
  sync_read.reset();

  auto abandon = [&]() noexcept {
    ::kill(child.pid, SIGKILL);
    reap(child.pid);
    ::close(child.pidfd);
  };
  // Reads one record: EOF means execve succeeded; a record names a step (kMapsReady, or a failure).
  auto read_status = [&](StatusRecord* record) {
    ssize_t n;
    while ((n = ::read(status_read.get(), record, sizeof *record)) < 0 && errno == EINTR) {
    }
    if (n == 0 || n == static_cast<ssize_t>(sizeof *record)) return n != 0;
    int read_errno = errno;
    abandon();
    throw SandboxError(std::string("launch: reading the child's status failed: ") +
                       (n < 0 ? std::strerror(read_errno) : "short record"));
  };
  auto step_failed = [&](const StatusRecord& record) -> SandboxError {
    abandon();
    std::string what =
        std::string("sandbox step '") + step_name(static_cast<Step>(record.step)) + "' failed";
    if (static_cast<Step>(record.step) == Step::kExecve) what += " for '" + plan.executable + "'";
    what += std::string(": ") + std::strerror(record.error);
    if (static_cast<Step>(record.step) == Step::kExecve && record.error == EACCES && !plan.exec_hint.empty())
      what += " (" + plan.exec_hint + ")";
    if (static_cast<Step>(record.step) == Step::kExecve) throw ExecError(what, record.error);
    return SandboxError(what);
  };
  StatusRecord record{};
  if (plan.dumpable_for_maps) {
    if (!read_status(&record)) {
      abandon();
      throw SandboxError("launch: the child exited before its id maps were written");
    }
    if (static_cast<Step>(record.step) != Step::kMapsReady) throw step_failed(record);
  }
  std::vector<int> root_fds;
  try {
    if (plan.identity) {
      const uid_t outside = kIdentityBase + static_cast<uid_t>(child.pid);
      write_id_maps(child.pid, plan.inner_uid, outside, plan.inner_gid, outside, plan.drop_groups);
    } else if (plan.user_ns) {
      write_id_maps(child.pid, plan.uid, plan.gid, plan.drop_groups);
    }
    if (v2_by_pid) cgroups->add_to_v2(child.pid);
    if (plan.parent_clones) root_fds = clone_roots(plan, child.pid);
    send_release(sync_write.get(), root_fds);
  } catch (...) {
    for (int fd : root_fds) ::close(fd);
    abandon();
    throw;
  }
  for (int fd : root_fds) ::close(fd);
  sync_write.reset();

  if (!read_status(&record)) {  // close-on-exec closed the pipe: execve succeeded
    if (cgroups) child.cgroups = cgroups->release();
    return child;
  }
  throw step_failed(record);
}

void release(const Child& child) noexcept { remove_cgroups(child.cgroups); }

}  // namespace sandbox
