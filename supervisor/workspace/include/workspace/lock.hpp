// One writer per workspace: an exclusive lock keyed by the directory's identity, and where the
// locks and the state (worktrees, patches) live.
//
// Errors: exceptions (std::runtime_error naming the path).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace supervisor {

struct WorkspaceConfig {
  std::filesystem::path lock_dir;   // workspace locks (shared by every supervisor of this user)
  std::filesystem::path state_dir;  // worktrees/ and patches/
};

// lock_dir: /run/lock/subagent-supervisor for root, else $XDG_RUNTIME_DIR/subagent-supervisor/locks,
// else /tmp/subagent-supervisor-<uid>/locks. state_dir: $SUBAGENT_STATE_DIR, else
// $XDG_STATE_HOME/subagent-supervisor, else ~/.local/state/subagent-supervisor.
WorkspaceConfig default_workspace_config();

// The writer lock of one workspace, across supervisor processes (flock(2) on files in lock_dir,
// named by a directory's device and inode, so a symlinked path, a bind mount and a case variant on
// a case-insensitive filesystem all name the same lock). It covers the workspace's ancestors and
// descendants: the exclusive lock is taken on the workspace's repository top when it is inside a
// git repository (else on the workspace itself), and a shared lock on every ancestor of that
// directory. Two writers conflict exactly when one's exclusive directory is the other's or one of
// its ancestors. All locks are tried without blocking from the root down and dropped together when
// any is busy, so no two supervisors can deadlock. Released on destruction (and by the kernel when
// the process dies).
class WorkspaceLock {
 public:
  // nullopt when another writer holds a conflicting lock. Throws std::runtime_error naming the path
  // on other errors.
  static std::optional<WorkspaceLock> try_acquire(const std::filesystem::path& workspace,
                                                  const std::filesystem::path& lock_dir);
  WorkspaceLock(WorkspaceLock&& o) noexcept;
  WorkspaceLock& operator=(WorkspaceLock&& o) noexcept;
  ~WorkspaceLock();
  const std::string& key() const noexcept { return key_; }
  // The directory locked exclusively (the repository top or the workspace).
  const std::filesystem::path& root() const noexcept { return root_; }

 private:
  WorkspaceLock(std::vector<int> fds, std::string key, std::filesystem::path root)
      : fds_(std::move(fds)), key_(std::move(key)), root_(std::move(root)) {}
  void release() noexcept;
  std::vector<int> fds_;
  std::string key_;
  std::filesystem::path root_;
};

// The lock key ("<dev>-<inode>") of a directory; throws std::runtime_error when it cannot be read.
std::string workspace_key(const std::filesystem::path& workspace);

}  // namespace supervisor
