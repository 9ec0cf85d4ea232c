#include "rootfs.hpp"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <linux/magic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "namespaces.hpp"
#include "plan.hpp"
#include "sandbox/policy.hpp"
#include "syscalls.hpp"

namespace sandbox {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, int err) {
  throw SandboxError("new root: " + what + ": " + std::strerror(err));
}

bool under(const std::string& path, const std::string& dir) {
  return path == dir ||
         (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && (dir == "/" || path[dir.size()] == '/'));
}

// The policy path with every symlink on the way resolved, recording each symlink met (its path
// and text) so that the new root can hold the same link. Empty when the path does not exist.
std::string resolve(const std::string& path, std::map<std::string, std::string>& links, int depth) {
  if (depth > 40) fail("resolving '" + path + "'", ELOOP);
  const fs::path p = fs::path(path).lexically_normal();
  fs::path cur = "/";
  for (auto it = std::next(p.begin()); it != p.end(); ++it) {
    if (it->empty()) continue;  // a trailing slash
    const fs::path next = cur / *it;
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return "";
      fail("inspecting '" + next.string() + "'", errno);
    }
    if (S_ISLNK(st.st_mode)) {
      char text[4096];
      ssize_t n = ::readlink(next.c_str(), text, sizeof text - 1);
      if (n < 0) fail("reading the symlink '" + next.string() + "'", errno);
      const std::string target(text, static_cast<std::size_t>(n));
      links[next.string()] = target;
      fs::path rest = target.front() == '/' ? fs::path(target) : cur / target;
      for (auto r = std::next(it); r != p.end(); ++r) rest /= *r;
      return resolve(rest.lexically_normal().string(), links, depth + 1);
    }
    cur = next;
  }
  return cur.string();
}

bool is_device_like(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
}

std::string relative(const std::string& absolute) { return absolute.substr(1); }

}  // namespace

Idmap idmap_kind(const std::string& path) {
  if (is_device_like(path)) return Idmap::kPlain;
  struct statfs st {};
  if (::statfs(path.c_str(), &st) != 0) return Idmap::kUnsupported;
  switch (static_cast<unsigned long>(st.f_type)) {
    case EXT4_SUPER_MAGIC:  // also ext2 and ext3
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
    case MSDOS_SUPER_MAGIC:
    case TMPFS_MAGIC:  // Linux 6.3
      return Idmap::kMap;
    case DEVPTS_SUPER_MAGIC:
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
      return Idmap::kPlain;
    default:
      return Idmap::kUnsupported;
  }
}

