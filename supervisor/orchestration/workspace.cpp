#include "orchestration/workspace.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "orchestration/git_step.hpp"
#include "orchestration/held.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

std::string first_line(const std::string& s, const std::string& what) {
  auto v = lines(s);
  if (v.empty()) throw std::runtime_error(what + ": git printed nothing");
  return v.front();
}

// The gitdir a worktree's `.git` file names (written by `git worktree add`, read before the child runs).
fs::path gitdir_of_file(const fs::path& dot_git) {
  std::ifstream in(dot_git);
  std::string line;
  std::getline(in, line);
  if (line.rfind("gitdir: ", 0) != 0) throw std::runtime_error("'" + dot_git.string() + "' names no gitdir");
  fs::path g = line.substr(8);
  if (g.is_relative()) g = dot_git.parent_path() / g;
  return fs::canonical(g);
}

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

// Copies a workspace that is no repository, leaving out every `.git` (a planted one must never
// become the copy's repository) and following no symlink.
void copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (auto it = fs::recursive_directory_iterator(from, fs::directory_options::none);
       it != fs::recursive_directory_iterator(); ++it) {
    const fs::path rel = it->path().lexically_relative(from);
    if (it->path().filename() == ".git") {
      if (it->symlink_status().type() == fs::file_type::directory) it.disable_recursion_pending();
      continue;
    }
    const auto st = it->symlink_status();
    if (fs::is_symlink(st)) {
      fs::copy_symlink(it->path(), to / rel);
    } else if (fs::is_directory(st)) {
      fs::create_directory(to / rel);
    } else if (fs::is_regular_file(st)) {
      fs::copy_file(it->path(), to / rel);
      fs::permissions(to / rel, st.permissions());
    }
  }
}

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

WorkspaceConfig default_workspace_config() {
  WorkspaceConfig c;
  if (::geteuid() == 0) {
    c.lock_dir = "/run/lock/subagent-supervisor";
  } else if (const char* rt = std::getenv("XDG_RUNTIME_DIR"); rt && *rt) {
    c.lock_dir = fs::path(rt) / "subagent-supervisor" / "locks";
  } else {
    c.lock_dir = "/tmp/subagent-supervisor-" + std::to_string(::geteuid()) + "/locks";
  }
  c.state_dir = default_workspace_state_dir();
  return c;
}

std::string workspace_key(const fs::path& workspace) {
  struct stat st {};
  if (::stat(workspace.c_str(), &st) != 0)
    throw std::runtime_error("workspace '" + workspace.string() + "': " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error("workspace '" + workspace.string() + "' is not a directory");
  return std::to_string(major(st.st_dev)) + "." + std::to_string(minor(st.st_dev)) + "-" + std::to_string(st.st_ino);
}

std::optional<WorkspaceLock> WorkspaceLock::try_acquire(const fs::path& workspace, const fs::path& lock_dir) {
  std::error_code ec;
  const fs::path ws = fs::canonical(workspace, ec);
  if (ec) throw std::runtime_error("workspace '" + workspace.string() + "': " + ec.message());
  fs::path root = ws;
  fs::path top;
  if (!find_git_dir(ws, &top).empty()) root = top;
  const std::string key = workspace_key(root);
  fs::create_directories(lock_dir, ec);
  if (ec) throw std::runtime_error("lock directory '" + lock_dir.string() + "': " + ec.message());
  // Root first, the exclusive one last: a fixed order, and nothing is waited for.
  std::vector<fs::path> chain;
  for (fs::path d = root;; d = d.parent_path()) {
    chain.push_back(d);
    if (d == d.root_path()) break;
  }
  std::reverse(chain.begin(), chain.end());
  std::vector<int> fds;
  auto drop = [&] {
    for (int fd : fds) ::close(fd);
    fds.clear();
  };
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const bool exclusive = i + 1 == chain.size();
    const fs::path file = lock_dir / ("ws-" + (exclusive ? key : workspace_key(chain[i])) + ".lock");
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      int err = errno;
      drop();
      throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(err));
    }
    fds.push_back(fd);
    int rc;
    while ((rc = ::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      int err = errno;
      drop();
      if (err == EWOULDBLOCK) return std::nullopt;
      throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(err));
    }
  }
  // Record who holds it, for a person looking at the lock directory.
  std::string who = std::to_string(::getpid()) + " " + ws.string() + "\n";
  if (::ftruncate(fds.back(), 0) == 0) (void)!::write(fds.back(), who.data(), who.size());
  return WorkspaceLock(std::move(fds), key, root);
}

void WorkspaceLock::release() noexcept {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}
WorkspaceLock::WorkspaceLock(WorkspaceLock&& o) noexcept
    : fds_(std::move(o.fds_)), key_(std::move(o.key_)), root_(std::move(o.root_)) {
  o.fds_.clear();
}
WorkspaceLock& WorkspaceLock::operator=(WorkspaceLock&& o) noexcept {
  if (this != &o) {
    release();
    fds_ = std::move(o.fds_);
    o.fds_.clear();
    key_ = std::move(o.key_);
    root_ = std::move(o.root_);
  }
  return *this;
}
WorkspaceLock::~WorkspaceLock() { release(); }

