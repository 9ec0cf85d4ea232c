#include "cgroup.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sandbox/launch.hpp"

namespace sandbox {
namespace {

namespace fs = std::filesystem;

bool write_text(const std::string& path, const std::string& text, int* err) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return false;
  }
  ssize_t n = ::write(fd, text.data(), text.size());
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

// Our path in hierarchy `controller` ("pids" for v1, "" for the v2 line "0::/path").
std::string own_cgroup(const std::string& controller) {
  std::istringstream lines(read_text("/proc/self/cgroup"));
  std::string line;
  while (std::getline(lines, line)) {
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::istringstream list(controllers);
    std::string c;
    if (controller.empty() && controllers.empty()) return line.substr(second + 1);
    while (std::getline(list, c, ','))
      if (!controller.empty() && c == controller) return line.substr(second + 1);
  }
  return {};
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

PidsCgroupRoot find_root() {
  int err = 0;
  std::string v1 = own_cgroup("pids");
  if (!v1.empty() && ::access("/sys/fs/cgroup/pids/cgroup.procs", W_OK) == 0) {
    std::string root = "/sys/fs/cgroup/pids" + (v1 == "/" ? "" : v1) + "/subagent-sandbox";
    if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
      return {"", "cgroup v1 pids: cannot create " + root + ": " + std::strerror(errno)};
    collect_garbage(root);
    return {root, "cgroup v1 pids under " + root};
  }
  for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    std::string base = mount;
    if (::access((base + "/cgroup.controllers").c_str(), R_OK) != 0) continue;
    if (read_text(base + "/cgroup.controllers").find("pids") == std::string::npos) continue;
    std::string own = own_cgroup("");
    if (own != "/")
      return {"", "cgroup v2: the supervisor's cgroup " + own +
                      " is not the root of its cgroup namespace, so pids cannot be delegated"};
    std::string root = base + "/subagent-sandbox";
    if (!write_text(base + "/cgroup.subtree_control", "+pids", &err))
      return {"", "cgroup v2: cannot enable pids in " + base + ": " + std::strerror(err)};
    if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
      return {"", "cgroup v2: cannot create " + root + ": " + std::strerror(errno)};
    if (!write_text(root + "/cgroup.subtree_control", "+pids", &err))
      return {"", "cgroup v2: cannot enable pids in " + root + ": " + std::strerror(err)};
    collect_garbage(root);
    return {root, "cgroup v2 pids under " + root};
  }
  return {"", "no writable pids cgroup hierarchy (neither cgroup v1 pids nor delegated v2)"};
}

}  // namespace

const PidsCgroupRoot& pids_cgroup_root() {
  static const PidsCgroupRoot root = find_root();
  return root;
}

std::string create_pids_cgroup(const std::string& root, std::uint64_t max) {
  static std::atomic<unsigned long> counter{0};
  std::string dir = root + "/" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    int err = errno;
    throw SandboxError("process cap: cannot create cgroup " + dir + ": " + std::strerror(err));
  }
  int err = 0;
  if (!write_text(dir + "/pids.max", std::to_string(max), &err)) {
    remove_cgroup(dir);
    throw SandboxError("process cap: cannot write " + dir + "/pids.max: " + std::strerror(err));
  }
  return dir;
}

void add_to_cgroup(const std::string& cgroup, pid_t pid) {
  int err = 0;
  if (!write_text(cgroup + "/cgroup.procs", std::to_string(pid), &err))
    throw SandboxError("process cap: cannot move pid " + std::to_string(pid) + " into " + cgroup +
                       ": " + std::strerror(err));
}

void remove_cgroup(const std::string& cgroup) noexcept {
  if (!cgroup.empty()) ::rmdir(cgroup.c_str());
}

}  // namespace sandbox
