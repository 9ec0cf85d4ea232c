// The seccomp layer, compiled in the parent with libseccomp and exported to plain BPF.
// Errors: compile_seccomp throws SandboxError (libseccomp refused a rule or the export).
#pragma once

#include <linux/filter.h>

#include <vector>

#include "sandbox/explain.hpp"
#include "sandbox/policy.hpp"

namespace sandbox {

// BPF program for `policy` on the native architecture. Throws SandboxError.
std::vector<sock_filter> compile_seccomp(const Policy& policy);

// BPF program of the minimal init (LaunchRequest::init): sigtimedwait, wait4, kill, close, write and exit.
std::vector<sock_filter> compile_init_seccomp();

}  // namespace sandbox