std::string plan_new_root(Plan& plan, const RootPaths& paths, bool idmap) {
  // Canonical path -> writable; and the symlinks met on the way.
  std::map<std::string, bool> wanted;
  std::map<std::string, std::string> links;
  auto want = [&](const std::string& path, bool writable) {
    if (path.empty() || path.front() != '/') throw SandboxError("new root: policy path '" + path + "' is not absolute");
    std::string canonical = resolve(path, links, 0);
    if (canonical.empty()) return;  // missing: Landlock's layer lists it as skipped
    if (canonical == "/")
      throw SandboxError("new root: the policy path '" + path +
                         "' is the whole host tree, which cannot be bound read-only into the "
                         "child's root; name the directories it needs instead");
    // A device node is written through its driver, not its file system: a read-only bind of it
    // stays writable (/dev/null), and one inside a bound tree needs no bind of its own.
    wanted[canonical] |= writable && !is_device_like(canonical);
  };
  want(paths.workspace, false);
  for (const auto& p : paths.read) want(p, false);
  for (const auto& p : paths.execute) want(p, false);
  for (const auto& p : paths.write) want(p, true);
  const std::string workspace = resolve(paths.workspace, links, 0);

  // Parents sort before their children. A path inside one already bound is skipped unless it
  // needs more (a write root inside a read-only root); it is then bound onto the clone beneath.
  std::vector<std::pair<std::string, bool>> bound;
  std::set<std::string> made;  // skeleton entries already in root_ops
  std::vector<RootOp> binds;
  auto covered = [&](const std::string& path) {
    for (auto it = bound.rbegin(); it != bound.rend(); ++it)
      if (under(path, it->first)) return &*it;
    return static_cast<std::pair<std::string, bool>*>(nullptr);
  };
  auto skeleton = [&](const std::string& path, RootOp::Kind last, const std::string& target) {
    const fs::path p(path);
    fs::path cur = "/";
    for (auto it = std::next(p.begin()); it != p.end(); ++it) {
      cur /= *it;
      const bool is_last = std::next(it) == p.end();
      if (!made.insert(cur.string()).second) continue;
      plan.root_ops.push_back({is_last ? last : RootOp::kDir, relative(cur.string()), is_last ? target : "", -1});
    }
  };
  for (const auto& [path, writable] : wanted) {
    const auto* outer = covered(path);
    if (outer && (outer->second || !writable)) continue;
    if (plan.root_binds.size() >= static_cast<std::size_t>(kMaxRootBinds))
      throw SandboxError("new root: more than " + std::to_string(kMaxRootBinds) +
                         " separate policy paths; list fewer, wider directories");
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("inspecting '" + path + "'", errno);
    const bool mapped = idmap && (writable || path == workspace) && idmap_kind(path) == Idmap::kMap;
    plan.root_binds.push_back({path, writable, mapped});
    if (!outer) skeleton(path, S_ISDIR(st.st_mode) ? RootOp::kDir : RootOp::kFile, "");
    binds.push_back({RootOp::kBind, relative(path), "", static_cast<int>(plan.root_binds.size() - 1)});
    bound.emplace_back(path, writable);
  }
  // Symlinks, unless they lie inside a bound tree (where the clone already has them).
  std::string link_detail;
  for (const auto& [path, target] : links) {
    if (covered(path) || made.count(path)) continue;
    skeleton(path, RootOp::kSymlink, target);
    link_detail += (link_detail.empty() ? "" : ", ") + path + " -> " + target;
  }
  plan.root_ops.insert(plan.root_ops.end(), binds.begin(), binds.end());

  // The private home: an empty tmpfs of the child's own over a new directory, after the binds so
  // that nothing of the host lies beneath it; a policy path at or around it would be hidden or
  // would hold it, so that is refused.
  std::string home_detail;
  if (paths.home) {
    const std::string home = kHomePath;
    for (const RootBind& b : plan.root_binds)
      if (under(b.source, home) || under(home, b.source))
        throw SandboxError("new root: the policy path '" + b.source + "' " +
                           (under(b.source, home) ? "lies inside" : "holds") + " the private home " + home +
                           " that ${home} names; use one or the other");
    for (const auto& [path, target] : links)
      if (under(home, path))
        throw SandboxError("new root: the host's '" + path + "' is a symlink, and the private home " + home +
                           " lies beneath it");
    skeleton(home, RootOp::kDir, "");
    plan.root_ops.push_back({RootOp::kHome, relative(home), "", -1});
    plan.private_home = true;
    plan.home_writable = paths.home_writable;
    home_detail = "; " + home + ": a private empty tmpfs, " + (paths.home_writable ? "writable" : "read-only") +
                  ", gone when the child ends";
  }

  // /proc: the child's own, when it has a PID namespace; never the host's (a policy path beneath
  // /proc would be a bind of the host's, so it keeps the tree the policy asked for instead).
  std::string proc_detail;
  const auto* host_proc = [&]() -> const RootBind* {
    for (const RootBind& b : plan.root_binds)
      if (under(b.source, "/proc")) return &b;
    return nullptr;
  }();
  if (!(plan.clone_flags & CLONE_NEWPID)) {
    proc_detail = "no /proc (it needs the PID namespace, which is not in force)";
  } else if (host_proc) {
    proc_detail = "no procfs of its own: the policy binds the host's '" + host_proc->source + "'";
  } else if (int refusal = private_proc_expected(plan.clone_flags & (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID),
                                                 &plan.assumed_proc)) {
    proc_detail = std::string("no /proc: the kernel refused a procfs for the child's PID namespace (") +
                  std::strerror(refusal) +
                  (refusal == EPERM ? "; no fully visible /proc here to stand in for, as in a "
                                      "container that masks parts of it)"
                                    : ")");
  } else {
    plan.private_proc = true;
    if (made.insert("/proc").second) plan.root_ops.push_back({RootOp::kDir, "proc", "", -1});
    plan.root_ops.push_back({RootOp::kProc, "proc", "", -1});
    proc_detail = "/proc: a read-only procfs of the child's own PID namespace (its processes only)";
  }

  std::string writable_list;
  for (const RootBind& b : plan.root_binds)
    if (b.writable) writable_list += (writable_list.empty() ? "" : ", ") + b.source;
  std::string detail = "pivot_root into a read-only tmpfs holding only the policy's " +
                       std::to_string(plan.root_binds.size()) +
                       " paths, read-only bind clones except the write roots; writable: " +
                       (writable_list.empty() ? "nothing" : writable_list);
  if (!link_detail.empty()) detail += "; symlinks kept: " + link_detail;
  return detail + "; " + proc_detail + home_detail;
}

