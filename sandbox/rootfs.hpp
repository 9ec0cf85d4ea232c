// The child's root filesystem and identity, parent side.
//
// In the child's mount namespace the host's tree is replaced by a read-only tmpfs that holds only
// the policy's paths: each read, execute and write root is a detached clone (open_tree) of the
// host's mount tree at that path, moved into the tmpfs at the same path, read-only unless it is a
// write root; symlinks on the way (/lib -> usr/lib, /etc/localtime) are recreated as symlinks.
// Then pivot_root, and the host's tree is detached. So outside its write roots a child can change
// no file, mode, owner, timestamp or attribute (EROFS), and paths no policy names do not exist.
//
// Identity (root supervisor with a user namespace): the child's host uid and gid are
// kIdentityBase + its host pid, an id no account uses, distinct for every live child (host pids
// are), so it owns nothing on the host and RLIMIT_NPROC counts each child on its own. Inside its
// user namespace that id is the workspace owner's (uid W, gid G from stat), and the write roots and
// the workspace are id-mapped mounts through that namespace: on-disk W appears as the child, and
// what the child creates is stored as W, so the workspace's owner can edit it afterwards.
// Minimum kernel: 5.12 (mount_setattr, id-mapped mounts); tmpfs write roots need 6.3.
//
// Errors: parent-side planning and cloning throw SandboxError naming the path; a root or identity
// that this kernel or privilege cannot give is a LayerStatus (applied false, with the reason).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sandbox/launch.hpp"

namespace sandbox {

class Plan;

// Host ids kIdentityBase + pid, pid < 2^22 (PID_MAX_LIMIT on 64-bit): 0x6f000000-0x6f3fffff, far
// above the 100000+ ranges useradd puts in /etc/subuid and below the 2^31 that some tools treat as
// negative.
inline constexpr uid_t kIdentityBase = 0x6f000000;
inline constexpr uid_t kIdentityCount = 1U << 22;

struct RootPaths {
  std::vector<std::string> read, write, execute;  // substituted, lexically normal, absolute
  std::string workspace;
  bool home = false;           // the policy names ${home}: a private home at kHomePath
  bool home_writable = false;  // ... as a write root
};

// Whether a root can be id-mapped: kMap for the disk and memory file systems that support it
// (ext2/3/4, xfs, btrfs, f2fs, vfat, tmpfs), kPlain for pseudo file systems and device nodes (ptys,
// /dev/null: ownership there is not the child's concern), kUnsupported for any other (e.g. NFS).
enum class Idmap { kMap, kPlain, kUnsupported };
Idmap idmap_kind(const std::string& path);

// Fills plan.root_binds, plan.root_ops and the tmpfs options; `idmap` marks the write roots and
// the workspace for id-mapped clones. Returns the read_only_host layer's detail. Throws
// SandboxError (a path that cannot be inspected, too many roots, "/" as a root).
std::string plan_new_root(Plan& plan, const RootPaths& paths, bool idmap);

struct RootLayers {
  LayerStatus read_only_host, identity, idmapped_roots;
};

// prepare()'s part: decides the identity (root, with the user and mount namespaces in
// plan.clone_flags, and every write root on a file system with id-mapped mounts) and plans the
// new root (with the mount namespace). Returns the three layers, applied or with the reason.
RootLayers plan_root_and_identity(Plan& plan, const RootPaths& paths, bool root);

// Parent side of launch(), root only, after the child's id maps are written: a detached clone of
// every root bind (id-mapped through the child's user namespace where marked, read-only where not
// writable), in root_binds order. The caller sends and closes them. Throws SandboxError naming the
// path.
std::vector<int> clone_roots(const Plan& plan, pid_t child);

// Releases the child: one byte over the sync socket, with `fds` attached (SCM_RIGHTS).
void send_release(int sync_fd, const std::vector<int>& fds);

}  // namespace sandbox
