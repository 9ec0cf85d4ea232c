// Workspace sanity: directories no child may get as its workspace or as a write root, because a
// preset's grants on them would reach the whole host ("/"), the user's own files (the home
// directory itself), the system (/etc, /usr, ...) or credentials (~/.ssh, ~/.aws, ...; those are
// refused as read and execute roots too). One check, used by every front end (`sandbox`,
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
//    /proc, /sys, /var/lib, /var/log, /var/cache, /var/spool, /var/mail, /var/backups;
//  - credential_reason().
std::string unsafe_workspace_reason(const std::filesystem::path& dir);

// Why the canonical path `dir` would give a child credentials, or "" when it would not: for every
// user's home (each /etc/passwd entry, $HOME, /root; "/" and homes that do not exist are skipped),
// it is, lies inside, or lies below the home and holds one of ~/.ssh, ~/.aws, ~/.gnupg,
// ~/.config/gh, ~/.config/gcloud, ~/.config/git/credentials, ~/.config/hub, ~/.config/rclone,
// ~/.docker, ~/.kube, ~/.azure, ~/.netrc, ~/.git-credentials, ~/.npmrc, ~/.pypirc,
// ~/.cargo/credentials(.toml), ~/.pgpass, ~/.my.cnf, ~/.vault-token, ~/.password-store,
// ~/.local/share/keyrings, ~/.terraform.d, ~/.gem/credentials, ~/.s3cfg, ~/.boto, the supervisor's
// model config (~/.config/subagent-supervisor, $XDG_CONFIG_HOME/subagent-supervisor,
// $SUBAGENT_MODEL_CONFIG) and state directory's transcripts/ and supervisors/
// (~/.local/state/subagent-supervisor, $XDG_STATE_HOME/subagent-supervisor, $SUBAGENT_STATE_DIR).
// The state directory itself is refused (and its ancestors below a home) but not its worktrees/,
// where implementation children work, nor patches/, which the sandboxed git of `apply` uses. Both the path as named and
// its target (symlinks resolved) count. The list (every home in /etc/passwd, its entries resolved) is
// built again when a second has passed or the variables above change, so a credential directory
// made or linked meanwhile counts within that second; thread-safe.
std::string credential_reason(const std::filesystem::path& dir);

// Why `dir` is too much to grant a child as a root of the given kind, or "" when it is not.
// Write roots: unsafe_workspace_reason() (launch refuses them). Read and execute roots: "/", the
// user's home directory and every directory above it, the host-wide trees /etc, /proc, /sys,
// /dev, /var, /run, /boot, /root, /home, /tmp, /srv, /mnt, /media as a whole (single entries beneath
// them, /etc/passwd or /dev/null, are what presets grant on purpose), and credential_reason().
// /usr, /lib and /bin are not listed: every program needs them.
enum class RootKind { read, write, execute };
std::string unsafe_root_reason(const std::filesystem::path& dir, RootKind kind);

// Resolves `path` (symlinks included; it must exist) and throws UnsafeWorkspaceError when it is
// unsafe. `what` names the role in the message: "workspace", "write root".
void check_workspace(const std::filesystem::path& path, const std::string& what);

// The same for a read or execute root: throws UnsafeWorkspaceError when credential_reason() names
// one (launch refuses those; the other read-root reasons stay `policy check` warnings).
void check_read_root(const std::filesystem::path& path, const std::string& what);

}  // namespace sandbox