RootLayers plan_root_and_identity(Plan& plan, const RootPaths& paths, bool root) {
  const std::string& workspace = paths.workspace;
  RootLayers out{{Layer::kReadOnlyHost, false, ""}, {Layer::kIdentity, false, ""}, {Layer::kIdmappedRoots, false, ""}};
  const bool mount_ns = plan.clone_flags & CLONE_NEWNS;
  // The child's own id needs every write root (and the workspace) id-mapped, or it could not
  // write its own files there.
  std::string unmappable;
  for (const std::string& p : paths.write) {
    std::error_code ec;
    if (fs::exists(p, ec) && idmap_kind(p) == Idmap::kUnsupported) unmappable = p;
  }
  if (idmap_kind(workspace) == Idmap::kUnsupported) unmappable = workspace;
  if (root && plan.user_ns && mount_ns && !unmappable.empty()) {
    out.identity = {Layer::kIdentity, false,
                    "'" + unmappable +
                        "' is on a file system without id-mapped mounts (ext4, xfs, btrfs, f2fs, "
                        "vfat and tmpfs have them), so the child keeps uid 0 without capabilities"};
  } else if (root && plan.user_ns && mount_ns) {
    struct stat st {};
    if (::stat(workspace.c_str(), &st) != 0) {
      int err = errno;
      throw SandboxError("launch request: workspace '" + workspace + "' cannot be inspected: " + std::strerror(err));
    }
    plan.identity = true;
    plan.inner_uid = st.st_uid;
    plan.inner_gid = st.st_gid;
    char base[16];
    std::snprintf(base, sizeof base, "0x%x", kIdentityBase);
    out.identity = {Layer::kIdentity, true,
                    std::string("host uid and gid ") + base +
                        " + the child's host pid (one per live child, owning nothing on the "
                        "host); inside its user namespace uid " +
                        std::to_string(st.st_uid) + " and gid " + std::to_string(st.st_gid) +
                        " (the workspace's owner)"};
  } else if (!root) {
    std::string subuid;
    passwd pwd{};
    passwd* pw = nullptr;
    char pwbuf[4096];
    if (::getpwuid_r(::getuid(), &pwd, pwbuf, sizeof pwbuf, &pw) == 0 && pw) {
      std::ifstream in("/etc/subuid");
      std::string line;
      while (std::getline(in, line))
        if (line.rfind(std::string(pw->pw_name) + ":", 0) == 0 || line.rfind(std::to_string(::getuid()) + ":", 0) == 0)
          subuid = line;
    }
    out.identity = {Layer::kIdentity, false,
                    "the supervisor is not root: the child keeps uid " + std::to_string(::getuid()) +
                        " (identity map), since an id-mapped mount of the workspace needs CAP_SYS_ADMIN in "
                        "the initial user namespace; " +
                        (subuid.empty() ? std::string("no /etc/subuid range for this user")
                                        : "the /etc/subuid range (" + subuid +
                                              ") is not used: files the child creates would belong to a subordinate id "
                                              "the user cannot edit") +
                        ". The read-only root still stops changes outside the write roots"};
  } else {
    out.identity = {Layer::kIdentity, false,
                    std::string("needs the user and mount namespaces, which are not both in "
                                "force; the child runs as uid 0 without capabilities")};
  }

  if (!mount_ns) {
    out.read_only_host.detail =
        std::string("needs the mount namespace") + (paths.home ? " (and so does the private home: ${home} names no "
                                                                 "directory the child can reach)"
                                                               : "");
    out.idmapped_roots.detail = "needs the mount namespace";
    return out;
  }
  out.read_only_host = {Layer::kReadOnlyHost, true, plan_new_root(plan, paths, plan.identity)};
  plan.parent_clones = root;
  if (plan.identity) {
    std::string mapped;
    for (const RootBind& b : plan.root_binds)
      if (b.idmapped) mapped += (mapped.empty() ? "" : ", ") + b.source + (b.writable ? " (rw)" : " (ro)");
    out.idmapped_roots = {Layer::kIdmappedRoots, !mapped.empty(),
                          mapped.empty() ? "no write root or workspace to map"
                                         : "on-disk uid " + std::to_string(plan.inner_uid) + " and gid " +
                                               std::to_string(plan.inner_gid) + " are the child's in: " + mapped};
  } else {
    out.idmapped_roots.detail = root ? "needs the identity layer"
                                     : "needs a root supervisor; the child keeps the user's "
                                       "uid, so what it creates is the user's anyway";
  }
  return out;
}

