#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include <mutex>

#include "cgroup.hpp"
#include "namespaces.hpp"
#include "sandbox/explain.hpp"
#include "syscalls.hpp"

namespace sandbox {

std::vector<LayerStatus> kernel_support() {
  static std::once_flag once;
  static std::vector<LayerStatus> support;
  std::call_once(once, [] {
    const bool root = ::geteuid() == 0;
    const int abi = sys::landlock_abi();
    const bool user = namespaces_supported(CLONE_NEWUSER);
    auto ns = [&](Layer layer, unsigned long flag) {
      unsigned long flags = flag | (root ? 0 : CLONE_NEWUSER);
      bool ok = namespaces_supported(flags);
      return LayerStatus{layer, ok,
                         ok ? (root ? "available" : "available inside a user namespace") : "refused by the kernel"};
    };
    // The mount API exists when a call with a bad fd fails with anything but ENOSYS.
    const bool mount_api = ::syscall(SYS_open_tree, -1, "", 0) < 0 && errno != ENOSYS &&
                           ::syscall(SYS_mount_setattr, -1, "", 0, nullptr, 0) < 0 && errno != ENOSYS;
    const bool mount_ns = namespaces_supported(CLONE_NEWNS | (root ? 0 : CLONE_NEWUSER));
    const bool identity = root && user && mount_ns && mount_api;
    support = {
        {Layer::kNoNewPrivs, true, "PR_SET_NO_NEW_PRIVS (Linux 3.5)"},
        {Layer::kCapabilities, true, "capset, PR_CAPBSET_DROP, PR_CAP_AMBIENT"},
        {Layer::kSession, true, "setsid"},
        {Layer::kPdeathsig, true, "PR_SET_PDEATHSIG"},
        {Layer::kCloseFds, true, "close_range (Linux 5.9)"},
        {Layer::kCleanEnv, true, "environment built from the policy allowlist"},
        {Layer::kRlimits, true, "setrlimit"},
        {Layer::kLandlock, abi > 0,
         abi > 0
             ? "Landlock ABI " + std::to_string(abi) + (abi >= 4 ? " (filesystem, TCP bind/connect)" : " (filesystem)")
             : "no Landlock: not built in, or not in the lsm= list"},
        {Layer::kLandlockScopes, abi >= 6,
         abi >= 6 ? "signal and abstract unix socket scoping (ABI 6)" : "needs Landlock ABI 6 (Linux 6.12)"},
        {Layer::kSeccomp, true, "SECCOMP_SET_MODE_FILTER; filter built with libseccomp"},
        {Layer::kUserNamespace, user, user ? "available" : "refused by the kernel"},
        ns(Layer::kPidNamespace, CLONE_NEWPID),
        ns(Layer::kNetNamespace, CLONE_NEWNET),
        ns(Layer::kIpcNamespace, CLONE_NEWIPC),
        ns(Layer::kUtsNamespace, CLONE_NEWUTS),
        ns(Layer::kMountNamespace, CLONE_NEWNS),
        {Layer::kReadOnlyHost, mount_ns && mount_api,
         !mount_api ? "needs open_tree, move_mount and mount_setattr (Linux 5.12)"
         : mount_ns ? "pivot_root into a read-only tmpfs of bind clones"
                    : "needs the mount namespace"},
        {Layer::kIdentity, identity,
         identity ? "a host uid/gid of its own per child, mapped to the workspace owner"
         : !root  ? "the supervisor is not root: the child keeps the user's uid"
                  : "needs the user and mount namespaces and the mount API"},
        {Layer::kIdmappedRoots, identity,
         identity ? "id-mapped mounts (mount_setattr MOUNT_ATTR_IDMAP) of the write roots"
                  : "needs the identity layer"},
    };
    for (LayerStatus& l : tree_limit_support()) support.push_back(std::move(l));
  });
  return support;
}

}  // namespace sandbox
