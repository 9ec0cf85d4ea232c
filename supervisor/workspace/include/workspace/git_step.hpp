// The one way the supervisor runs git on a tree a child could have written (worktree creation,
// patch collection, worktree removal, apply). Two independent holds, so that repository-controlled
// configuration never runs a program the child chose:
//   1. git itself is told not to: explicit GIT_DIR and GIT_WORK_TREE (no discovery), no system or
//      global config, a clean environment, and every executable setting overridden on the command
//      line (filters, fsmonitor, hooks, textconv, external diff, pager, editors, credential helpers,
//      ssh, askpass, gpg, merge drivers, transports) - including each filter, diff and merge driver
//      name the repository's configuration defines.
//   2. git runs in a sandbox of its own (sandbox::prepare/launch): no network, Landlock lets it
//      execute only /usr/bin/git and /usr/lib (git-core, the dynamic loader) - no shell, nothing the
//      child wrote - read only the repository it was given (a symlink planted in it that leads
//      elsewhere is unreadable) and the system's libraries, and write only where the step must.
// Blocking; call on the thread that should outlive the step (PR_SET_PDEATHSIG).
//
// Errors: exceptions (std::runtime_error naming the step and git's message).
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace supervisor {

struct GitStep {
  std::string what;                          // names the step in errors: "git worktree add"
  std::filesystem::path git_dir;             // GIT_DIR (required)
  std::filesystem::path work_tree;           // GIT_WORK_TREE (empty: none)
  std::filesystem::path cwd;                 // empty: work_tree, else git_dir
  std::vector<std::string> args;             // the git command and its arguments
  std::vector<std::filesystem::path> write;  // directories the step may write (besides /dev/null)
  std::vector<std::filesystem::path> read;   // files or directories it may read besides the repository's own
                                             // (git dir, its common dir and alternates, work tree, cwd)
  // Where stdout goes: captured into GitResult::out up to max_out bytes, or, when set, handed to
  // this sink chunk by chunk (return false to stop: the step is killed and `stopped` is set).
  std::function<bool(std::string_view)> out_sink;
  std::size_t max_out = 4u << 20;
  // How long the step may run (a hostile repository, a huge diff, a stuck filesystem): past it git is
  // killed and run_git throws std::runtime_error("<what>: git did not finish within <timeout>; ...").
  std::chrono::milliseconds timeout{120000};
};

struct GitResult {
  int code = -1;           // exit status; 128+N for signal N
  std::string out;         // stdout (when no sink), at most max_out bytes
  std::string err;         // stderr, at most 64 KiB
  bool truncated = false;  // stdout exceeded max_out
  bool stopped = false;    // the sink asked to stop
};

// The -c options that switch off every program git could take from configuration, for the
// repository at `git_dir` (its filter/diff/merge driver names are read with `git config` under the
// same clean environment and sandbox).
std::vector<std::string> git_neutralising_options(const std::filesystem::path& git_dir,
                                                  const std::filesystem::path& work_tree);

// Runs one step (with git_neutralising_options; its output collected by process::collect). Throws
// std::runtime_error when the sandbox cannot be prepared or launched (naming the missing layer) or
// the step outlives its timeout; never runs git unsandboxed.
GitResult run_git(const GitStep& step);

// The non-empty lines of `s` (git's output), in order.
std::vector<std::string> split_lines(const std::string& s);

// run_git, then throws std::runtime_error("<what>: <git's message>") when git failed.
GitResult must_git(const GitStep& step);

// The git directory of the repository that contains `dir`, found without running git: the nearest
// ancestor (or dir itself) holding a `.git` directory, or a `.git` file whose "gitdir: X" line names
// one that vouches for it: a linked worktree's git dir whose `gitdir` file points back at this
// `.git`, or a submodule's git dir under an ancestor's `.git/modules`. A `.git` file naming any other
// directory (a child could plant one naming a repository it cannot read) is refused with
// std::runtime_error. Empty when there is none. `top` receives the repository's top directory.
std::filesystem::path find_git_dir(const std::filesystem::path& dir, std::filesystem::path* top = nullptr);

}  // namespace supervisor
