// The Landlock layer: a ruleset opened in the parent; the child only calls restrict_self on it.
// Errors: build_landlock throws SandboxError for a path or rule the kernel refuses; Landlock
// missing from the kernel is no error (fd -1, and the detail says why).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sandbox {

struct LandlockPaths {
  std::vector<std::string> read, write, execute, protect;  // substituted, absolute
  bool deny_tcp = false;                                   // network "none"
};

struct LandlockRuleset {
  int fd = -1;  // O_CLOEXEC ruleset fd, owned by the caller; -1 when Landlock is absent
  int abi = 0;  // ABI the ruleset was built for
  bool scoped = false;
  bool tcp_denied = false;
  std::string detail;  // human-readable summary, including skipped (missing) paths
};

// The rights of a directory rule for `abi` (0: none, no Landlock): reading, and with `write` every
// right but execute, as build_landlock grants a read or a write root.
std::uint64_t landlock_directory_access(int abi, bool read, bool write);

// Throws SandboxError for a path that cannot be opened (other than "does not exist" for a path
// that is not the workspace) or a rule the kernel rejects.
LandlockRuleset build_landlock(const LandlockPaths& paths, const std::string& required_workspace);

}  // namespace sandbox
