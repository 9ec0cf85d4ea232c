// A writer child's work as a patch, its review, and `apply` (workspace/patch.hpp).
#include "workspace/patch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

#include "workspace/git_step.hpp"
#include "workspace/later_execution.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A file of the state directory written whole or not at all: the bytes go to a temporary beside it
// (".<name>.tmp-<pid>-<n>"), which commit() syncs and renames into place; anything short of that
// removes the temporary. A failed write (ENOSPC on a full disk) is remembered and named by error().
class AtomicFile {
 public:
  explicit AtomicFile(fs::path file) : file_(std::move(file)) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      tmp_ = file_.parent_path() /
             ("." + file_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd_ >= 0 || errno != EEXIST) break;
    }
    if (fd_ < 0) fail("cannot create a temporary file in " + file_.parent_path().string(), errno);
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  bool write(std::string_view data) {
    while (error_.empty() && !data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fail("write failed", n < 0 ? errno : EIO);
        break;
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return error_.empty();
  }

  // Syncs and renames the temporary into place; false (and error()) when any step failed.
  bool commit() {
    if (!error_.empty()) return false;
    if (::fsync(fd_) != 0) return fail("fsync failed", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return fail("close failed", errno);
    if (::rename(tmp_.c_str(), file_.c_str()) != 0) return fail("rename failed", errno);
    committed_ = true;
    if (int dir = ::open(file_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
      (void)::fsync(dir);  // the rename is durable; a failure here leaves a whole file either way
      ::close(dir);
    }
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& what, int err) {
    if (error_.empty()) {
      error_ = "cannot write '" + file_.string() + "': " + what + ": " + std::strerror(err);
      if (err == ENOSPC || err == EDQUOT)
        error_ += " (the filesystem holding " + file_.parent_path().string() + " is full)";
    }
    return false;
  }

  fs::path file_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::string error_;
};

// Nested repositories below `root`: every directory (other than root itself) holding a `.git` of
// any type. Relative to root, sorted. Follows no symlink.
std::vector<std::string> nested_repositories(const fs::path& root, const fs::path& skip_git) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() != ".git") continue;
    if (it->symlink_status().type() == fs::file_type::directory) it.disable_recursion_pending();
    if (it->path() == skip_git) continue;
    out.push_back(it->path().parent_path().lexically_relative(root).generic_string());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

json to_json(const PatchReview& r) {
  json symlinks = json::array(), modes = json::array();
  for (const auto& s : r.symlinks) symlinks.push_back({{"path", s.path}, {"target", s.target}, {"outside", s.outside}});
  for (const auto& m : r.mode_changes) modes.push_back({{"path", m.path}, {"from", m.from}, {"to", m.to}});
  return {{"symlinks", symlinks},
          {"mode_changes", modes},
          {"new_executables", r.new_executables},
          {"later_execution", r.later_execution},
          {"nested_repositories", r.nested_repositories},
          {"flagged", r.flagged()}};
}

namespace {

PatchReview review_from_json(const json& j) {
  PatchReview r;
  if (!j.is_object()) return r;
  for (const auto& s : j.value("symlinks", json::array()))
    r.symlinks.push_back({s.value("path", ""), s.value("target", ""), s.value("outside", true)});
  for (const auto& m : j.value("mode_changes", json::array()))
    r.mode_changes.push_back({m.value("path", ""), m.value("from", ""), m.value("to", "")});
  r.new_executables = j.value("new_executables", std::vector<std::string>{});
  r.later_execution = j.value("later_execution", std::vector<std::string>{});
  r.nested_repositories = j.value("nested_repositories", std::vector<std::string>{});
  return r;
}

bool symlink_leaves(const std::string& path, const std::string& target) {
  if (target.empty() || target.front() == '/') return true;
  fs::path resolved = (fs::path(path).parent_path() / target).lexically_normal();
  return resolved.empty() || *resolved.begin() == ".." || resolved.is_absolute();
}

}  // namespace

Patch collect_patch(const Worktree& wt, const fs::path& state_dir, const std::string& id, const WritePolicy& policy) {
  Patch p;
  // The child may have created repositories of its own anywhere in its tree: none is ever used
  // (every step names the worktree's git dir), and their directories stay out of the patch.
  // (every step names the worktree's git dir). Their `.git` entries are removed before git looks at
  // the tree, so git cannot take them for embedded repositories; what else the child wrote there is
  // in the patch as ordinary files.
  {
    std::error_code ec;
    fs::create_directories(wt.path, ec);  // git's working directory, whatever the child left
  }
  p.review.nested_repositories = nested_repositories(wt.path, wt.top / ".git");
  for (const auto& n : p.review.nested_repositories) {
    std::error_code ec;
    fs::remove_all(wt.path / n / ".git", ec);  // follows no symlink
    if (ec) throw std::runtime_error("could not remove the nested repository '" + n + "/.git': " + ec.message());
  }
  const std::vector<std::string> pathspec = {"--", "."};
  // A copy's repository is inside its tmpfs: `git add` stores the child's files there once more
  // (compressed), so the full worktree gets room for them. (A git worktree's objects go to the
  // source repository.)
  if (wt.disk_capped && !wt.git) {
    Worktree grown = wt;
    resize_worktree_cap(grown, wt.disk_cap_bytes * 2 + (64u << 20));
  }

  GitStep base;
  base.git_dir = wt.git_dir;
  base.work_tree = wt.top;
  base.cwd = wt.path;
  base.write = {wt.git ? wt.git_common_dir : wt.git_dir};

  GitStep add = base;
  add.what = "git add in the worktree";
  add.args = {"add", "-A"};
  add.args.insert(add.args.end(), pathspec.begin(), pathspec.end());
  must_git(add);

  // The file list with modes, NUL-separated; stopped once it passes the cap.
  struct RawEntry {
    std::string from, to, status, path;
  };
  std::vector<RawEntry> entries;
  std::string pending;
  bool too_many = false;
  GitStep raw = base;
  raw.what = "git diff --raw in the worktree";
  raw.args = {"diff", "--cached", "--raw", "-z", "--no-renames", "--relative", wt.base};
  raw.args.insert(raw.args.end(), pathspec.begin(), pathspec.end());
  raw.out_sink = [&](std::string_view chunk) {
    pending.append(chunk);
    std::size_t pos;
    // Records: ":<from> <to> <sha> <sha> <status>\0<path>\0"
    while (true) {
      auto a = pending.find('\0');
      if (a == std::string::npos) break;
      auto b = pending.find('\0', a + 1);
      if (b == std::string::npos) break;
      std::istringstream head(pending.substr(0, a));
      RawEntry e;
      std::string sha1, sha2;
      head >> e.from >> e.to >> sha1 >> sha2 >> e.status;
      if (!e.from.empty() && e.from[0] == ':') e.from.erase(0, 1);
      e.path = pending.substr(a + 1, b - a - 1);
      entries.push_back(std::move(e));
      pos = b + 1;
      pending.erase(0, pos);
      if (entries.size() > policy.max_patch_files) {
        too_many = true;
        return false;
      }
    }
    return pending.size() < (1u << 20);  // one path is never this long
  };
  GitResult rr = run_git(raw);
  if (too_many)
    throw std::runtime_error("the patch changes more than " + std::to_string(policy.max_patch_files) +
                             " files (the policy's writes.max_patch_files); nothing was saved");
  if (rr.code != 0 || rr.stopped) throw std::runtime_error(raw.what + ": " + rr.err);

  fs::path dir = state_dir / "patches";
  fs::create_directories(dir);
  p.file = dir / (id + ".patch");
  const fs::path meta_file = dir / (id + ".json");
  {
    // A patch from an earlier child of the same id is never left paired with this one's record.
    std::error_code ec;
    fs::remove(meta_file, ec);
  }
  {
    AtomicFile out(p.file);
    if (!out.error().empty()) throw std::runtime_error(out.error() + "; nothing was saved");
    bool too_big = false;
    GitStep diff = base;
    diff.what = "git diff in the worktree";
    diff.args = {"diff",       "--cached",     "--binary",   "--no-ext-diff", "--no-textconv",
                 "--no-color", "--no-renames", "--relative", wt.base};
    diff.args.insert(diff.args.end(), pathspec.begin(), pathspec.end());
    diff.out_sink = [&](std::string_view chunk) {
      if (p.bytes + chunk.size() > policy.max_patch_bytes) {
        too_big = true;
        return false;
      }
      if (!out.write(chunk)) return false;  // the disk is full: stop git, nothing is saved
      p.bytes += chunk.size();
      return true;
    };
    GitResult dr = run_git(diff);
    if (too_big)
      throw std::runtime_error("the patch is larger than " + std::to_string(policy.max_patch_bytes) +
                               " bytes (the policy's writes.max_patch_bytes); nothing was saved");
    if (!out.error().empty()) throw std::runtime_error(out.error() + "; nothing was saved");
    if (dr.code != 0 || dr.stopped) throw std::runtime_error(diff.what + ": " + dr.err);
    // The temporary is removed by `out` on every throw above.
    if (!out.commit()) throw std::runtime_error(out.error() + "; nothing was saved");
  }

  std::vector<std::string> later = policy.later_execution;
  later.push_back("**/.git");
  for (const auto& e : entries) {
    p.files.push_back(e.path);
    const bool added = e.from == "000000";
    const bool deleted = e.to == "000000";
    if (e.to == "120000") {
      std::error_code ec;
      std::string target = fs::read_symlink(wt.path / e.path, ec).string();
      p.review.symlinks.push_back({e.path, target, symlink_leaves(e.path, target)});
    } else if (e.to == "100755" && (added || e.from != "100755")) {
      p.review.new_executables.push_back(e.path);
    }
    if (!added && !deleted && e.from != e.to) p.review.mode_changes.push_back({e.path, e.from, e.to});
    if (is_later_execution(e.path, later)) p.review.later_execution.push_back(e.path);
  }

  json meta = {{"id", id},
               {"workspace", wt.source.string()},
               {"workspace_top", wt.source_top.string()},
               {"git_dir", wt.source_git_dir.string()},
               {"base", wt.base},
               {"git", wt.git},
               {"files", p.files},
               {"bytes", p.bytes},
               {"review", to_json(p.review)},
               {"patch", p.file.string()}};
  // The record is what `apply` reads: written whole after the patch, or neither stays.
  AtomicFile record(meta_file);
  if (!record.write(meta.dump(2) + "\n") || !record.commit()) {
    std::error_code ec;
    fs::remove(p.file, ec);
    throw std::runtime_error(record.error() + "; nothing was saved");
  }
  return p;
}

ApplyResult apply_patch(const fs::path& state_dir, const std::string& id, bool allow_flagged) {
  ApplyResult r;
  if (id.empty() || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    r.message = "'" + id + "' is not a child id";
    return r;
  }
  fs::path meta_file = state_dir / "patches" / (id + ".json");
  std::ifstream in(meta_file);
  if (!in) {
    r.message = "no patch for child " + id + " (looked for " + meta_file.string() + ")";
    return r;
  }
  json meta = json::parse(in, nullptr, false);
  if (meta.is_discarded() || !meta.contains("workspace") || !meta.contains("patch") || !meta.contains("review")) {
    r.message = "patch record " + meta_file.string() + " is damaged (or from an older supervisor without a review)";
    return r;
  }
  fs::path ws = meta["workspace"].get<std::string>();
  fs::path patch = meta["patch"].get<std::string>();
  r.files = meta.value("files", std::vector<std::string>{});
  PatchReview review = review_from_json(meta["review"]);
  std::error_code ec;
  if (fs::file_size(patch, ec) == 0 || ec) {
    r.ok = !ec;
    r.message =
        ec ? "the patch file " + patch.string() + " is missing" : "child " + id + " changed nothing; nothing to apply";
    return r;
  }
  std::string outside;
  for (const auto& s : review.symlinks)
    if (s.outside) outside += "\n  " + s.path + " -> " + s.target;
  if (!outside.empty()) {
    r.message = "refused: the patch of child " + id +
                " adds symlinks that point outside the workspace or are absolute; "
                "nothing was changed:" +
                outside;
    return r;
  }
  if (review.flagged() && !allow_flagged) {
    std::string what;
    for (const auto& s : review.symlinks) what += "\n  symlink " + s.path + " -> " + s.target;
    for (const auto& m : review.mode_changes) what += "\n  mode " + m.from + " -> " + m.to + " " + m.path;
    for (const auto& e : review.new_executables) what += "\n  new executable " + e;
    for (const auto& l : review.later_execution) what += "\n  later-execution path " + l;
    r.message = "refused: the patch of child " + id +
                " has changes that need an explicit decision; nothing was changed "
                "(review them, then apply with --allow-flagged, or allow_flagged: true):" +
                what;
    return r;
  }
  const bool git = meta.value("git", false);
  fs::path top = meta.value("workspace_top", ws.string());
  fs::path git_dir = meta.value("git_dir", std::string());
  fs::path scratch;
  try {
    if (!git || git_dir.empty()) {
      // No repository of the user's to name: an empty one of ours, so that git discovers nothing.
      scratch = state_dir / "patches" / (id + ".apply-git");
      fs::remove_all(scratch, ec);
      GitStep init;
      init.what = "git init (for apply)";
      init.git_dir = scratch;
      init.cwd = state_dir / "patches";
      init.args = {"init", "--quiet", "--bare", "--template="};
      init.write = {state_dir / "patches"};
      must_git(init);
      git_dir = scratch;
      top = ws;
    }
    // Run at the top with the workspace as --directory: the patch's paths are relative to the
    // workspace (a subdirectory when the child was spawned on one).
    GitStep check;
    check.what = "git apply --check";
    check.git_dir = git_dir;
    check.work_tree = top;
    check.cwd = top;
    check.args = {"apply", "--check", "--binary"};
    const fs::path rel = ws.lexically_relative(top);
    if (!rel.empty() && rel != ".") check.args.push_back("--directory=" + rel.generic_string());
    check.args.push_back(patch.string());
    check.read = {patch};
    GitResult c = run_git(check);
    if (c.code != 0) {
      r.message =
          "the patch of child " + id + " no longer applies to " + ws.string() + "; nothing was changed:\n" + c.err;
    } else {
      GitStep apply = check;
      apply.what = "git apply";
      apply.args = check.args;
      apply.args.erase(apply.args.begin() + 1);  // "--check"
      apply.write = {top};
      GitResult a = run_git(apply);
      if (a.code != 0) {
        r.message = "git apply failed for child " + id + ": " + a.err;
      } else {
        r.ok = true;
        r.message = "applied the patch of child " + id + " to " + ws.string() + " (" + std::to_string(r.files.size()) +
                    " files)";
      }
    }
  } catch (const std::exception& e) {
    r.ok = false;
    r.message = std::string("could not apply the patch of child ") + id + ": " + e.what();
  }
  if (!scratch.empty()) fs::remove_all(scratch, ec);
  return r;
}

}  // namespace supervisor
