// Namespace support probing and the parent's half of user-namespace setup.
// Errors: probes return what the kernel allows (never throw); write_id_maps throws SandboxError.
#pragma once

#include <sys/types.h>

#include <string>

namespace sandbox {

// Whether clone() with exactly these CLONE_NEW* flags succeeds here; probed with a short-lived
// child once per distinct flag set and cached. Thread-safe.
bool namespaces_supported(unsigned long clone_flags);

// Whether a child cloned with these flags (which must hold CLONE_NEWPID and CLONE_NEWNS) can mount
// a procfs of its own PID namespace: 0 when it can, else the errno the kernel gave (EPERM when no
// procfs is fully visible to replace, as in containers that mask parts of /proc). Probed once per
// set of flags, in a throwaway child.
int private_proc_refusal(unsigned long clone_flags);

// Writes the child's uid/gid maps (identity map of the caller's ids). When `allow_setgroups` is
// false, writes "deny" to setgroups first (required when the caller lacks CAP_SETGID).
// Throws SandboxError.
void write_id_maps(pid_t child, uid_t uid, gid_t gid, bool allow_setgroups);

// The same with one id inside mapped to another outside: inner_uid -> outer_uid, inner_gid ->
// outer_gid (root only: mapping to an id that is not the caller's needs CAP_SETUID/CAP_SETGID).
void write_id_maps(pid_t child, uid_t inner_uid, uid_t outer_uid, gid_t inner_gid, gid_t outer_gid,
                   bool allow_setgroups);

}  // namespace sandbox
