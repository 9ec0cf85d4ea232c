// What a policy compiles to and what the running kernel offers, for `policy explain` and envelopes.
// Errors: report values, never exceptions: what the kernel lacks is a LayerStatus with applied
// false and the reason; syscall_table and syscall_groups take a parsed (valid) Policy.
#pragma once

#include <string>
#include <vector>

#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"

namespace sandbox {

struct SyscallDecision {
  std::string syscall;    // syscall name, or "*" for the default / architecture rows
  std::string action;     // "allow", "errno EPERM", "errno ENOSYS", "errno EAFNOSUPPORT", "kill process"
  std::string condition;  // empty when unconditional, e.g. "flags & CLONE_NEWUSER"
  // Why: the group that allows it ("base"), "sandbox.syscalls.allow", "sandbox.syscalls.deny",
  // "always denied", "group watch not allowed", "default".
  std::string origin;
};

// Every seccomp decision the policy's filter makes, in rule order. Pure: no kernel calls.
std::vector<SyscallDecision> syscall_table(const Policy& policy);

struct SyscallGroupInfo {
  std::string name;     // "base", "process", ..., and last "always_denied"
  std::string purpose;  // one line
  std::vector<std::string> members;
  bool allowed;  // the policy's filter allows the group (always false for "always_denied")
};

// The named syscall groups (sandbox.syscalls.groups), each marked allowed or not for `policy`,
// then the syscalls every preset refuses. Pure.
std::vector<SyscallGroupInfo> syscall_groups(const Policy& policy);

// What the running kernel and process allow, one entry per layer name (see layers()): applied means
// "available here", detail says how (e.g. "Landlock ABI 7") or why not. Probes once per process
// (forks short-lived children for namespaces); thread-safe.
std::vector<LayerStatus> kernel_support();

}  // namespace sandbox
