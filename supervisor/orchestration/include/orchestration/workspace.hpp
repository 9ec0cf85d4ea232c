// Safe writers: one writer per workspace (an exclusive lock keyed by the directory's identity), and
// isolated worktrees whose work comes back as a patch the parent applies explicitly.
//
// Errors: exceptions (std::runtime_error naming the path, or git's message); remove_worktree never
// throws.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "policy/preset.hpp"

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

// True when `rel` (relative to the workspace, '/'-separated) is or lies under an entry of `list`.
bool is_later_execution(const std::string& rel, const std::vector<std::string>& list);

// Every existing path in `workspace` that the list names (plain entries as given, "**/NAME" found
// by a walk that follows no symlink and stops after `max_entries` entries; `complete` says whether
// it finished). Relative, sorted.
std::vector<std::string> find_later_execution(const std::filesystem::path& workspace,
                                              const std::vector<std::string>& list, std::size_t max_entries = 200000,
                                              bool* complete = nullptr);

// A snapshot of those paths (type, size, mtime, inode of each file beneath them), taken when a writer
// starts and compared when it ends: what it created or changed is flagged in its envelope.
struct LaterExecutionSnapshot {
  std::map<std::string, std::string> entries;  // relative path -> identity
  bool complete = true;
};
// Paths in `shallow` (read-only in the child, so nothing beneath them can change) get their own
// identity only; the others are walked (bounded).
LaterExecutionSnapshot snapshot_later_execution(const std::filesystem::path& workspace,
                                                const std::vector<std::string>& list,
                                                const std::vector<std::string>& shallow = {});
// Paths created, changed or removed between the two snapshots, sorted.
std::vector<std::string> later_execution_changes(const LaterExecutionSnapshot& before,
                                                 const LaterExecutionSnapshot& after);

// The hooks directory the repository around `workspace` names in core.hooksPath (read from its
// config files without running anything), relative to `workspace` when it lies inside it. Empty
// when unset or outside.
std::string hooks_path_inside(const std::filesystem::path& workspace);

struct Worktree {
  std::filesystem::path path;            // the child's only write root (the worktree's copy of the workspace)
  std::filesystem::path top;             // the worktree's top directory
  std::filesystem::path source;          // the parent's workspace
  std::filesystem::path source_top;      // its repository's top (or the workspace for a copy)
  std::filesystem::path source_git_dir;  // the git dir `apply` uses (empty for a copy)
  bool git = false;                      // a git worktree (else a copy with a baseline commit)
  std::string base;                      // the commit the work starts from
  std::filesystem::path git_dir;         // the worktree's own git dir (explicit in every git step)
  std::filesystem::path git_common_dir;  // the source repository's .git (read-only for the child)
  std::filesystem::path repo_lock;       // the lock file of the source repository's worktree add/prune
  // The disk cap (create_worktree's disk_budget): `top` is a tmpfs of the checkout's size plus the
  // budget, or `disk_cap_missing` says why it is not (no mount privilege).
  bool disk_capped = false;
  std::uint64_t disk_cap_bytes = 0;  // the tmpfs's size
  std::string disk_cap_missing;
};

// Creates <state_dir>/worktrees/<id>: `git worktree add --detach` of HEAD when `workspace` is in a
// git repository, else a copy of it (without any .git) with a baseline commit. Every git step runs
// through run_git (git_step.hpp). `git worktree add` (and remove_worktree's prune) of one repository
// run one at a time, under a lock file in `lock_dir` (Workspaces::lock_dir: beyond every child's
// reach). Throws std::runtime_error with git's message on failure.
//
// disk_budget > 0: `top` is first made a tmpfs (size-capped filesystem, mounted by the supervisor,
// which needs CAP_SYS_ADMIN), and once the checkout is in it, remounted at the size it uses plus
// disk_budget, so the child's writes past the budget fail with ENOSPC. Without the privilege the
// worktree is an ordinary directory and disk_cap_missing says why.
Worktree create_worktree(const std::filesystem::path& workspace, const std::filesystem::path& state_dir,
                         const std::filesystem::path& lock_dir, const std::string& id, std::uint64_t disk_budget = 0);

// Unmounts the size-capped tmpfs a worktree's top may be (create_worktree's disk_budget), lazily
// (MNT_DETACH), and removes the then-empty directory. For remove_worktree, and for crash recovery
// settling what a killed supervisor left at <state_dir>/worktrees/<id>: a no-op (returns "") on a
// path that is no tmpfs mount point; else "" or what failed.
std::string release_worktree_mount(const std::filesystem::path& top) noexcept;

// What a reviewer must see before applying a patch.
struct PatchReview {
  struct Symlink {
    std::string path, target;
    bool outside = false;  // absolute, or leads out of the workspace: apply always refuses
  };
  struct ModeChange {
    std::string path, from, to;
  };
  std::vector<Symlink> symlinks;
  std::vector<ModeChange> mode_changes;
  std::vector<std::string> new_executables;
  std::vector<std::string> later_execution;      // changed paths on the later-execution list
  std::vector<std::string> nested_repositories;  // directories that held a .git the child made (removed)
  bool flagged() const {
    return !symlinks.empty() || !mode_changes.empty() || !new_executables.empty() || !later_execution.empty();
  }
};
nlohmann::json to_json(const PatchReview& r);

struct Patch {
  std::filesystem::path file;  // <state_dir>/patches/<id>.patch (and <id>.json beside it)
  std::vector<std::string> files;
  std::size_t bytes = 0;
  PatchReview review;
};

// Everything the child changed in its worktree, as a binary git diff against the base, streamed to
// <state_dir>/patches/<id>.patch for `subagent-supervisor apply ID`. Every .git the child created
// (a nested repository) is removed first and listed; git never reads it. Throws std::runtime_error when the patch
// exceeds policy.max_patch_bytes or max_patch_files (nothing is saved then) or git fails, or the
// patch or its record cannot be written (a full disk: the error names the file and the filesystem,
// and nothing is saved). Both files are written whole (a temporary, synced, renamed) or not at all.
Patch collect_patch(const Worktree& wt, const std::filesystem::path& state_dir, const std::string& id,
                    const WritePolicy& policy);

void remove_worktree(const Worktree& wt) noexcept;

// Crash recovery's remove_worktree, from what a registry record holds: removes `top` (following no
// symlink) and, when `workspace` lies in a git repository, unregisters it with the sandboxed
// `git worktree prune` under the repository lock of `lock_dir`. Returns "" or the problem.
std::string forget_worktree(const std::filesystem::path& top, const std::filesystem::path& workspace,
                            const std::filesystem::path& lock_dir);

struct ApplyResult {
  bool ok = false;
  std::string message;
  std::vector<std::string> files;
};

// Applies a saved patch to the workspace it came from; never forced: a patch that no longer
// applies is reported with git's explanation and nothing is changed. A symlink leaving the
// workspace is always refused; flagged changes (symlinks, mode changes, new executables,
// later-execution paths) are refused unless allow_flagged.
ApplyResult apply_patch(const std::filesystem::path& state_dir, const std::string& id, bool allow_flagged = false);

}  // namespace supervisor
