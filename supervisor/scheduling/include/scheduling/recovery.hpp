// Crash recovery: what a supervisor killed without a chance to clean up (SIGKILL, the OOM killer, a
// host's hard stop) left behind, settled at the next start of a command that uses the same state
// directory, or by `subagent-supervisor recover`.
//
// Every supervisor process that runs children (run, serve, mcp) registers under
// <state_dir>/supervisors/<random id>/:
//   lock             flock(LOCK_EX) for the process's whole life, on a close-on-exec descriptor no
//                    child inherits; the kernel drops it when the process dies, however it dies;
//   supervisor.json  pid, start time, command, and the directories it uses (state, lock, transcript
//                    directory, audit log), which may be custom ones;
//   children/<id>.json  one record per admitted child, replaced atomically (temporary file, rename)
//                    at each phase change (queued, preparing, running, finishing) and removed once the
//                    child is settled normally.
// A registry is made under a hidden name (.new-<id>) and renamed into place only once its lock is
// held, so a registry under its final name is dead exactly when its lock can be taken. A pid (or a
// pid and a boot id) is never trusted: pids are reused. A live supervisor's registry is never touched.
//
// Settling a dead supervisor's child runs the steps of settle_steps() in order, each idempotent and
// keyed by what the record holds (the place where later steps go: a worker's later-execution
// quarantine, a mount to unmount):
//   worktree    <state_dir>/worktrees/<id> removed (remove_all follows no symlink) and unregistered
//               with the sandboxed `git worktree prune` (git_step.hpp); no repository code runs;
//   patch       a half-written patch (no <id>.json beside <id>.patch) removed;
//   transcript  a transcript still "running" becomes "abandoned", with the reason;
//   audit       one "abandoned" line in the dead supervisor's audit log;
// and for the supervisor as a whole its cgroups (sandbox/cgroup.hpp, "<pid>-<n>", created before a
// process of that pid started again) are removed. A record whose steps all succeeded is deleted; the
// registry goes when no record is left. A step that fails keeps the record for the next start.
//
// Errors: never thrown out of recover_dead_supervisors(); problems are reported as lines.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace supervisor {

// The directories a supervisor uses, recorded so that recovery can find what it left there.
struct RegistryInfo {
  std::filesystem::path state_dir;
  std::filesystem::path lock_dir;
  std::filesystem::path transcript_dir;  // empty: no transcripts
  std::filesystem::path audit_file;      // empty: no audit log
  std::string command;                   // "serve", "mcp", "run"
};

// One live supervisor's registry. Thread-safe (records are written from the loop and from the
// hub's worker threads). The destructor removes the registry (a clean exit leaves nothing).
class SupervisorRegistry {
 public:
  // Creates the registry under info.state_dir/supervisors; nullptr with `error` set when it cannot
  // (the supervisor then runs without crash recovery and says so).
  static std::shared_ptr<SupervisorRegistry> open(const RegistryInfo& info, std::string* error) noexcept;
  ~SupervisorRegistry();
  SupervisorRegistry(const SupervisorRegistry&) = delete;
  SupervisorRegistry& operator=(const SupervisorRegistry&) = delete;

  // Merges `fields` into the child's record and writes it (write, rename; `sync`: fsync file and
  // directory too, for writes that are off the loop anyway). Never throws; errors are ignored (the
  // child goes on, its leftovers then wait for the user).
  void update(const std::string& child, const nlohmann::json& fields, bool sync = false) noexcept;
  // The child was settled normally: its record goes.
  void settled(const std::string& child) noexcept;

  const std::filesystem::path& dir() const noexcept { return dir_; }
  const RegistryInfo& info() const noexcept { return info_; }

 private:
  SupervisorRegistry(std::filesystem::path dir, int lock_fd, RegistryInfo info)
      : dir_(std::move(dir)), lock_fd_(lock_fd), info_(std::move(info)) {}
  std::filesystem::path dir_;
  int lock_fd_;
  RegistryInfo info_;
  std::mutex mu_;
  std::map<std::string, nlohmann::json> records_;
};

struct RecoveryReport {
  std::size_t supervisors = 0;        // dead registries found
  std::size_t children = 0;           // child records settled
  std::vector<std::string> lines;     // what was done, one line each
  std::vector<std::string> problems;  // what could not be done (the record is kept)
};

// Settles every dead supervisor's registry under state_dir/supervisors. `by` names the command
// that recovers ("serve", "recover", ...) in the reasons it writes. Never throws.
RecoveryReport recover_dead_supervisors(const std::filesystem::path& state_dir, const std::string& by) noexcept;

// One settle step: returns "" when done (or nothing to do), else the problem. `note` receives a
// line for what it did. The record is the child's record, with "supervisor" (supervisor.json) and
// "reason" added.
struct SettleStep {
  const char* name;
  std::string (*run)(nlohmann::json& record, std::vector<std::string>& note);
};
const std::vector<SettleStep>& settle_steps();

}  // namespace supervisor
