#pragma once
// Where subagent-supervisor finds the programs and files it ships with: the reference child and the
// presets. Everything is found relative to the running executable (/proc/self/exe, symlinks
// resolved), so an installed tree works under any prefix, after DESTDIR staging and after being moved;
// no path into a build tree or checkout is ever used by an installed binary.
//
//   <prefix>/bin/subagent-supervisor                                   (sandbox, version, --help)
//   <prefix>/libexec/subagent-supervisor/subagent-supervisor-core    (every command; SUBAGENT_INSTALL_CHILD_REL)
//   <prefix>/libexec/subagent-supervisor/subagent-child              (SUBAGENT_INSTALL_CHILD_REL from bin/)
//   <prefix>/share/subagent-supervisor/policies/*.json               (SUBAGENT_INSTALL_POLICY_REL from bin/)
//
// bin/subagent-supervisor is lean (no libcurl and its kin to load at every start): it execv()s the
// core for every command but sandbox and version. The core finds the rest from that same bin/
// directory (SUBAGENT_INSTALL_BIN_FROM_CHILD_REL from its own). A supervisor run from its own build
// directory (build/bin/) finds the core and the child next to itself and the presets in the
// checkout it was built from.
//
// Errors: exceptions (SetupError naming every place looked at).

#include <filesystem>
#include <string>

namespace supervisor {

// The child program used when no --child is given: the installed one, else subagent-child next to
// this executable (a build tree). Throws cli::SetupError (exit 125) naming every place looked at and
// how to fix it.
std::filesystem::path default_child_executable();

// subagent-supervisor-core, which the lean subagent-supervisor execs for every command but sandbox
// and version: installed beside the child, or next to this executable in a build tree. Throws
// cli::SetupError (exit 125) naming where it looked and how to fix it.
std::filesystem::path core_executable();

// A paragraph for error messages: where this executable looks for its child and presets, which of
// them it found, and what to do (cmake --install, --child, --policy-dir).
std::string install_layout_report();

// Where presets are looked up: $SUBAGENT_POLICY_DIR, else <exe>/../share/subagent-supervisor/policies,
// else, only for a program run from the build directory it was built in, the checkout's policies/.
// Throws cli::SetupError naming the places looked at when none exists.
std::filesystem::path default_policy_dir();

}  // namespace supervisor
