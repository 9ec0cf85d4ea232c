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
    auto ns = [&](const char* layer, unsigned long flag) {
      unsigned long flags = flag | (root ? 0 : CLONE_NEWUSER);
      bool ok = namespaces_supported(flags);
      return LayerStatus{layer, ok,
                         ok ? (root ? "available" : "available inside a user namespace")
                            : "refused by the kernel"};
    };
    support = {
        {"no_new_privs", true, "PR_SET_NO_NEW_PRIVS (Linux 3.5)"},
        {"capabilities", true, "capset, PR_CAPBSET_DROP, PR_CAP_AMBIENT"},
        {"session", true, "setsid"},
        {"pdeathsig", true, "PR_SET_PDEATHSIG"},
        {"close_fds", true, "close_range (Linux 5.9)"},
        {"clean_env", true, "environment built from the policy allowlist"},
        {"rlimits", true, "setrlimit"},
        {"landlock", abi > 0,
         abi > 0 ? "Landlock ABI " + std::to_string(abi) +
                       (abi >= 4 ? " (filesystem, TCP bind/connect)" : " (filesystem)")
                 : "no Landlock: not built in, or not in the lsm= list"},
        {"landlock_scopes", abi >= 6,
         abi >= 6 ? "signal and abstract unix socket scoping (ABI 6)"
                  : "needs Landlock ABI 6 (Linux 6.12)"},
        {"seccomp", true, "SECCOMP_SET_MODE_FILTER; filter built with libseccomp"},
        {"user_namespace", user, user ? "available" : "refused by the kernel"},
        ns("pid_namespace", CLONE_NEWPID),
        ns("net_namespace", CLONE_NEWNET),
        ns("ipc_namespace", CLONE_NEWIPC),
        ns("uts_namespace", CLONE_NEWUTS),
        ns("mount_namespace", CLONE_NEWNS),
    };
    for (LayerStatus& l : tree_limit_support()) support.push_back(std::move(l));
  });
  return support;
}

}  // namespace sandbox
