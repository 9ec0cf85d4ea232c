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

bool probe(unsigned long flags) {
  long pid = sys::clone_legacy(flags | SIGCHLD, nullptr);
  if (pid < 0) return false;
  if (pid == 0) ::_exit(0);
  int status = 0;
  while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
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
    throw SandboxError("user namespace: writing '" + text.substr(0, text.size() - 1) + "' to " +
                       path + " failed: " + std::strerror(n < 0 ? err : EIO));
}

}  // namespace

bool namespaces_supported(unsigned long clone_flags) {
  static std::mutex mutex;
  static std::map<unsigned long, bool> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(clone_flags);
  if (it != cache.end()) return it->second;
  bool ok = clone_flags == 0 || probe(clone_flags);
  cache.emplace(clone_flags, ok);
  return ok;
}

int private_proc_refusal(unsigned long clone_flags) {
  static std::mutex mutex;
  static std::map<unsigned long, int> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(clone_flags);
  if (it != cache.end()) return it->second;
  int refusal = ENOSYS;
  long pid = sys::clone_legacy(clone_flags | SIGCHLD, nullptr);
  if (pid == 0) {  // pid 1 of its namespace: only raw syscalls from here
    int fd = sys::make_proc_mount();
    ::_exit(fd >= 0 ? 0 : (errno > 0 && errno < 255 ? errno : 255));
  }
  if (pid > 0) {
    int status = 0;
    while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
    }
    refusal = WIFEXITED(status) ? WEXITSTATUS(status) : ECHILD;
  } else {
    refusal = errno;
  }
  cache.emplace(clone_flags, refusal);
  return refusal;
}

void write_id_maps(pid_t child, uid_t uid, gid_t gid, bool allow_setgroups) {
  write_id_maps(child, uid, uid, gid, gid, allow_setgroups);
}

void write_id_maps(pid_t child, uid_t inner_uid, uid_t outer_uid, gid_t inner_gid,
                   gid_t outer_gid, bool allow_setgroups) {
  const std::string proc = "/proc/" + std::to_string(child) + "/";
  write_file(proc + "uid_map",
             std::to_string(inner_uid) + " " + std::to_string(outer_uid) + " 1\n");
  if (!allow_setgroups) write_file(proc + "setgroups", "deny\n");
  write_file(proc + "gid_map",
             std::to_string(inner_gid) + " " + std::to_string(outer_gid) + " 1\n");
}

}  // namespace sandbox
