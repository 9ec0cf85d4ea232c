// The syscall vocabulary of the seccomp allowlist, defined once: the named groups a policy's
// sandbox.syscalls.groups may list, the syscalls refused in every preset, and the effective grant of
// a policy. seccomp.cpp compiles from it, policy.cpp validates against it, explain prints it.
// Errors: none; lookups return empty or false for names that are not in the vocabulary.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/policy.hpp"

namespace sandbox {

struct SyscallGroupDef {
  std::string_view name;
  std::string_view purpose;  // one line, for policy explain and policies/README.md
  std::span<const std::string_view> members;
};

// Every group, in the order explain prints them. No syscall is in two groups.
std::span<const SyscallGroupDef> syscall_group_defs();

// nullptr when `name` is no group.
const SyscallGroupDef* find_syscall_group(std::string_view name);

// Refused with EPERM in every preset; a policy cannot allow them.
std::span<const std::string_view> always_denied_syscalls();

// The groups a policy's filter allows: sandbox.syscalls.groups, plus "network" when
// sandbox.network is "loopback" or "host" (the network field is itself a grant of sockets), in the
// order of syscall_group_defs(). Sanitizer builds need no group of their own (policies/README.md).
std::vector<std::string> effective_syscall_groups(const Policy& policy);

}  // namespace sandbox
