#include "cgroup.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "sandbox/cgroup_leftovers.hpp"
#include "sandbox/launch.hpp"

namespace sandbox {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDirName = "subagent-sandbox";

bool write_text(const std::string& path, const std::string& text, int* err) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  ssize_t n;
  while ((n = ::write(fd, text.data(), text.size())) < 0 && errno == EINTR) {
  }
  *err = n < 0 ? errno : 0;
  ::close(fd);
  return n == static_cast<ssize_t>(text.size());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool has_word(const std::string& list, char sep, const std::string& word) {
  std::istringstream in(list);
  std::string w;
  while (std::getline(in, w, sep))
    if (w == word) return true;
  return false;
}

// What find_root reads of /proc/self: read once for every controller.
struct ProcSelf {
  std::string cgroup = read_text("/proc/self/cgroup");
  std::string mountinfo = read_text("/proc/self/mountinfo");
};

// Our path in the hierarchy carrying v1 `controller`, or in the v2 hierarchy ("0::/path") when
// `controller` is empty.
std::string own_cgroup(const ProcSelf& self, const std::string& controller) {
  std::istringstream lines(self.cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    if (controller.empty() ? controllers.empty() : has_word(controllers, ',', controller))
      return line.substr(second + 1);
  }
  return {};
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Mount {
  std::string root, point;
};

// The first mount of a cgroup (v1) hierarchy carrying `controller`, or of cgroup2 when empty.
bool find_mount(const ProcSelf& self, const std::string& controller, Mount* found) {
  std::istringstream lines(self.mountinfo);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string w;
    while (fields >> w) f.push_back(w);
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size()) continue;  // fields: ... root point options [optional...] - type source super
    const std::string& type = f[dash + 1];
    const std::string& options = f[dash + 3];
    if (controller.empty() ? type != "cgroup2" : type != "cgroup" || !has_word(options, ',', controller)) continue;
    *found = {unescape(f[3]), unescape(f[4])};
    return true;
  }
  return false;
}

// Where our own cgroup of that hierarchy appears in the mount: mount point + (own - mount root).
bool own_directory(const Mount& m, const std::string& own, std::string* dir) {
  if (own.empty()) return false;
  fs::path rel = fs::path(own).lexically_relative(m.root);
  if (rel.empty() || *rel.begin() == "..") return false;
  *dir = (fs::path(m.point) / rel).lexically_normal().string();
  while (dir->size() > 1 && dir->back() == '/') dir->pop_back();
  return true;
}

// Removes leftovers named "<pid>-<n>" whose supervisor is gone. A live supervisor's cgroups are
// left alone: one just created is empty until its child is moved in.
void collect_garbage(const std::string& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    pid_t owner = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (owner <= 0 || ::kill(owner, 0) == 0 || errno == EPERM) continue;
    ::rmdir(entry.path().c_str());  // EBUSY while tasks remain
  }
}

std::string uid_text() { return "uid " + std::to_string(::geteuid()); }

std::string cannot(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err) +
         (err == EACCES || err == EPERM || err == EROFS
              ? " (" + uid_text() + "; needs root or a cgroup delegated to this user)"
              : "");
}

ControllerRoot find_v1(const ProcSelf& self, const std::string& name) {
  Mount m;
  if (!find_mount(self, name, &m)) return {"", 0, false, "no cgroup v1 hierarchy carries " + name};
  std::string own;
  if (!own_directory(m, own_cgroup(self, name), &own))
    return {"", 1, false, "cgroup v1 " + name + ": this process's cgroup is outside the mount at " + m.point};
  std::string parent = own + "/" + kDirName;
  if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
    return {"", 1, false, "cgroup v1 " + name + ": " + cannot("cannot create", parent, errno)};
  if (::access((parent + "/tasks").c_str(), W_OK) != 0)
    return {"", 1, false, "cgroup v1 " + name + ": " + cannot("cannot join", parent, errno)};
  collect_garbage(parent);
  bool swap = name == "memory" && exists(parent + "/memory.memsw.limit_in_bytes");
  return {parent, 1, swap, "cgroup v1 " + name + " under " + parent};
}

