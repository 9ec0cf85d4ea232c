// The writer lock of a workspace (workspace/lock.hpp).
#include "workspace/lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "workspace/git_step.hpp"
#include "workspace/held.hpp"

namespace supervisor {
namespace fs = std::filesystem;

WorkspaceConfig default_workspace_config() {
  WorkspaceConfig c;
  if (::geteuid() == 0) {
    c.lock_dir = "/run/lock/subagent-supervisor";
  } else if (const char* rt = std::getenv("XDG_RUNTIME_DIR"); rt && *rt) {
    c.lock_dir = fs::path(rt) / "subagent-supervisor" / "locks";
  } else {
    c.lock_dir = "/tmp/subagent-supervisor-" + std::to_string(::geteuid()) + "/locks";
  }
  c.state_dir = default_workspace_state_dir();
  return c;
}

std::string workspace_key(const fs::path& workspace) {
  struct stat st {};
  if (::stat(workspace.c_str(), &st) != 0)
    throw std::runtime_error("workspace '" + workspace.string() + "': " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error("workspace '" + workspace.string() + "' is not a directory");
  return std::to_string(major(st.st_dev)) + "." + std::to_string(minor(st.st_dev)) + "-" + std::to_string(st.st_ino);
}

std::optional<WorkspaceLock> WorkspaceLock::try_acquire(const fs::path& workspace, const fs::path& lock_dir) {
  std::error_code ec;
  const fs::path ws = fs::canonical(workspace, ec);
  if (ec) throw std::runtime_error("workspace '" + workspace.string() + "': " + ec.message());
  fs::path root = ws;
  fs::path top;
  if (!find_git_dir(ws, &top).empty()) root = top;
  const std::string key = workspace_key(root);
  fs::create_directories(lock_dir, ec);
  if (ec) throw std::runtime_error("lock directory '" + lock_dir.string() + "': " + ec.message());
  // Root first, the exclusive one last: a fixed order, and nothing is waited for.
  std::vector<fs::path> chain;
  for (fs::path d = root;; d = d.parent_path()) {
    chain.push_back(d);
    if (d == d.root_path()) break;
  }
  std::reverse(chain.begin(), chain.end());
  std::vector<int> fds;
  auto drop = [&] {
    for (int fd : fds) ::close(fd);
    fds.clear();
  };
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const bool exclusive = i + 1 == chain.size();
    const fs::path file = lock_dir / ("ws-" + (exclusive ? key : workspace_key(chain[i])) + ".lock");
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      int err = errno;
      drop();
      throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(err));
    }
    fds.push_back(fd);
    int rc;
    while ((rc = ::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      int err = errno;
      drop();
      if (err == EWOULDBLOCK) return std::nullopt;
      throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(err));
    }
  }
  // Record who holds it, for a person looking at the lock directory.
  std::string who = std::to_string(::getpid()) + " " + ws.string() + "\n";
  if (::ftruncate(fds.back(), 0) == 0) (void)!::write(fds.back(), who.data(), who.size());
  return WorkspaceLock(std::move(fds), key, root);
}

void WorkspaceLock::release() noexcept {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}
WorkspaceLock::WorkspaceLock(WorkspaceLock&& o) noexcept
    : fds_(std::move(o.fds_)), key_(std::move(o.key_)), root_(std::move(o.root_)) {
  o.fds_.clear();
}
WorkspaceLock& WorkspaceLock::operator=(WorkspaceLock&& o) noexcept {
  if (this != &o) {
    release();
    fds_ = std::move(o.fds_);
    o.fds_.clear();
    key_ = std::move(o.key_);
    root_ = std::move(o.root_);
  }
  return *this;
}
WorkspaceLock::~WorkspaceLock() { release(); }

}  // namespace supervisor
