// Isolated worktrees for writer children: a git worktree, or a copy with a baseline commit, each
// optionally on a size-capped tmpfs.
//
// Errors: exceptions (std::runtime_error naming the path, or git's message); remove_worktree never
// throws, forget_worktree returns what failed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace supervisor {

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

// Sets the size of a disk-capped worktree's tmpfs (rounded up to whole pages), for collect_patch:
// a copy's repository is inside the tmpfs and `git add` stores the child's files there once more.
// Throws std::runtime_error naming the mount.
void resize_worktree_cap(Worktree& wt, std::uint64_t size);

void remove_worktree(const Worktree& wt) noexcept;

// Crash recovery's remove_worktree, from what a registry record holds: removes `top` (following no
// symlink) and, when `workspace` lies in a git repository, unregisters it with the sandboxed
// `git worktree prune` under the repository lock of `lock_dir`. Returns "" or the problem.
std::string forget_worktree(const std::filesystem::path& top, const std::filesystem::path& workspace,
                            const std::filesystem::path& lock_dir);

}  // namespace supervisor