std::vector<int> clone_roots(const Plan& plan, pid_t child) {
  std::vector<int> fds;
  auto cleanup = [&]() noexcept {
    for (int fd : fds) ::close(fd);
  };
  fds.push_back(sys::make_root_tmpfs());
  if (fds.back() < 0) {
    int err = errno;
    fds.clear();
    fail("creating the tmpfs for the child's root", err);
  }
  int userns = -1;
  if (plan.identity) {
    const std::string ns = "/proc/" + std::to_string(child) + "/ns/user";
    userns = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    if (userns < 0) {
      int err = errno;
      cleanup();
      fail("opening " + ns, err);
    }
  }
  for (const RootBind& b : plan.root_binds) {
    int fd = sys::open_tree_clone(AT_FDCWD, b.source.c_str(), 0);
    if (fd < 0) {
      int err = errno;
      cleanup();
      if (userns >= 0) ::close(userns);
      fail("cloning the mount tree at '" + b.source + "'", err);
    }
    fds.push_back(fd);
    sys::MountAttr attr{};
    if (!b.writable) attr.attr_set |= MOUNT_ATTR_RDONLY;
    if (b.idmapped) {
      attr.attr_set |= MOUNT_ATTR_IDMAP;
      attr.userns_fd = static_cast<std::uint64_t>(userns);
    }
    if (attr.attr_set != 0 && sys::mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr) != 0) {
      int err = errno;
      cleanup();
      if (userns >= 0) ::close(userns);
      fail(std::string(b.idmapped ? "id-mapping" : "making read-only") + " the clone of '" + b.source + "'" +
               (b.idmapped && err == EINVAL ? " (its filesystem has no id-mapped mounts)" : ""),
           err);
    }
  }
  if (userns >= 0) ::close(userns);
  return fds;
}

void send_release(int sync_fd, const std::vector<int>& fds) {
  char go = 1;
  struct iovec iov = {&go, 1};
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kMaxRootBinds + 1))];
  if (!fds.empty()) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  while ((n = ::sendmsg(sync_fd, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (n != 1) {
    int err = errno;
    throw SandboxError(std::string("launch: releasing the child failed: ") + std::strerror(err));
  }
}

}  // namespace sandbox
