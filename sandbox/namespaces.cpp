#include "namespaces.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "sandbox/launch.hpp"
#include "syscalls.hpp"

namespace sandbox {
namespace {

// Clones a short-lived child with `flags` and returns the status `in_child` exits with there (raw
// syscalls only: the child is a copy of a possibly multi-threaded process); -1 when the clone
// failed (errno says why), 256 when the child died by a signal.
std::atomic<std::size_t> g_probes{0};

int probe_in_child(unsigned long flags, int (*in_child)()) {
  g_probes.fetch_add(1);
  long pid = sys::clone_legacy(flags | SIGCHLD, nullptr);
  if (pid < 0) return -1;
  if (pid == 0) ::_exit(in_child());
  int status = 0;
  while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 256;
}

// One answer per flag set, computed once by a probe. Thread-safe; each answer type has its own cache.
template <class T>
struct Cache {
  std::mutex mutex;
  std::map<unsigned long, T> answers;

  template <class Probe>
  T get(unsigned long flags, Probe probe) {
    std::lock_guard lock(mutex);
    auto it = answers.find(flags);
    if (it != answers.end()) return it->second;
    return answers.emplace(flags, probe()).first->second;
  }
  std::optional<T> known(unsigned long flags) {
    std::lock_guard lock(mutex);
    auto it = answers.find(flags);
    return it == answers.end() ? std::nullopt : std::optional<T>(it->second);
  }
};

Cache<bool>& supported_cache() {
  static Cache<bool> cache;
  return cache;
}
Cache<int>& proc_cache() {
  static Cache<int> cache;
  return cache;
}

// What this process has learnt from its own launches: a clone refused a namespace, or a child's
// procfs mount was refused. From then on every answer is a probe's.
std::atomic<bool> g_clone_refused{false};
std::atomic<bool> g_proc_refused{false};

void write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw SandboxError("user namespace: cannot open " + path + ": " + std::strerror(err));
  }
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw SandboxError("user namespace: writing '" + text.substr(0, text.size() - 1) + "' to " + path +
                       " failed: " + std::strerror(n < 0 ? err : EIO));
}

}  // namespace

bool namespaces_supported(unsigned long clone_flags) {
  return supported_cache().get(
      clone_flags, [clone_flags] { return clone_flags == 0 || probe_in_child(clone_flags, [] { return 0; }) == 0; });
}

int private_proc_refusal(unsigned long clone_flags) {
  return proc_cache().get(clone_flags, [clone_flags] {
    // As pid 1 of its namespace the child tries the mount and exits with the errno, 0 on success.
    const int status = probe_in_child(
        clone_flags, [] { return sys::make_proc_mount() >= 0 ? 0 : (errno > 0 && errno < 255 ? errno : 255); });
    return status < 0 ? errno : status == 256 ? ECHILD : status;
  });
}

bool namespaces_expected(unsigned long clone_flags, bool* assumed) {
  if (clone_flags == 0 || g_clone_refused.load()) return namespaces_supported(clone_flags);
  if (std::optional<bool> known = supported_cache().known(clone_flags)) return *known;
  *assumed = true;
  return true;
}

int private_proc_expected(unsigned long clone_flags, bool* assumed) {
  if (g_proc_refused.load()) return private_proc_refusal(clone_flags);
  if (std::optional<int> known = proc_cache().known(clone_flags)) return *known;
  *assumed = true;
  return 0;
}

void namespace_refused_at_launch() noexcept { g_clone_refused.store(true); }
void private_proc_refused_at_launch() noexcept { g_proc_refused.store(true); }

namespace detail {

std::size_t probes_cloned() noexcept { return g_probes.load(); }

void forget_namespace_knowledge() {
  {
    std::lock_guard lock(supported_cache().mutex);
    supported_cache().answers.clear();
  }
  {
    std::lock_guard lock(proc_cache().mutex);
    proc_cache().answers.clear();
  }
  g_clone_refused.store(false);
  g_proc_refused.store(false);
}

}  // namespace detail

void write_id_maps(pid_t child, uid_t uid, gid_t gid, bool allow_setgroups) {
  write_id_maps(child, uid, uid, gid, gid, allow_setgroups);
}

void write_id_maps(pid_t child, uid_t inner_uid, uid_t outer_uid, gid_t inner_gid, gid_t outer_gid,
                   bool allow_setgroups) {
  const std::string proc = "/proc/" + std::to_string(child) + "/";
  write_file(proc + "uid_map", std::to_string(inner_uid) + " " + std::to_string(outer_uid) + " 1\n");
  if (!allow_setgroups) write_file(proc + "setgroups", "deny\n");
  write_file(proc + "gid_map", std::to_string(inner_gid) + " " + std::to_string(outer_gid) + " 1\n");
}

}  // namespace sandbox
