// Workspace sanity: directories no child may get as its workspace or as a write root, because a
// preset's grants on them would reach the whole host ("/"), the user's own files (the home
// directory itself) or the system (/etc, /usr, ...). One check, used by every front end (`sandbox`,
// `run`, `serve`, `mcp`) for an early, clear error and by sandbox::prepare() as the backstop.
//
// Errors: check_workspace throws UnsafeWorkspaceError; the *_reason functions are queries that
// return the reason, "" for a safe directory.
#pragma once

#include <filesystem>
#include <string>

#include "sandbox/launch.hpp"

namespace sandbox {

inline constexpr const char* kAllowUnsafeWorkspaceFlag = "--allow-unsafe-workspace";

// Thrown by check_workspace(); what() names the path, why, and the flag.
class UnsafeWorkspaceError : public SandboxError {
 public:
  using SandboxError::SandboxError;
};

// Why the canonical directory `dir` is unsafe as a workspace or write root, or "" when it is not:
//  - exactly: "/", the user's home directory ($HOME and the passwd entry) and every directory above
//    it, /home, /root, /var, /run, /srv, /opt, /mnt, /media, /tmp, /var/tmp, /usr/local,
//    /lost+found, /dev;
//  - it or anything beneath it: /etc, /usr, /bin, /sbin, /lib, /lib32, /lib64, /libx32, /boot,
//    /proc, /sys, /var/lib, /var/log, /var/cache, /var/spool, /var/mail, /var/backups.
std::string unsafe_workspace_reason(const std::filesystem::path& dir);

// Why `dir` is too much to grant a child as a root of the given kind, or "" when it is not.
// Write roots: unsafe_workspace_reason() (launch refuses them). Read and execute roots: "/", the
// user's home directory and every directory above it, and the host-wide trees /etc, /proc, /sys,
// /dev, /var, /run, /boot, /root, /home, /tmp, /srv, /mnt, /media as a whole (single entries beneath
// them, /etc/passwd or /dev/null, are what presets grant on purpose). /usr, /lib and /bin are not
// listed: every program needs them.
enum class RootKind { read, write, execute };
std::string unsafe_root_reason(const std::filesystem::path& dir, RootKind kind);

// Resolves `path` (symlinks included; it must exist) and throws UnsafeWorkspaceError when it is
// unsafe. `what` names the role in the message: "workspace", "write root".
void check_workspace(const std::filesystem::path& path, const std::string& what);

}  // namespace sandbox