// cgroup v2: usable when we sit at the root of our cgroup namespace (a container, or the host's
// root cgroup), where processes may live beside child groups that enable controllers.
ControllerRoot find_v2(const ProcSelf& self, const std::string& name) {
  Mount m;
  if (!find_mount(self, "", &m)) return {"", 0, false, "no cgroup2 mount"};
  const std::string controllers = read_text(m.point + "/cgroup.controllers");
  if (!has_word(controllers.substr(0, controllers.find('\n')), ' ', name))
    return {"", 2, false, "cgroup v2 at " + m.point + " does not offer the " + name + " controller"};
  const std::string own = own_cgroup(self, "");
  if (own != "/")
    return {"", 2, false,
            "cgroup v2: the supervisor's cgroup " + own + " is not the root of its cgroup namespace, so " + name +
                " cannot be delegated"};
  int err = 0;
  const std::string base = m.point, parent = base + "/" + kDirName;
  if (!write_text(base + "/cgroup.subtree_control", "+" + name, &err))
    return {"", 2, false,
            "cgroup v2: " + cannot("cannot enable " + name + " in", base + "/cgroup.subtree_control", err)};
  if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
    return {"", 2, false, "cgroup v2: " + cannot("cannot create", parent, errno)};
  if (!write_text(parent + "/cgroup.subtree_control", "+" + name, &err))
    return {"", 2, false,
            "cgroup v2: " + cannot("cannot enable " + name + " in", parent + "/cgroup.subtree_control", err)};
  collect_garbage(parent);
  // memory.swap.max is absent without swap accounting (CONFIG_MEMCG_SWAP, swapaccount=0): then
  // swap could extend the cap, and the layer says so.
  bool swap = name == "memory" && exists(base + "/" + kDirName + "/memory.swap.max");
  return {parent, 2, swap, "cgroup v2 " + name + " under " + parent};
}

ControllerRoot find_root(const ProcSelf& self, Controller c) {
  const std::string name = to_string(c);
  ControllerRoot v1 = find_v1(self, name);
  if (!v1.parent.empty()) return v1;
  ControllerRoot v2 = find_v2(self, name);
  if (!v2.parent.empty()) return v2;
  if (v1.version == 1) return v1;  // mounted as v1 but unusable: that is the reason that matters
  return {"", 0, false, v1.detail + "; " + v2.detail};
}

void fail_write(const std::string& dir, const char* file, const std::string& text, int err) {
  throw SandboxError("tree limits: cannot write '" + text + "' to " + dir + "/" + file + ": " + std::strerror(err));
}

void write_or_throw(const std::string& dir, const char* file, const std::string& text) {
  int err = 0;
  if (!write_text(dir + "/" + file, text, &err)) fail_write(dir, file, text, err);
}

}  // namespace

const char* to_string(Controller c) noexcept {
  switch (c) {
    case Controller::kPids:
      return "pids";
    case Controller::kMemory:
      return "memory";
    case Controller::kCpu:
      return "cpu";
  }
  return "unknown";
}

const ControllerRoot& cgroup_root(Controller c) {
  static std::once_flag once;
  static std::array<ControllerRoot, kControllerCount> roots;
  std::call_once(once, [] {
    const ProcSelf self;
    for (unsigned i = 0; i < kControllerCount; ++i) roots[i] = find_root(self, static_cast<Controller>(i));
  });
  return roots[static_cast<unsigned>(c)];
}

void CgroupPlan::add(Controller c, const ControllerRoot& root) {
  const unsigned bit = 1U << static_cast<unsigned>(c);
  for (Hierarchy& h : hierarchies) {
    if (h.parent == root.parent) {
      h.controllers |= bit;
      h.swap_file = h.swap_file || root.swap_file;
      return;
    }
  }
  hierarchies.push_back({root.parent, root.version, bit, root.swap_file});
}

