// The fixed vocabularies a policy may name.
#pragma once

#include <array>
#include <string_view>

namespace sandbox {

inline constexpr std::array<std::string_view, 6> kNamespaceNames = {"user", "pid", "net",
                                                                    "ipc",  "uts", "mount"};

// Every layer launch() can apply, in the order layers() reports them.
inline constexpr std::array<std::string_view, 22> kLayerNames = {
    "no_new_privs",    "capabilities",  "session",       "pdeathsig",       "close_fds",
    "clean_env",       "rlimits",       "landlock",      "landlock_scopes", "seccomp",
    "user_namespace",  "pid_namespace", "net_namespace", "ipc_namespace",   "uts_namespace",
    "mount_namespace",
    // rootfs.hpp
    "read_only_host",  "identity",      "idmapped_roots",
    // cgroup.hpp
    "process_cap",     "memory_cap",    "cpu_cap"};

}  // namespace sandbox
