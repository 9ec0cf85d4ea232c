// `apply ID` (apply_work.hpp): whichever a child left, its patch or its held later-execution files.
#include "workspace/apply_work.hpp"

#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "workspace/held.hpp"
#include "workspace/lock.hpp"

namespace supervisor {
namespace fs = std::filesystem;

namespace {

// The workspace a child's record names, or empty when the record is missing or damaged (the apply
// itself then says which).
fs::path recorded_workspace(const fs::path& record) {
  std::ifstream in(record);
  if (!in) return {};
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("workspace") || !j["workspace"].is_string()) return {};
  return fs::path(j["workspace"].get<std::string>());
}

}  // namespace

ApplyResult apply_child_work(const fs::path& state_dir, const fs::path& lock_dir, const std::string& id,
                             bool allow_flagged) {
  std::error_code ec;
  const bool patch = is_child_id(id) && fs::exists(state_dir / "patches" / (id + ".json"), ec);
  // The writer lock of the workspace, for as long as files are put into it.
  std::optional<WorkspaceLock> lock;
  if (is_child_id(id)) {
    const fs::path ws =
        recorded_workspace(patch ? state_dir / "patches" / (id + ".json") : held_dir(state_dir, id) / "held.json");
    if (!ws.empty() && fs::is_directory(ws, ec)) {
      try {
        lock = WorkspaceLock::try_acquire(ws, lock_dir);
      } catch (const std::exception& e) {
        return ApplyResult{
            false, "could not take the writer lock of " + ws.string() + ": " + e.what() + "; nothing was changed", {}};
      }
      if (!lock)
        return ApplyResult{false,
                           "refused: another writer (a worker child, or an apply) holds the workspace " + ws.string() +
                               " now; nothing was changed: apply again once it has finished",
                           {}};
    }
  }
  if (!patch) {
    ReleaseResult h = release_held(state_dir, id, allow_flagged);
    if (h.found || !is_child_id(id)) return ApplyResult{h.ok, h.message, h.files};
  }
  ApplyResult r = apply_patch(state_dir, id, allow_flagged);
  if (!patch && !r.ok)
    r.message = "nothing to apply for child " + id + ": no patch in " + (state_dir / "patches").string() +
                " and no held later-execution files in " + held_dir(state_dir, id).string();
  return r;
}

}  // namespace supervisor
