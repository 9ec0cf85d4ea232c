// The hub: every child of one supervisor process. Validates spawns against the parent's scope
// (inherit, never widen), queues them under the concurrency and per-turn limits, holds the
// one-writer-per-workspace locks, prepares isolated worktrees for implementation children and turns
// their work into patches. Front ends (`serve`, `mcp`) sit on top of it.
//
// Single-threaded: every method must be called on the io_context's thread. spawn_async's checks
// (they read files), worktree creation, the later-execution scans, patch collection, worktree removal
// and the final transcript write run on worker threads (offload.hpp), their results posted back to
// that thread.
//
// Errors: spawn() throws, and spawn_async() answers with, ScopeError or WideningError (scope.hpp)
// naming the field; once accepted, every failure ends in the child's envelope.
#pragma once

#include <chrono>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "protocol/envelope.hpp"
#include "session/budgets.hpp"
#include "session/scope.hpp"
#include "records/audit.hpp"
#include "session/session.hpp"
#include "records/transcript.hpp"
#include "workspace/lock.hpp"
#include "workspace/patch.hpp"
#include "workspace/worktree.hpp"
#include "offload/offload.hpp"
#include "scheduling/recovery.hpp"

namespace supervisor {

struct SpawnRequest {
  std::string preset;
  std::string brief;
  std::string description;
  std::filesystem::path workspace;
  std::string model;  // empty: the hub's default
  BudgetOverrides limits;
  std::optional<std::vector<std::string>> tools;    // narrow the preset's tools to these
  std::optional<std::vector<std::string>> domains;  // research: domains the child may fetch from
  // Tightens the preset's writes.max_disk_bytes (never widens: WideningError).
  std::optional<std::uint64_t> max_disk_bytes;
};

inline constexpr std::size_t kMaxConcurrentCeiling = 64;
inline constexpr std::size_t kMaxPerTurnCeiling = 256;
// Finished children remembered for list and output (older ones are forgotten; transcripts remain).
inline constexpr std::size_t kKeepFinished = 256;

struct HubConfig {
  std::filesystem::path policy_dir;
  std::filesystem::path child_executable;
  std::vector<std::string> child_args;
  std::size_t max_concurrent = 8;
  std::size_t max_per_turn = 24;
  // The ceilings max_concurrent and max_per_turn are clamped to. No front end or flag sets these:
  // they exist for benchmarks of many children on the in-process runtime.
  std::size_t concurrent_ceiling = kMaxConcurrentCeiling;
  std::size_t per_turn_ceiling = kMaxPerTurnCeiling;
  std::string default_model;
  std::string parent = "parent";  // who asked, for logs and audit
  Scope scope;
  Approver approver;  // empty: nobody can answer approvals; "ask" is denied at once
  std::chrono::milliseconds approval_timeout{300'000};
  WorkspaceConfig workspaces;
  bool allow_unsafe_workspace = false;           // --allow-unsafe-workspace (sandbox/workspace_guard.hpp)
  std::shared_ptr<TranscriptStore> transcripts;  // null: no transcripts
  std::shared_ptr<AuditLog> audit;               // null: no audit log
  std::shared_ptr<SupervisorRegistry> registry;  // crash recovery's records (recovery.hpp); null: none
  std::string search_endpoint;                   // web_search backend for research children
  std::function<void(const std::string& line)> on_log;
  std::function<void(const nlohmann::json& event)> on_event;
  std::function<void(const Progress&)> on_progress;  // a running child took a step (Progress::id names it)
  // A queued child began to wait for a workspace lock another writer holds (once per wait).
  std::function<void(const std::string& id, const std::string& why)> on_waiting;
  std::size_t max_line = protocol::kDefaultMaxLine;  // longest protocol line from a child
  std::chrono::milliseconds handshake_timeout{10'000};
  // Where every child runs; null: this host's sandbox (local_runtime()). Tests give the in-process one.
  std::shared_ptr<ChildRuntime> runtime;
};

struct ChildInfo {
  std::string id;
  ChildState state;  // queued, waiting_for_lock, running or done
  std::string preset;
  std::string description;
  std::string waiting_for;  // why a queued child waits
  Progress progress;
  std::optional<protocol::Envelope> envelope;
};

namespace detail {
struct StartPrep;
struct CheckedSpawn;
struct SpawnChecks;
}  // namespace detail

class Hub {
 public:
  using DoneHandler = std::function<void(const protocol::Envelope&)>;
  // A spawn's answer: the child's id, or what was wrong with the request (then `id` is empty).
  using Accepted = std::function<void(const std::string& id, std::exception_ptr error)>;
  // Runs on a worker before the checks; may rewrite the request or throw (a front end's own checks
  // that read files, as MCP's allowed roots). Touches only what it captured by value.
  using PrepareRequest = std::function<void(SpawnRequest&)>;

  Hub(boost::asio::io_context& io, HubConfig cfg);
  ~Hub();

  // Validates the request on a worker thread (the checks read files: the workspace's path and
  // ownership, the model config or the whole replay script, a preset given as a file; and the
  // child's crash-recovery record is written there), then, back on the loop, starts or queues the
  // child. `accepted` runs once, on the loop and never within this call: with the child's id, or
  // with what was wrong (ScopeError, WideningError, PresetError, ModelSpecError, or the prepare
  // step's own; nothing is started then). A spawn asked for once the hub shuts down or drains is
  // refused (ScopeError); one asked for before and still being checked is taken as it would have
  // been then (drained: it runs; shut down: accepted, then cancelled before it starts), and shutdown()'s and
  // drain()'s `done` wait for it. `on_done` runs exactly once with the envelope of an accepted
  // child; it may run before `accepted` (a child refused before it started).
  void spawn_async(const SpawnRequest& req, Accepted accepted, DoneHandler on_done, PrepareRequest prepare = {});
  // The same checks and start on the calling thread, which waits for the files: for tests and
  // benchmarks that have no loop running yet. Throws what spawn_async answers; returns the id.
  std::string spawn(const SpawnRequest& req, DoneHandler on_done);
  // false when the id is unknown. A queued child is removed with a cancelled envelope at once.
  bool cancel(const std::string& id, const std::string& reason);
  std::vector<ChildInfo> list() const;
  std::optional<ChildInfo> info(const std::string& id) const;
  // The parent started a new turn: the per-turn count starts again.
  void new_turn();
  // Cancels every child; `done` runs when every envelope has been delivered.
  void shutdown(const std::string& reason, std::function<void()> done);
  // Takes no new children and lets every running, queued or waiting one finish on its own;
  // `done` runs when every envelope has been delivered. A later shutdown() cancels what is left.
  void drain(std::function<void()> done);

  std::size_t running() const noexcept { return running_; }
  const HubConfig& config() const noexcept { return cfg_; }
  // The presets this hub was made with (read once, policy/preset.hpp).
  const PresetCatalog& presets() const noexcept { return *presets_; }

 private:
  struct Child;
  void pump();
  bool try_start(Child& c);
  // What the checks need, copied for a worker.
  detail::SpawnChecks spawn_checks() const;
  // Queues a checked child and, when `start`, starts what can start; returns its id.
  std::string admit(detail::CheckedSpawn checked, DoneHandler on_done, bool start = true);
  void on_child_done(const std::string& id, protocol::Envelope e);
  void deliver(Child& c, protocol::Envelope e);
  void forget_finished(const Child& newest);
  void check_shutdown();
  SessionConfig session_config(Child& c);
  // Goes on with a start once its preparation is done; `in_pump`: called from pump() (which then
  // goes on by itself).
  void launch_prepared(Child& c, detail::StartPrep p, bool in_pump);
  void on_child_finished(const std::string& id, Outcome<std::pair<protocol::Envelope, std::string>> r);

  boost::asio::io_context& io_;
  HubConfig cfg_;
  // cfg_.policy_dir, read once here (policy/preset.hpp); shared, read-only, with spawn checks on workers.
  std::shared_ptr<const PresetCatalog> presets_;
  std::map<std::string, std::unique_ptr<Child>> children_;
  std::deque<std::string> queue_;
  std::size_t running_ = 0;
  std::size_t started_this_turn_ = 0;
  boost::asio::steady_timer lock_poll_;
  bool polling_ = false;
  std::function<void()> shutdown_done_;
  bool shutting_down_ = false;
  std::size_t checking_ = 0;                    // spawns whose checks run on a worker
  std::optional<std::string> shutdown_reason_;  // set by shutdown(): a spawn checked after it is cancelled
  // Expires with the hub: a session cancelled by ~Hub may still end (if the loop runs on), and its
  // envelope must then find no hub rather than a destroyed one.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  OffloadGroup jobs_;  // last: destroyed first, so no result arrives at a half-destroyed hub
};

}  // namespace supervisor
