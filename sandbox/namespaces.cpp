#include "namespaces.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "sandbox/launch.hpp"
#include "syscalls.hpp"

namespace sandbox {
namespace {

// Clones a short-lived child with `flags` and returns the status `in_child` exits with there (raw
// syscalls only: the child is a copy of a possibly multi-threaded process); -1 when the clone
// failed (errno says why), 256 when the child died by a signal.
int probe_in_child(unsigned long flags, int (*in_child)()) {
  long pid = sys::clone_legacy(flags | SIGCHLD, nullptr);
  if (pid < 0) return -1;
  if (pid == 0) ::_exit(in_child());
  int status = 0;
  while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 256;
}

// One answer per flag set and probe, computed once. Thread-safe; each Probe type has its own cache.
template <class T, class Probe>
T cached(unsigned long flags, Probe probe) {
  static std::mutex mutex;
  static std::map<unsigned long, T> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(flags);
  if (it != cache.end()) return it->second;
  return cache.emplace(flags, probe()).first->second;
}

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
  return cached<bool>(clone_flags,
                      [clone_flags] { return clone_flags == 0 || probe_in_child(clone_flags, [] { return 0; }) == 0; });
}

int private_proc_refusal(unsigned long clone_flags) {
  return cached<int>(clone_flags, [clone_flags] {
    // As pid 1 of its namespace the child tries the mount and exits with the errno, 0 on success.
    const int status = probe_in_child(
        clone_flags, [] { return sys::make_proc_mount() >= 0 ? 0 : (errno > 0 && errno < 255 ? errno : 255); });
    return status < 0 ? errno : status == 256 ? ECHILD : status;
  });
}

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
