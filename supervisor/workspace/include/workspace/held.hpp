// What a writer leaves among the later-execution paths is held until the parent releases it
// (docs/writers.md, section 3). The kernel cannot refuse a name that does not exist yet, so the
// quarantine happens after the fact:
//
//   watch_later_execution()  at spawn: the list, what exists (read-only binds in the child) and a
//                            snapshot, persisted with record_spawn() in <state_dir>/held/<id>/spawn.json
//   settle_later_execution() once the child's whole tree has died (or, for crash recovery, once its
//                            supervisor has): every listed path that was not read-only in the child
//                            and exists now is moved into <state_dir>/held/<id>/files/<same path>,
//                            following no symlink; <state_dir>/held/<id>/held.json says what
//   release_held()           `apply ID --allow-flagged`: moves them back, refusing to overwrite
//                            anything that exists now
//
// Blocking (filesystem walks, copies across filesystems): call off the event loop. Errors:
// std::runtime_error naming the path, except where a result carries the message.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "workspace/later_execution.hpp"
#include "workspace/lock.hpp"
#include "workspace/patch.hpp"

namespace supervisor {

struct LaterExecutionWatch {
  std::filesystem::path workspace;           // canonical
  std::vector<std::string> list;             // the policy's list, "**/.git" and the hooksPath target
  std::vector<std::string> protected_paths;  // relative; existed at spawn, read-only in the child
  LaterExecutionSnapshot before;
};

// The later-execution watch of a writer on `workspace` with the policy's list (writes.later_execution).
// Runs git (sandboxed, git_step.hpp) to read core.hooksPath. Throws on a workspace it cannot read.
LaterExecutionWatch watch_later_execution(const std::filesystem::path& workspace, std::vector<std::string> list);

// $SUBAGENT_STATE_DIR, else $XDG_STATE_HOME/subagent-supervisor, else ~/.local/state/subagent-supervisor
// (default_workspace_config().state_dir).
std::filesystem::path default_workspace_state_dir();

// 1 to 64 lowercase hex digits, the form of a child id (and so a safe directory name).
bool is_child_id(const std::string& id);

// A fresh child id: 12 hex digits from getrandom (a sandbox run's held files are named the same way).
std::string new_child_id();

// <state_dir>/held/<id>
std::filesystem::path held_dir(const std::filesystem::path& state_dir, const std::string& id);

// Writes <state_dir>/held/<id>/spawn.json atomically (and durably): what settle_later_execution needs
// when the supervisor that spawned the child is gone. Throws std::runtime_error naming the file.
void record_spawn(const std::filesystem::path& state_dir, const std::string& id, const LaterExecutionWatch& w);

struct HeldReport {
  std::string id;
  std::filesystem::path workspace;
  std::vector<std::string> held;              // relative paths moved into files/ (a symlink on the way: the link)
  std::vector<std::string> failed;            // "path: why" — could not be moved: LIVE in the workspace
  std::vector<std::string> changed;           // every listed path created, changed or removed (as before)
  std::vector<std::string> changed_outside;   // read-only in the child, yet changed: not the child's doing
  std::vector<std::string> new_repositories;  // directories that got a .git (relative; "." for the workspace)
  std::vector<std::string> protected_paths;   // relative
  bool scan_complete = true;
  bool released = false;
  bool recorded = true;  // false: no record of the child (never watched, or settled with nothing held)
};

// Quarantines what the child left, from the persisted spawn record, and writes held.json atomically
// (spawn.json is removed then; when nothing was held the whole <state_dir>/held/<id> is). Idempotent:
// a child already settled returns its held.json, one without any record `recorded = false`. Call only
// when no process of the child's tree can run any more. Throws std::runtime_error when a record is
// damaged or the workspace cannot be read.
HeldReport settle_later_execution(const std::filesystem::path& state_dir, const std::string& id);

// The envelope's artifacts.later_execution for a settled child (`dir` etc. point at the state dir).
nlohmann::json held_to_json(const HeldReport& r, const std::filesystem::path& state_dir);

// The command line that releases a child's held files.
std::string release_command(const std::string& id);

struct ReleaseResult {
  bool found = false;  // <state_dir>/held/<id>/held.json exists
  bool ok = false;
  std::string message;
  std::vector<std::string> files;  // the paths released (or that would be)
};

// Moves a settled child's held files back into its workspace. Refused (nothing moved) unless
// allow_flagged, when any target exists now, or when a directory on the way is a symlink. Follows no
// symlink; missing parent directories are created.
ReleaseResult release_held(const std::filesystem::path& state_dir, const std::string& id, bool allow_flagged);

}  // namespace supervisor
