// Namespace support probing and the parent's half of user-namespace setup.
#pragma once

#include <sys/types.h>

#include <string>

namespace sandbox {

// Whether clone() with exactly these CLONE_NEW* flags succeeds here; probed with a short-lived
// child once per distinct flag set and cached. Thread-safe.
bool namespaces_supported(unsigned long clone_flags);

// Writes the child's uid/gid maps (identity map of the caller's ids). When `allow_setgroups` is
// false, writes "deny" to setgroups first (required when the caller lacks CAP_SETGID).
// Throws SandboxError.
void write_id_maps(pid_t child, uid_t uid, gid_t gid, bool allow_setgroups);

}  // namespace sandbox