LaunchCgroups::LaunchCgroups(const CgroupPlan& plan) {
  static std::atomic<unsigned long> counter{0};
  const std::string name = std::to_string(::getpid()) + "-" + std::to_string(++counter);
  try {
    for (const CgroupPlan::Hierarchy& h : plan.hierarchies) {
      const std::string dir = h.parent + "/" + name;
      if (::mkdir(dir.c_str(), 0700) != 0) {
        int err = errno;
        throw SandboxError("tree limits: cannot create cgroup " + dir + ": " + std::strerror(err));
      }
      dirs_.push_back(dir);
      auto has = [&](Controller c) { return (h.controllers >> static_cast<unsigned>(c)) & 1; };
      const CgroupLimits& l = plan.limits;
      if (has(Controller::kPids)) write_or_throw(dir, "pids.max", std::to_string(l.pids_max));
      if (has(Controller::kMemory)) {
        const std::string bytes = std::to_string(l.memory_bytes);
        if (h.version == 1) {
          // memsw (memory + swap) may not be below the memory limit: memory first.
          write_or_throw(dir, "memory.limit_in_bytes", bytes);
          if (h.swap_file) write_or_throw(dir, "memory.memsw.limit_in_bytes", bytes);
          // Without swap accounting, swappiness 0 keeps the group's pages out of swap (v1 limit
          // reclaim honours 0 strictly), so swap cannot extend the cap either way.
          else
            write_or_throw(dir, "memory.swappiness", "0");
        } else {
          write_or_throw(dir, "memory.max", bytes);
          if (h.swap_file) write_or_throw(dir, "memory.swap.max", "0");
        }
      }
      if (has(Controller::kCpu)) {
        if (h.version == 1) {
          write_or_throw(dir, "cpu.cfs_period_us", std::to_string(kCpuPeriodUs));
          write_or_throw(dir, "cpu.cfs_quota_us", std::to_string(l.cpu_quota_us));
        } else {
          write_or_throw(dir, "cpu.max", std::to_string(l.cpu_quota_us) + " " + std::to_string(kCpuPeriodUs));
        }
      }
      if (h.version == 1) {
        int fd = ::open((dir + "/tasks").c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
          int err = errno;
          throw SandboxError("tree limits: cannot open " + dir + "/tasks: " + std::strerror(err));
        }
        join_fds_[join_count_++] = fd;
      } else {
        v2_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (v2_fd_ < 0) {
          int err = errno;
          throw SandboxError("tree limits: cannot open " + dir + ": " + std::strerror(err));
        }
        v2_dir_ = dir;
      }
    }
  } catch (...) {
    close_fds();
    remove_cgroups(dirs_);
    throw;
  }
}

LaunchCgroups::~LaunchCgroups() {
  close_fds();
  remove_cgroups(dirs_);
}

void LaunchCgroups::add_to_v2(pid_t pid) const {
  int err = 0;
  if (!write_text(v2_dir_ + "/cgroup.procs", std::to_string(pid), &err))
    throw SandboxError("tree limits: cannot move pid " + std::to_string(pid) + " into " + v2_dir_ + ": " +
                       std::strerror(err));
}

void LaunchCgroups::close_fds() noexcept {
  for (int i = 0; i < join_count_; ++i) ::close(join_fds_[i]);
  join_count_ = 0;
  if (v2_fd_ >= 0) ::close(v2_fd_);
  v2_fd_ = -1;
}

std::vector<std::string> LaunchCgroups::release() noexcept {
  std::vector<std::string> out;
  out.swap(dirs_);
  return out;
}

std::vector<LayerStatus> plan_tree_limits(const Policy& policy, CgroupPlan* plan) {
  const Rlimits& r = policy.rlimits;
  const TreeLimits& t = policy.tree_limits;
  LayerStatus process{Layer::kProcessCap, false, "the policy sets no process limit"};
  if (r.processes && ::getuid() != 0) {
    process = {Layer::kProcessCap, true, "RLIMIT_NPROC " + std::to_string(r.processes) + " (" + uid_text() + ")"};
  } else if (r.processes) {
    const ControllerRoot& cg = cgroup_root(Controller::kPids);
    if (!cg.parent.empty()) {
      plan->add(Controller::kPids, cg);
      plan->limits.pids_max = r.processes;
      process = {Layer::kProcessCap, true, "pids.max " + std::to_string(r.processes) + "; a per-launch " + cg.detail};
    } else {
      process = {Layer::kProcessCap, false, "running as root, where RLIMIT_NPROC does not bind, and " + cg.detail};
    }
  }

  LayerStatus memory{Layer::kMemoryCap, false, "the policy sets no memory cap (tree_limits.memory_mb)"};
  if (t.memory_mb) {
    const ControllerRoot& cg = cgroup_root(Controller::kMemory);
    if (!cg.parent.empty()) {
      plan->add(Controller::kMemory, cg);
      plan->limits.memory_bytes = t.memory_mb << 20;
      const std::string swap = cg.version == 1
                                   ? (cg.swap_file ? "swap included: memory.memsw.limit_in_bytes"
                                                   : "swap excluded: no swap accounting, memory.swappiness 0")
                               : cg.swap_file ? "swap excluded: memory.swap.max 0"
                                              : "no swap accounting (no memory.swap.max): swap may extend the cap";
      memory = {Layer::kMemoryCap, true,
                std::to_string(t.memory_mb) + " MiB over the whole tree (" + swap +
                    "); beyond it the OOM killer ends a process of the tree; a per-launch " + cg.detail};
    } else {
      memory = {Layer::kMemoryCap, false, cg.detail};
    }
  }

  LayerStatus cpu{Layer::kCpuCap, false, "the policy sets no CPU quota (tree_limits.cpu_percent)"};
  if (t.cpu_percent) {
    const ControllerRoot& cg = cgroup_root(Controller::kCpu);
    if (!cg.parent.empty()) {
      plan->add(Controller::kCpu, cg);
      plan->limits.cpu_quota_us = t.cpu_percent * kCpuPeriodUs / 100;
      cpu = {Layer::kCpuCap, true,
             std::to_string(t.cpu_percent) + "% of one CPU over the whole tree (CFS quota " +
                 std::to_string(plan->limits.cpu_quota_us) + " us per " + std::to_string(kCpuPeriodUs) +
                 " us period); a per-launch " + cg.detail};
    } else {
      cpu = {Layer::kCpuCap, false, cg.detail};
    }
  }
  return {process, memory, cpu};
}