// --- worktrees and patches ---

namespace {

// `git worktree add` and `git worktree prune` of one repository must not overlap: an add reads
// every other worktree's admin directory (it fails on one that another add is still writing:
// "failed to read .../commondir"), and a prune removes one whose `gitdir` file is not written yet.
// The hub creates and removes worktrees on several worker threads, and other supervisors may use
// the same repository: the lock is flock(2) on a file of the lock directory named by the
// repository's git dir ("repo-<dev>-<inode>.lock"). Each holder opens its own description, which
// excludes threads and processes alike. Not a lock on the git dir itself: every child that can read
// the repository could take that one and stall the supervisor's workers for as long as it lives.
class RepositoryLock {
 public:
  explicit RepositoryLock(const fs::path& file)
      : fd_(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (fd_ < 0) throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(err));
    }
  }
  RepositoryLock(const RepositoryLock&) = delete;
  RepositoryLock& operator=(const RepositoryLock&) = delete;
  ~RepositoryLock() { ::close(fd_); }  // releases the lock

 private:
  int fd_;
};

}  // namespace

namespace {

std::string mount_error(const std::string& what, int err) {
  return what + ": " + std::strerror(err) + (err == EPERM ? " (needs root or CAP_SYS_ADMIN)" : "");
}

// The bytes a filesystem holds (what its files use), from statfs.
std::uint64_t used_bytes(const fs::path& dir) {
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) != 0)
    throw std::runtime_error("statfs '" + dir.string() + "': " + std::strerror(errno));
  return static_cast<std::uint64_t>(st.f_blocks - st.f_bfree) * static_cast<std::uint64_t>(st.f_bsize);
}

