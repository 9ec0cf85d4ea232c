// Self-protection for the process that holds secrets (the supervisor).
// Errors: exceptions (SandboxError naming the step).
#pragma once

namespace sandbox {

// Makes the calling process non-dumpable (PR_SET_DUMPABLE 0: same-uid processes can no longer
// ptrace it or read /proc/<pid>/{environ,mem}, and it leaves no core dump), sets RLIMIT_CORE to 0
// marks every open fd above 2 close-on-exec, and opens /dev/null on any of 0, 1 and 2 that is
// closed (else the next pipe would take that number). Irreversible for dumpable; call once at start,
// before any thread is created. Throws SandboxError naming the step that failed.
void protect_self();

}  // namespace sandbox