std::vector<LayerStatus> tree_limit_support() {
  const bool root = ::geteuid() == 0;
  const ControllerRoot& pids = cgroup_root(Controller::kPids);
  const ControllerRoot& memory = cgroup_root(Controller::kMemory);
  const ControllerRoot& cpu = cgroup_root(Controller::kCpu);
  return {
      !root ? LayerStatus{Layer::kProcessCap, true, "RLIMIT_NPROC binds this non-root uid"}
      : pids.parent.empty()
          ? LayerStatus{Layer::kProcessCap, false, "running as root (RLIMIT_NPROC does not bind) and " + pids.detail}
          : LayerStatus{Layer::kProcessCap, true, pids.detail},
      {Layer::kMemoryCap, !memory.parent.empty(), memory.detail},
      {Layer::kCpuCap, !cpu.parent.empty(), cpu.detail},
  };
}

void remove_cgroups(const std::vector<std::string>& dirs) noexcept {
  for (const std::string& dir : dirs) ::rmdir(dir.c_str());
}

namespace {

// When the process `pid` started, in seconds since the epoch (its /proc/<pid>/stat start time after
// the boot time of /proc/stat); -1 when there is no such process or it is a zombie (the dead
// supervisor itself, not yet reaped).
double process_start(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {  // field 22: starttime, in clock ticks since boot
    if (i == 3 && (f == "Z" || f == "X")) return -1;
    if (i < 22) continue;
    std::istringstream boot_lines(read_text("/proc/stat"));
    for (std::string line; std::getline(boot_lines, line);)
      if (line.rfind("btime ", 0) == 0)
        return std::stod(line.substr(6)) + std::stod(f) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return -1;
}

}  // namespace

CgroupLeftovers remove_dead_supervisor_cgroups(pid_t pid, std::chrono::milliseconds wait) noexcept {
  CgroupLeftovers out;
  try {
    if (pid <= 0) return out;
    double reused_since = -1;  // the start of a process that has the pid now
    if (::kill(pid, 0) == 0 || errno == EPERM) reused_since = process_start(pid);
    const std::string prefix = std::to_string(pid) + "-";
    std::vector<std::string> dirs;
    for (unsigned i = 0; i < kControllerCount; ++i) {
      const ControllerRoot& root = cgroup_root(static_cast<Controller>(i));
      if (root.parent.empty()) continue;
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(root.parent, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(prefix, 0) != 0 || name.find_first_not_of("0123456789", prefix.size()) != std::string::npos ||
            name.size() == prefix.size() || !entry.is_directory(ec))
          continue;
        struct stat st {};
        if (::stat(entry.path().c_str(), &st) != 0) continue;
        if (reused_since >= 0 && static_cast<double>(st.st_ctim.tv_sec) >= reused_since) continue;
        if (std::find(dirs.begin(), dirs.end(), entry.path().string()) == dirs.end())
          dirs.push_back(entry.path().string());
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (const std::string& dir : dirs) {
      for (;;) {
        if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) {
          out.removed.push_back(dir);
          break;
        }
        if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) {
          out.busy.push_back(dir + ": " + std::strerror(errno));
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  } catch (...) {
  }
  return out;
}

}  // namespace sandbox
