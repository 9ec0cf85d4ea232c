// Safe writers: one writer per workspace (an exclusive lock keyed by the directory's identity), and
// isolated worktrees whose work comes back as a patch the parent applies explicitly.
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

// An exclusive flock(2) on <lock_dir>/ws-<dev>-<inode>.lock. The key is the directory's device and
// inode, so a symlinked path, a bind mount and a case variant on a case-insensitive filesystem all
// name the same lock; flock also excludes other supervisor processes. Released on destruction
// (also when the process dies: the kernel drops the lock with the fd).
class WorkspaceLock {
 public:
  // nullopt when someone else holds it. Throws std::runtime_error naming the path on other errors.
  static std::optional<WorkspaceLock> try_acquire(const std::filesystem::path& workspace,
                                                  const std::filesystem::path& lock_dir);
  WorkspaceLock(WorkspaceLock&& o) noexcept;
  WorkspaceLock& operator=(WorkspaceLock&& o) noexcept;
  ~WorkspaceLock();
  const std::string& key() const noexcept { return key_; }

 private:
  WorkspaceLock(int fd, std::string key) : fd_(fd), key_(std::move(key)) {}
  int fd_ = -1;
  std::string key_;
};

// The lock key ("<dev>-<inode>") of a directory; throws std::runtime_error when it cannot be read.
std::string workspace_key(const std::filesystem::path& workspace);

struct Worktree {
  std::filesystem::path path;    // the child's only write root
  std::filesystem::path source;  // the parent's workspace
  bool git = false;              // a git worktree (else a copy with a baseline commit)
  std::string base;              // the commit the work starts from
  std::filesystem::path git_common_dir;  // the source repository's .git (read-only for the child)
};

// Creates <state_dir>/worktrees/<id>: `git worktree add --detach` of HEAD when `workspace` is in a
// git repository (hooks disabled), else a copy of it with a baseline commit. Throws
// std::runtime_error with git's message on failure.
Worktree create_worktree(const std::filesystem::path& workspace, const std::filesystem::path& state_dir,
                         const std::string& id);

struct Patch {
  std::filesystem::path file;  // <state_dir>/patches/<id>.patch (and <id>.json beside it)
  std::vector<std::string> files;
  std::size_t bytes = 0;
  std::string diff;
};

// Everything the child changed in its worktree, as a binary git diff against the base; saved
// under <state_dir>/patches for `subagent-supervisor apply ID`.
Patch collect_patch(const Worktree& wt, const std::filesystem::path& state_dir, const std::string& id);

void remove_worktree(const Worktree& wt) noexcept;

struct ApplyResult {
  bool ok = false;
  std::string message;
  std::vector<std::string> files;
};

// Applies a saved patch to the workspace it came from; never forced: a patch that no longer
// applies is reported with git's explanation and nothing is changed.
ApplyResult apply_patch(const std::filesystem::path& state_dir, const std::string& id);

struct ProcessResult {
  int code = -1;
  std::string out, err;
};

// Runs argv (argv[0] searched in PATH) in `cwd`, stdin from /dev/null, capturing output. Blocking.
ProcessResult run_process(const std::vector<std::string>& argv, const std::filesystem::path& cwd);

}  // namespace supervisor
