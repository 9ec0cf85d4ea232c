#include "cli/install_layout.hpp"

#include <unistd.h>

#include <cstdlib>
#include <system_error>

#include "cli/cli.hpp"
#include "policy/preset.hpp"

// Set by supervisor/CMakeLists.txt for this file only (a definition on the whole library would make
// every object differ between checkouts and defeat the shared ccache).
#ifndef SUBAGENT_INSTALL_CHILD_REL
#error "SUBAGENT_INSTALL_CHILD_REL: the child's directory relative to the installed bin directory"
#endif
#ifndef SUBAGENT_INSTALL_BIN_FROM_CHILD_REL
#error "SUBAGENT_INSTALL_BIN_FROM_CHILD_REL: the installed bin directory relative to the child's directory"
#endif
#ifndef SUBAGENT_INSTALL_POLICY_REL
#error "SUBAGENT_INSTALL_POLICY_REL: the presets' directory relative to the installed bin directory"
#endif
#if !defined(SUBAGENT_BUILD_BIN_DIR) || !defined(SUBAGENT_SOURCE_POLICY_DIR)
#error "SUBAGENT_BUILD_BIN_DIR and SUBAGENT_SOURCE_POLICY_DIR: this build's bin directory and its checkout's policies"
#endif

namespace supervisor {
namespace fs = std::filesystem;

namespace {

constexpr const char* kChildName = "subagent-child";
constexpr const char* kCoreName = "subagent-supervisor-core";

// The running executable with symlinks resolved ("/usr/local/bin/subagent-supervisor"); empty when
// /proc is not mounted.
fs::path self_executable() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe;
}

// The two compiled-in absolute paths (the build's bin/ and the checkout's policies/) serve only a
// program run straight from the build directory it was built in: the test suite, `./build/bin/...`.
// They are used only when the running executable sits in exactly that bin/ directory. An installed
// or copied binary lives anywhere else, so it never reads presets from a checkout that may since have
// changed, moved or been deleted: it would run with other presets than the ones installed with it,
// and a policy file is the single source of what a child may do.
bool in_build_tree(const fs::path& exe_dir) {
  std::error_code ec;
  return !exe_dir.empty() && fs::equivalent(exe_dir, fs::path(SUBAGENT_BUILD_BIN_DIR), ec) && !ec;
}

struct Places {
  fs::path exe;                 // empty: /proc/self/exe unreadable
  fs::path installed_child;     // <bin>/../libexec/subagent-supervisor/subagent-child
  fs::path sibling_child;       // <bin>/subagent-child (a build tree)
  fs::path installed_core;      // <bin>/../libexec/subagent-supervisor/subagent-supervisor-core
  fs::path sibling_core;        // <bin>/subagent-supervisor-core (a build tree)
  fs::path installed_policies;  // <bin>/../share/subagent-supervisor/policies
  bool build_tree = false;
};

Places places() {
  Places p;
  p.exe = self_executable();
  if (p.exe.empty()) return p;
  // Lexical normalisation is exact here: /proc/self/exe has no symlinks and no "..".
  fs::path bin = p.exe.parent_path();
  p.build_tree = in_build_tree(bin);
  // An installed core (exec'd by bin/subagent-supervisor) lives beside the child: everything is found
  // from that bin directory. A core anywhere else (a build tree's bin/, or copied on its own) looks
  // from its own directory, as the full program it is.
  const fs::path installed_bin = (bin / SUBAGENT_INSTALL_BIN_FROM_CHILD_REL).lexically_normal();
  if (!p.build_tree && p.exe.filename() == kCoreName &&
      (installed_bin / SUBAGENT_INSTALL_CHILD_REL).lexically_normal() == bin)
    bin = installed_bin;
  p.installed_child = (bin / SUBAGENT_INSTALL_CHILD_REL / kChildName).lexically_normal();
  p.sibling_child = bin / kChildName;
  p.installed_core = (bin / SUBAGENT_INSTALL_CHILD_REL / kCoreName).lexically_normal();
  p.sibling_core = bin / kCoreName;
  p.installed_policies = (bin / SUBAGENT_INSTALL_POLICY_REL).lexically_normal();
  return p;
}

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return !p.empty() && fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

bool directory(const fs::path& p) {
  std::error_code ec;
  return !p.empty() && fs::is_directory(p, ec);
}

const char* found(bool yes) { return yes ? "found" : "missing"; }

}  // namespace

std::string install_layout_report() {
  const Places p = places();
  if (p.exe.empty())
    return "/proc/self/exe cannot be read (is /proc mounted?), so this program cannot find the files installed "
           "with it: pass --child PATH and --policy-dir DIR.";
  std::string r =
      p.exe.string() + " looks for the files installed with it relative to itself: the child " +
      p.installed_child.string() + " (" + found(executable_file(p.installed_child)) + ")" +
      (p.build_tree
           ? " or " + p.sibling_child.string() + " (" + found(executable_file(p.sibling_child)) + ", the build tree's)"
           : std::string()) +
      ", the presets in " + p.installed_policies.string() + "/ (" + found(directory(p.installed_policies)) + ")";
  if (p.build_tree) r += std::string(" or ") + SUBAGENT_SOURCE_POLICY_DIR + "/ (the checkout this build came from)";
  r += ". To fix: install with `cmake --install BUILD_DIR --prefix PREFIX`, which puts them in place (README.md, "
       "Install; a binary copied on its own has neither), or pass --child PATH and --policy-dir DIR (or set "
       "SUBAGENT_POLICY_DIR).";
  return r;
}

fs::path default_child_executable() {
  const Places p = places();
  if (executable_file(p.installed_child)) return p.installed_child;
  // Beside the executable only in the build tree: an installed binary never picks up a stray copy
  // left in its bin/ (by an older layout, or by hand) in place of the one installed with it.
  if (p.build_tree && executable_file(p.sibling_child)) return p.sibling_child;
  throw cli::SetupError("no child program (and no --child given). " + install_layout_report());
}

fs::path core_executable() {
  const Places p = places();
  if (p.exe.empty())
    throw cli::SetupError(
        std::string("/proc/self/exe cannot be read (is /proc mounted?), so this program cannot find ") + kCoreName +
        ", which runs every command but sandbox and version");
  if (executable_file(p.installed_core)) return p.installed_core;
  if (p.build_tree && executable_file(p.sibling_core)) return p.sibling_core;  // as for the child
  throw cli::SetupError(
      std::string("no ") + kCoreName + ", which runs every command but sandbox and version: " + p.exe.string() +
      " looks for it at " + p.installed_core.string() + " (missing)" +
      (p.build_tree ? " or " + p.sibling_core.string() + " (missing, the build tree's)" : std::string()) +
      ". To fix: install with `cmake --install BUILD_DIR --prefix PREFIX`, which puts it in place (README.md, "
      "Install); a binary copied on its own has no core.");
}

fs::path default_policy_dir() {
  if (const char* env = ::getenv("SUBAGENT_POLICY_DIR"); env && *env) return env;
  const Places p = places();
  if (directory(p.installed_policies)) return p.installed_policies;
  if (p.build_tree && directory(SUBAGENT_SOURCE_POLICY_DIR)) return SUBAGENT_SOURCE_POLICY_DIR;
  throw cli::SetupError("no presets (no --policy-dir given and SUBAGENT_POLICY_DIR is not set). " +
                        install_layout_report());
}

}  // namespace supervisor
