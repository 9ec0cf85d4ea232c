// The later-execution paths of a workspace (hooks, build and editor configuration, CI files: what
// a person's next ordinary command runs): finding them, and what a writer changed among them.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace supervisor {

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

}  // namespace supervisor
