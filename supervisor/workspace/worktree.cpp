// Worktrees: a git worktree or a copy per writer child, optionally on a size-capped tmpfs
// (workspace/worktree.hpp).
#include "workspace/worktree.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "workspace/git_step.hpp"
#include "workspace/lock.hpp"

namespace supervisor {
namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& s, const std::string& what) {
  auto v = split_lines(s);
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

void resize_worktree_cap(Worktree& wt, std::uint64_t size) { resize_cap(wt, size); }

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

}  // namespace supervisor
