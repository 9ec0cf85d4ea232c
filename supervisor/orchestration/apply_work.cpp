// `apply ID`: whichever a child left, its patch or its held later-execution files.
#include <filesystem>

#include "orchestration/held.hpp"

namespace supervisor {
namespace fs = std::filesystem;

ApplyResult apply_child_work(const fs::path& state_dir, const std::string& id, bool allow_flagged) {
  std::error_code ec;
  const bool patch = is_child_id(id) && fs::exists(state_dir / "patches" / (id + ".json"), ec);
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
