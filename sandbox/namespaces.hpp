// Namespace support probing and the parent's half of user-namespace setup.
// Errors: probes return what the kernel allows (never throw); write_id_maps throws SandboxError.
//
// prepare() does not probe: a probe is a fork per namespace type, ~30 ms for one `sandbox` command
// (the IPC namespace's teardown alone ~25 ms), paid again by every process. It plans with what is
// known (a probe's answer from earlier in this process) and otherwise assumes the kernel grants it,
// so the launch's own clone is the probe. When that clone (or the child's /proc mount) is refused,
// launch.cpp records it here and throws NamespaceRefusedError; prepare() run again then probes, so
// the plan and its layer report are exactly what probing before the launch would have given.
#pragma once

#include <sys/types.h>

#include <cstddef>
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

// What prepare() plans with: namespaces_supported's answer once it is known (probed earlier in this
// process) or once a launch was refused a namespace (then it probes); until then true, and
// *assumed is set: the launch's clone answers instead. Never clears *assumed. Thread-safe.
bool namespaces_expected(unsigned long clone_flags, bool* assumed);

// The same for private_proc_refusal: 0 (and *assumed set) until known or refused at a launch.
int private_proc_expected(unsigned long clone_flags, bool* assumed);

// A launch's clone was refused with a namespace error / its child's procfs mount was refused: from
// now on the *_expected answers of this process are probed. Thread-safe, irreversible.
void namespace_refused_at_launch() noexcept;
void private_proc_refused_at_launch() noexcept;

namespace detail {
// For tests: the probe children this process has cloned so far, and forgetting every answer and
// refusal learnt (as in a fresh process). Not for the supervisor: knowledge is never dropped there.
std::size_t probes_cloned() noexcept;
void forget_namespace_knowledge();
}  // namespace detail

// Writes the child's uid/gid maps (identity map of the caller's ids). When `allow_setgroups` is
// false, writes "deny" to setgroups first (required when the caller lacks CAP_SETGID).
// Throws SandboxError.
void write_id_maps(pid_t child, uid_t uid, gid_t gid, bool allow_setgroups);

// The same with one id inside mapped to another outside: inner_uid -> outer_uid, inner_gid ->
// outer_gid (root only: mapping to an id that is not the caller's needs CAP_SETUID/CAP_SETGID).
void write_id_maps(pid_t child, uid_t inner_uid, uid_t outer_uid, gid_t inner_gid, gid_t outer_gid,
                   bool allow_setgroups);

}  // namespace sandbox
