// Seccomp programs compiled at build time. libseccomp takes milliseconds to compile a preset's
// filter (a quarter of the `sandbox` command's own CPU on the machines in bench/README.md), and the
// shipped presets' filters are known when the program is built. tools/precompile_seccomp compiles
// them with the same rules and the same libseccomp, and writes a table that executables link in
// (its symbol is a weak reference here: an executable without it compiles every program at run
// time).
//
// A program is used only for a policy whose key (everything the rules are made of) is the key it
// was compiled for, and only when the libseccomp linked at run time is the version that compiled
// it; anything else is compiled at run time. The table is part of the binary: no file outside the
// program decides a filter.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "sandbox/policy.hpp"

namespace sandbox {

struct PrecompiledSeccompProgram {
  const char* key;
  const sock_filter* insns;
  unsigned count;
};

struct PrecompiledSeccompTable {
  unsigned libseccomp_major, libseccomp_minor, libseccomp_micro;
  unsigned count;
  const PrecompiledSeccompProgram* programs;
};

// Everything the policy's rules are made of: two policies with the same key compile to the same
// program.
std::string seccomp_program_key(const Policy& policy);
// The key of the minimal init's program (compile_init_seccomp).
std::string init_seccomp_program_key();

// libseccomp's compile, with no cache and no table. Throws SandboxError.
std::vector<sock_filter> compile_seccomp_uncached(const Policy& policy);
std::vector<sock_filter> compile_init_seccomp_uncached();

// The linked table's program for `key`, or null: no table linked, no program for that key, or a
// run-time libseccomp other than the one that compiled the table.
const PrecompiledSeccompProgram* find_precompiled_seccomp(const std::string& key);

// What the linked table holds (null when none is), for its tests and `policy explain`.
const PrecompiledSeccompTable* precompiled_seccomp_table();

}  // namespace sandbox

// Defined by the generated table (tools/precompile_seccomp); weak, so it is null where none is
// linked.
extern "C" const sandbox::PrecompiledSeccompTable subagent_precompiled_seccomp __attribute__((weak));
