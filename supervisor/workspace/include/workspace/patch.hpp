// A writer child's work comes back as a patch the parent applies explicitly: collecting it from
// the worktree, what a reviewer must see, and `apply`.
//
// Errors: collect_patch throws std::runtime_error naming what failed; apply_patch reports in its
// result.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policy/preset.hpp"
#include "workspace/worktree.hpp"

namespace supervisor {

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