// Sets the size of the tmpfs at wt.top (rounded up to whole pages).
void resize_cap(Worktree& wt, std::uint64_t size) {
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  size = (size + page - 1) / page * page;
  const std::string opts = "size=" + std::to_string(size);
  if (::mount(nullptr, wt.top.c_str(), nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
    throw std::runtime_error(mount_error("could not resize the worktree's tmpfs at " + wt.top.string(), errno));
  wt.disk_cap_bytes = size;
}

// Makes wt.top a tmpfs without a size of its own yet (tmpfs's default, half the RAM: the checkout
// must fit before it can be measured); without the privilege, says why in wt.disk_cap_missing.
void mount_cap(Worktree& wt) {
  if (::mkdir(wt.top.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create '" + wt.top.string() + "': " + std::strerror(errno));
  if (::mount("subagent-worktree", wt.top.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    wt.disk_cap_missing =
        mount_error("the worktree is on the state directory's filesystem: mounting a size-capped tmpfs at " +
                        wt.top.string() + " failed",
                    errno);
    return;
  }
  wt.disk_capped = true;
}

void checkout_into(Worktree& wt, const fs::path& workspace, const fs::path& lock_dir);

}  // namespace

std::string release_worktree_mount(const fs::path& top) noexcept {
  try {
    struct statfs sf {};
    if (::statfs(top.c_str(), &sf) != 0)
      return errno == ENOENT ? "" : "statfs '" + top.string() + "': " + std::strerror(errno);
    if (static_cast<unsigned long>(sf.f_type) != TMPFS_MAGIC) return "";
    struct stat here {};
    struct stat above {};
    if (::stat(top.c_str(), &here) != 0 || ::stat(top.parent_path().c_str(), &above) != 0)
      return "stat '" + top.string() + "': " + std::strerror(errno);
    if (here.st_dev == above.st_dev) return "";  // a directory of a tmpfs above, not a mount of its own
    if (::umount2(top.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0)
      return "unmount '" + top.string() + "': " + std::strerror(errno);
    if (::rmdir(top.c_str()) != 0 && errno != ENOENT) return "rmdir '" + top.string() + "': " + std::strerror(errno);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

Worktree create_worktree(const fs::path& workspace, const fs::path& state_dir, const fs::path& lock_dir,
                         const std::string& id, std::uint64_t disk_budget) {
  Worktree wt;
  wt.source = workspace;
  wt.top = state_dir / "worktrees" / id;
  fs::create_directories(wt.top.parent_path());
  if (disk_budget > 0) mount_cap(wt);
  try {
    checkout_into(wt, workspace, lock_dir);
    if (wt.disk_capped) resize_cap(wt, used_bytes(wt.top) + disk_budget);
  } catch (...) {
    if (wt.disk_capped) (void)release_worktree_mount(wt.top);
    throw;
  }
  return wt;
}

namespace {

void checkout_into(Worktree& wt, const fs::path& workspace, const fs::path& lock_dir) {
  fs::path top;
  fs::path git_dir = find_git_dir(workspace, &top);
  std::string head;
  if (!git_dir.empty()) {
    GitStep s;
    s.what = "git rev-parse HEAD";
    s.git_dir = git_dir;
    s.work_tree = top;
    s.args = {"rev-parse", "--verify", "--quiet", "HEAD^{commit}"};
    GitResult r = run_git(s);
    if (r.code == 0) head = first_line(r.out, s.what);
  }
  if (!head.empty()) {
    wt.git = true;
    wt.base = head;
    wt.source_top = top;
    wt.source_git_dir = git_dir;
    GitStep common;
    common.what = "git rev-parse --git-common-dir";
    common.git_dir = git_dir;
    common.work_tree = top;
    common.args = {"rev-parse", "--path-format=absolute", "--git-common-dir"};
    wt.git_common_dir = fs::canonical(first_line(must_git(common).out, common.what));
    GitStep add;
    add.what = "could not create a git worktree for " + workspace.string();
    add.git_dir = git_dir;
    add.work_tree = top;
    add.args = {"worktree", "add", "--detach", "--quiet", wt.top.string(), wt.base};
    add.write = {wt.git_common_dir, wt.top.parent_path()};
    std::error_code ec;
    fs::create_directories(lock_dir, ec);
    if (ec) throw std::runtime_error("lock directory '" + lock_dir.string() + "': " + ec.message());
    wt.repo_lock = lock_dir / ("repo-" + workspace_key(wt.git_common_dir) + ".lock");
    {
      RepositoryLock lock(wt.repo_lock);
      must_git(add);
    }
    wt.git_dir = gitdir_of_file(wt.top / ".git");
    // The child's workspace is the worktree's copy of the directory it was given.
    fs::path rel = fs::relative(workspace, top);
    wt.path = (!rel.empty() && rel != ".") ? wt.top / rel : wt.top;
    fs::create_directories(wt.path);
    return;
  }
  // Not a git repository (or one without commits): a copy with a baseline commit of its own.
  wt.source_top = workspace;
  wt.path = wt.top;
  copy_tree(workspace, wt.top);
  wt.git_dir = wt.top / ".git";
  GitStep init;
  init.what = "git init in the copy";
  init.git_dir = wt.git_dir;
  init.work_tree = wt.top;
  init.args = {"init", "--quiet", "--template="};
  init.write = {wt.top};
  must_git(init);
  GitStep add = init;
  add.what = "git add in the copy";
  add.args = {"add", "-A", "--", "."};
  must_git(add);
  GitStep commit = init;
  commit.what = "baseline commit";
  commit.args = {"commit", "--quiet", "--allow-empty", "--no-verify", "-m", "baseline"};
  must_git(commit);
  GitStep rev = init;
  rev.what = "git rev-parse HEAD";
  rev.args = {"rev-parse", "HEAD"};
  wt.base = first_line(must_git(rev).out, rev.what);
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
    resize_cap(grown, wt.disk_cap_bytes * 2 + (64u << 20));
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

void remove_worktree(const Worktree& wt) noexcept {
  try {
    // No git runs in the child's tree: remove it (remove_all follows no symlink), then let the
    // repository forget the worktree.
    // A size-capped worktree goes with its tmpfs (a lazy unmount: whatever still holds it open).
    if (wt.disk_capped) (void)release_worktree_mount(wt.top);
    std::error_code ec;
    fs::remove_all(wt.top, ec);
    if (wt.git) {
      GitStep prune;
      prune.what = "git worktree prune";
      prune.git_dir = wt.git_common_dir;
      prune.work_tree = wt.source_top;
      prune.args = {"worktree", "prune"};
      prune.write = {wt.git_common_dir};
      RepositoryLock lock(wt.repo_lock);
      (void)run_git(prune);
    }
  } catch (...) {
  }
}

std::string forget_worktree(const fs::path& top, const fs::path& workspace, const fs::path& lock_dir) {
  try {
    // A disk-capped worktree is a tmpfs of its own (a dead supervisor's stays mounted): unmount it first.
    if (std::string e = release_worktree_mount(top); !e.empty()) return e;
    std::error_code ec;
    fs::remove_all(top, ec);  // follows no symlink
    if (ec) return "could not remove " + top.string() + ": " + ec.message();
    fs::path source_top;
    const fs::path git_dir = find_git_dir(workspace, &source_top);
    if (git_dir.empty()) return {};  // a copy: nothing registered anywhere
    GitStep common;
    common.what = "git rev-parse --git-common-dir";
    common.git_dir = git_dir;
    common.work_tree = source_top;
    common.args = {"rev-parse", "--path-format=absolute", "--git-common-dir"};
    const fs::path common_dir = fs::canonical(first_line(must_git(common).out, common.what));
    GitStep prune;
    prune.what = "git worktree prune";
    prune.git_dir = common_dir;
    prune.work_tree = source_top;
    prune.args = {"worktree", "prune"};
    prune.write = {common_dir};
    fs::create_directories(lock_dir, ec);
    RepositoryLock lock(lock_dir / ("repo-" + workspace_key(common_dir) + ".lock"));
    must_git(prune);
    return {};
  } catch (const std::exception& e) {
    return "could not unregister the worktree " + top.string() + ": " + e.what();
  }
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
