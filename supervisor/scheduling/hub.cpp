#include "scheduling/hub.hpp"

#include "web/research.hpp"
#include "session/session_records.hpp"

#include "sandbox/workspace_guard.hpp"
#include "workspace/held.hpp"

#include <malloc.h>
#include <sys/statfs.h>
#include <algorithm>
#include <boost/asio/post.hpp>
#include <set>

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {
// What try_start prepares off the loop before a child can start.
struct StartPrep {
  std::optional<Worktree> worktree;
  std::vector<std::string> later_execution;
  LaterExecutionSnapshot later_before;
  std::vector<std::string> later_protected;
  std::string error;         // the envelope's reason when preparing failed
  bool scan_failed = false;  // the later-execution scan failed: the lock goes at once
};

// A spawn request that passed its checks: its id, its workspace canonical, its model named, its
// preset narrowed to the scope and its budgets computed.
struct CheckedSpawn {
  std::string id;
  SpawnRequest req;
  std::shared_ptr<const Preset> preset;
  Budgets budgets;
  ResolvedModel model;  // read: the launch reads no file for it
};

struct SpawnChecks {
  Scope scope;
  std::shared_ptr<const PresetCatalog> presets;
  std::string default_model;
  bool allow_unsafe_workspace = false;
  std::shared_ptr<SupervisorRegistry> registry;
  std::shared_ptr<TranscriptStore> transcripts;
  std::string parent;
};
}  // namespace detail

struct Hub::Child {
  std::string id;
  SpawnRequest req;
  ResolvedModel model;
  std::shared_ptr<const Preset> preset;
  Budgets budgets;
  DoneHandler on_done;
  ChildState state = ChildState::queued;
  std::string waiting_for;
  std::shared_ptr<ChildSession> session;
  std::optional<WorkspaceLock> lock;
  std::optional<Worktree> worktree;
  // A worker's later-execution paths: the list it was started with and what existed then.
  std::vector<std::string> later_execution;
  LaterExecutionSnapshot later_before;
  std::vector<std::string> later_protected;  // absolute, read-only in the child
  std::optional<protocol::Envelope> envelope;
  std::shared_ptr<SessionRecords> records;
  std::shared_ptr<WebTools> web;
  std::chrono::steady_clock::time_point queued_at = std::chrono::steady_clock::now();
  // Its worktree or its later-execution scan is being prepared off the loop (counts as running).
  bool starting = false;
  std::optional<std::string> cancelled_while_starting;  // the reason of a cancel() meanwhile
  bool removal_pending = false;                         // its worktree is being removed after it was delivered
};

namespace {

protocol::Envelope unstarted_envelope(const std::string& id, const Preset& p, const std::string& description,
                                      protocol::Status status, const std::string& reason) {
  protocol::Envelope e;
  e.id = id;
  e.preset = p.name;
  e.description = description;
  e.status = status;
  e.reason = reason;
  return e;
}

// On a worker: the later-execution scan of a locked workspace and the isolated worktree. Touches
// only its arguments.
detail::StartPrep prepare_start(bool locked, bool worktree, const fs::path& workspace, std::vector<std::string> later,
                                const fs::path& state_dir, const fs::path& lock_dir, const std::string& id,
                                std::uint64_t disk_budget) {
  detail::StartPrep p;
  if (locked) {
    try {
      LaterExecutionWatch w = watch_later_execution(workspace, std::move(later));
      // Persisted before the child runs: whoever settles it (this hub, or crash recovery after a
      // SIGKILLed supervisor) needs only the state directory.
      record_spawn(state_dir, id, w);
      p.later_execution = std::move(w.list);
      for (const auto& rel : w.protected_paths) p.later_protected.push_back((workspace / rel).string());
      p.later_before = std::move(w.before);
    } catch (const std::exception& e) {
      p.later_execution.clear();
      p.later_protected.clear();
      p.error = std::string("could not inspect the workspace's later-execution paths: ") + e.what();
      p.scan_failed = true;
      return p;
    }
  }
  if (worktree) {
    try {
      p.worktree = create_worktree(workspace, state_dir, lock_dir, id, disk_budget);
    } catch (const std::exception& e) {
      p.error = std::string("could not create an isolated worktree: ") + e.what();
    }
  }
  return p;
}

// On a worker: what on_child_done does to a finished child's workspace and records before the
// envelope is delivered. The session is done, so its records are no longer used on the loop.
struct FinishWork {
  std::vector<std::string> later_execution;
  LaterExecutionSnapshot later_before;
  std::vector<std::string> later_protected;
  fs::path workspace;
  std::optional<Worktree> worktree;
  fs::path state_dir;
  std::string id;
  WritePolicy writes;
  std::shared_ptr<SessionRecords> records;
};

// The child's whole tree has died (its PID namespace is gone, or its process group was killed and
// reaped): what it left among the later-execution paths is moved aside until the parent releases it.
void finish_later_execution_watch(const FinishWork& w, protocol::Envelope& e) {
  if (w.later_execution.empty()) return;
  try {
    e.artifacts["later_execution"] = held_to_json(settle_later_execution(w.state_dir, w.id), w.state_dir);
  } catch (const std::exception& ex) {
    e.artifacts["later_execution"] = {
        {"error", std::string("could not hold the later-execution paths: ") + ex.what()},
        {"warning",
         "paths the child created that run on the user's next ordinary command may be LIVE in the workspace: "
         "review .git, hooks, agent and editor configuration before running anything there"}};
  }
}

// Returns the transcript problem to log on the loop ("" when none).
std::string finish_off_loop(const FinishWork& w, bool locked, protocol::Envelope& e) {
  if (locked) finish_later_execution_watch(w, e);
  if (w.worktree) {
    try {
      Patch p = collect_patch(*w.worktree, w.state_dir, w.id, w.writes);
      e.artifacts["patch"] = {
          {"path", p.file.string()},
          {"files", p.files},
          {"bytes", p.bytes},
          {"base", w.worktree->base},
          {"workspace", w.workspace.string()},
          {"review", to_json(p.review)},
          {"apply", "subagent-supervisor apply " + w.id +
                        (p.review.flagged() ? " --allow-flagged (after reviewing the flagged changes)" : "")}};
    } catch (const std::exception& ex) {
      e.artifacts["patch"] = {{"error", std::string("could not collect the patch: ") + ex.what()}};
    }
    if (!w.worktree->disk_capped) {
      // No size-capped filesystem: the disk budget is only watched (free space), never enforced.
      e.sandbox_missing.push_back("disk_cap");
      e.artifacts["disk"] = {
          {"max_disk_bytes", w.writes.max_disk_bytes}, {"capped", false}, {"missing", w.worktree->disk_cap_missing}};
    }
    remove_worktree(*w.worktree);
  }
  // scrubbed; the transcript gets the final envelope
  std::string problem;
  if (w.records) w.records->finish_quietly(e, &problem);
  return problem;
}

}  // namespace

Hub::Hub(boost::asio::io_context& io, HubConfig cfg)
    : io_(io), cfg_(std::move(cfg)), presets_(std::make_shared<const PresetCatalog>(cfg_.policy_dir)), lock_poll_(io) {
  cfg_.max_concurrent =
      std::clamp<std::size_t>(cfg_.max_concurrent, 1, std::max<std::size_t>(1, cfg_.concurrent_ceiling));
  cfg_.max_per_turn = std::clamp<std::size_t>(cfg_.max_per_turn, 1, std::max<std::size_t>(1, cfg_.per_turn_ceiling));
}

Hub::~Hub() {
  for (auto& [id, c] : children_)
    if (c->session && !c->session->done()) c->session->cancel("the supervisor is shutting down");
}

namespace {

// The spawn's checks, on a worker (spawn_async) or the caller's thread (spawn): everything they read
// was captured in `k`. Throws what the request got wrong; writes the crash-recovery record of a child
// that passes.
detail::CheckedSpawn check_spawn(const SpawnRequest& req, const detail::SpawnChecks& k) {
  const Scope& scope = k.scope;
  check_preset_in_scope(req.preset, scope);
  auto preset = std::make_shared<Preset>(scoped_preset(k.presets->get(req.preset), scope, req.tools, req.domains));
  if (req.max_disk_bytes) {
    if (*req.max_disk_bytes == 0)
      throw WideningError("max_disk_bytes 0: must be at least 1 (leave it out to keep the preset " + preset->name +
                          "'s " + std::to_string(preset->writes.max_disk_bytes) + ")");
    if (*req.max_disk_bytes > preset->writes.max_disk_bytes)
      throw WideningError("max_disk_bytes " + std::to_string(*req.max_disk_bytes) + " exceeds the preset " +
                          preset->name + "'s writes.max_disk_bytes " + std::to_string(preset->writes.max_disk_bytes) +
                          " (limits may only tighten)");
    preset->writes.max_disk_bytes = *req.max_disk_bytes;
  }
  if (req.brief.empty()) throw ScopeError("brief: may not be empty");
  std::error_code ec;
  fs::path ws = fs::canonical(req.workspace, ec);
  if (ec || !fs::is_directory(ws))
    throw ScopeError("workspace: '" + req.workspace.string() + "' is not an existing directory");
  if (!k.allow_unsafe_workspace) {
    try {
      sandbox::check_workspace(ws, "workspace");
    } catch (const sandbox::UnsafeWorkspaceError& e) {
      throw ScopeError(std::string(e.what()) + " (a flag of the supervisor, not of the request)");
    }
  }
  const std::string model = req.model.empty() ? k.default_model : req.model;
  if (model.empty()) throw ScopeError("model: none given and the supervisor has no default (--model)");
  detail::CheckedSpawn c;
  c.model = resolve_model(model);
  c.id = new_child_id();
  c.req = req;
  c.req.workspace = ws;
  c.req.model = model;
  c.budgets = effective_budgets(*preset, scope, req.limits);
  c.preset = std::move(preset);
  if (k.registry) {
    json r = {{"phase", "queued"},
              {"preset", c.preset->name},
              {"parent", k.parent},
              {"workspace", ws.string()},
              {"queued_at", rfc3339_utc()}};
    if (k.transcripts) r["transcript"] = k.transcripts->path_for(c.id).string();
    k.registry->update(c.id, r);
  }
  return c;
}

ScopeError shutting_down_error() { return ScopeError("the supervisor is shutting down; no new children"); }

}  // namespace

detail::SpawnChecks Hub::spawn_checks() const {
  return {cfg_.scope,    presets_,         cfg_.default_model, cfg_.allow_unsafe_workspace,
          cfg_.registry, cfg_.transcripts, cfg_.parent};
}

std::string Hub::spawn(const SpawnRequest& req, DoneHandler on_done) {
  if (shutting_down_) throw shutting_down_error();
  return admit(check_spawn(req, spawn_checks()), std::move(on_done));
}

void Hub::spawn_async(const SpawnRequest& req, Accepted accepted, DoneHandler on_done, PrepareRequest prepare) {
  if (shutting_down_) {
    // Answered on the loop, never within the call; the shutdown's `done` waits for it, so the
    // refusal reaches the parent before the front end flushes and ends.
    ++checking_;
    boost::asio::post(io_, [this, alive = std::weak_ptr<int>(alive_), accepted = std::move(accepted)] {
      if (alive.expired()) return;
      --checking_;
      accepted({}, std::make_exception_ptr(shutting_down_error()));
      check_shutdown();
    });
    return;
  }
  struct Checked {
    std::optional<detail::CheckedSpawn> spawn;
    std::exception_ptr error;  // destroyed on the loop with the rest of the result
  };
  ++checking_;
  jobs_.run(
      io_,
      [req, k = spawn_checks(), prepare = std::move(prepare)] {
        Checked out;
        try {
          SpawnRequest r = req;
          if (prepare) prepare(r);
          out.spawn = check_spawn(r, k);
        } catch (...) {
          out.error = std::current_exception();
        }
        return out;
      },
      [this, accepted = std::move(accepted), on_done = std::move(on_done)](Outcome<Checked> r) mutable {
        --checking_;
        std::exception_ptr error = !r ? std::make_exception_ptr(std::runtime_error(r.error)) : r.value->error;
        if (error) {
          accepted({}, error);
        } else {
          // Asked for before a drain or a shutdown began: taken as it would have been then. A drain
          // lets it run; a shutdown cancels it before it starts, after the parent has its id.
          const bool cancelled = shutdown_reason_.has_value();
          const std::string id = admit(std::move(*r.value->spawn), std::move(on_done), /*start=*/!cancelled);
          accepted(id, nullptr);
          if (cancelled) cancel(id, *shutdown_reason_);
        }
        check_shutdown();
      });
}

std::string Hub::admit(detail::CheckedSpawn checked, DoneHandler on_done, bool start) {
  auto c = std::make_unique<Child>();
  c->id = std::move(checked.id);
  c->req = std::move(checked.req);
  c->budgets = checked.budgets;
  c->preset = std::move(checked.preset);
  c->model = std::move(checked.model);
  c->on_done = std::move(on_done);
  const std::string id = c->id;
  if (cfg_.on_event)
    cfg_.on_event(make_event(
        EventKind::queued,
        {{"child", id}, {"preset", c->preset->name}, {"parent", cfg_.parent}, {"description", c->req.description}}));
  children_[id] = std::move(c);
  queue_.push_back(id);
  if (start) pump();
  return id;
}

namespace {

// The disk budget of a writer as its session watches it (DiskWatch); none for a reader.
std::optional<DiskWatch> disk_watch(const Preset& preset, const std::optional<Worktree>& worktree,
                                    const fs::path& workspace) {
  if (preset.workspace_mode == WorkspaceMode::read) return std::nullopt;
  const std::uint64_t budget = preset.writes.max_disk_bytes;
  DiskWatch w;
  if (worktree && worktree->disk_capped) {
    // Its own tmpfs: ENOSPC in the child enforces the budget; the watch notices it is (nearly) full.
    w.path = worktree->top;
    w.floor_bytes = std::min<std::uint64_t>(64u << 10, worktree->disk_cap_bytes / 32);
    w.what = "the worktree's " + std::to_string(worktree->disk_cap_bytes) +
             "-byte tmpfs (its checkout plus writes.max_disk_bytes " + std::to_string(budget) + ") is full";
    return w;
  }
  // A shared filesystem: the free space it had at the start, less the budget.
  w.path = worktree ? worktree->top : workspace;
  struct statfs st {};
  if (::statfs(w.path.c_str(), &st) != 0) return std::nullopt;
  const std::uint64_t free = static_cast<std::uint64_t>(st.f_bavail) * static_cast<std::uint64_t>(st.f_bsize);
  w.floor_bytes = free > budget ? free - budget : 0;
  w.what = "the filesystem of " + w.path.string() + " has writes.max_disk_bytes " + std::to_string(budget) +
           " bytes less free space than at the start";
  return w;
}

}  // namespace

SessionConfig Hub::session_config(Child& c) {
  SessionConfig s;
  s.id = c.id;
  s.preset = c.preset;
  s.budgets = c.budgets;
  s.brief = c.req.brief;
  s.description = c.req.description;
  s.workspace = c.worktree ? c.worktree->path : c.req.workspace;
  s.allow_unsafe_workspace = cfg_.allow_unsafe_workspace;
  s.child_executable = cfg_.child_executable;
  s.child_args = cfg_.child_args;
  s.approver = cfg_.approver;
  s.approval_timeout = cfg_.approval_timeout;
  s.on_log = cfg_.on_log;
  s.on_event = cfg_.on_event;
  s.on_progress = cfg_.on_progress;
  s.max_line = cfg_.max_line;
  s.handshake_timeout = cfg_.handshake_timeout;
  s.runtime = cfg_.runtime;
  c.web = web_tools_for(io_, *c.preset, c.req.domains, cfg_.search_endpoint);
  s.brokered = c.web;
  if (c.worktree && c.worktree->git) {
    // The worktree's git metadata lives in the source repository: readable, never writable.
    auto p = std::make_shared<Preset>(*c.preset);
    p->sandbox.read_paths.push_back(c.worktree->git_common_dir.string());
    s.preset = p;
  }
  s.disk = disk_watch(*c.preset, c.worktree, c.req.workspace);
  if (c.preset->workspace_mode == WorkspaceMode::write_locked) {
    // A worker edits in place: no file of it grows past its disk budget (RLIMIT_FSIZE), whatever
    // the policy's file_size_mb says.
    const std::uint64_t mb = std::max<std::uint64_t>(1, c.preset->writes.max_disk_bytes >> 20);
    if (c.preset->sandbox.rlimits.file_size_mb > mb) {
      auto p = std::make_shared<Preset>(*s.preset);
      p->sandbox.rlimits.file_size_mb = mb;
      s.preset = p;
    }
  }
  if (!c.later_protected.empty()) {
    // Later-execution paths that exist are read-only binds, like the policy's protected paths.
    auto p = std::make_shared<Preset>(*s.preset);
    for (const auto& path : c.later_protected) p->sandbox.protected_paths.push_back(path);
    s.preset = p;
  }
  return s;
}

bool Hub::try_start(Child& c) {
  if (c.preset->workspace_mode == WorkspaceMode::write_locked) {
    std::optional<WorkspaceLock> lock;
    try {
      lock = WorkspaceLock::try_acquire(c.req.workspace, cfg_.workspaces.lock_dir);
    } catch (const std::exception& e) {
      deliver(c, unstarted_envelope(c.id, *c.preset, c.req.description, protocol::Status::failed,
                                    std::string("could not lock the workspace: ") + e.what()));
      return true;
    }
    if (!lock) {
      const bool first = c.state != ChildState::waiting_for_lock;
      c.state = ChildState::waiting_for_lock;
      c.waiting_for =
          "another writer holds the workspace " + c.req.workspace.string() + " (or a directory above or below it)";
      if (first && cfg_.on_waiting) cfg_.on_waiting(c.id, c.waiting_for);
      return false;
    }
    c.lock = std::move(lock);
  }
  // The start is committed: the child holds its slot (and its lock) while its later-execution scan
  // and its worktree are prepared off the loop; launch_prepared() goes on on the loop.
  c.state = ChildState::running;
  c.waiting_for.clear();
  ++running_;
  ++started_this_turn_;
  c.starting = true;
  const bool locked = c.lock.has_value(), worktree = c.preset->workspace_mode == WorkspaceMode::worktree;
  if (!locked && !worktree) {  // nothing to prepare: start now, as pump() expects
    launch_prepared(c, {}, true);
    return true;
  }
  if (cfg_.registry && worktree)  // before it exists: a death while git makes it leaves it named
    cfg_.registry->update(c.id, {{"phase", "preparing"},
                                 {"worktree",
                                  {{"top", (cfg_.workspaces.state_dir / "worktrees" / c.id).string()},
                                   {"workspace", c.req.workspace.string()}}}});
  jobs_.run(
      io_,
      [locked, worktree, workspace = c.req.workspace, later = c.preset->writes.later_execution,
       state_dir = cfg_.workspaces.state_dir, lock_dir = cfg_.workspaces.lock_dir, id = c.id,
       disk = c.preset->writes.max_disk_bytes] {
        return prepare_start(locked, worktree, workspace, later, state_dir, lock_dir, id, disk);
      },
      [this, id = c.id](Outcome<detail::StartPrep> r) {
        auto it = children_.find(id);
        if (it == children_.end()) return;
        detail::StartPrep p;
        if (r)
          p = std::move(*r.value);
        else
          p.error = r.error;
        launch_prepared(*it->second, std::move(p), false);
      });
  return true;
}

void Hub::launch_prepared(Child& c, detail::StartPrep p, bool in_pump) {
  c.starting = false;
  c.later_execution = std::move(p.later_execution);
  c.later_before = std::move(p.later_before);
  c.later_protected = std::move(p.later_protected);
  c.worktree = std::move(p.worktree);
  auto unstart = [&](protocol::Status status, const std::string& reason) {
    --running_;
    --started_this_turn_;
    if (p.scan_failed) c.lock.reset();
    if (!c.later_execution.empty()) {  // it never ran: its spawn record has nothing to settle
      std::error_code ec;
      fs::remove_all(held_dir(cfg_.workspaces.state_dir, c.id), ec);
    }
    deliver(c, unstarted_envelope(c.id, *c.preset, c.req.description, status, reason));
    if (!in_pump) pump();  // (pump() itself goes on with its queue)
  };
  if (c.cancelled_while_starting) {
    if (c.worktree) {
      c.removal_pending = true;  // the record goes once the worktree is gone
      jobs_.run(
          io_, [wt = *c.worktree] { remove_worktree(wt); },
          [registry = cfg_.registry, id = c.id](Outcome<void>) {
            if (registry) registry->settled(id);
          });
      c.worktree.reset();
    }
    c.lock.reset();
    unstart(protocol::Status::cancelled, "cancelled before it started: " + *c.cancelled_while_starting);
    return;
  }
  if (!p.error.empty()) {
    unstart(protocol::Status::failed, p.error);
    return;
  }
  std::unique_ptr<ModelProvider> provider;
  try {
    provider = c.model.make(io_);
  } catch (const std::exception& e) {
    unstart(protocol::Status::failed, e.what());
    return;
  }
  SessionConfig s = session_config(c);
  if (cfg_.transcripts || cfg_.audit) c.records = SessionRecords::attach(s, cfg_.transcripts, cfg_.audit, cfg_.parent);
  if (cfg_.registry) cfg_.registry->update(c.id, {{"phase", "running"}});
  c.session = ChildSession::create(io_, std::move(s), std::move(provider));
  const std::string id = c.id;
  c.session->start([this, alive = std::weak_ptr<int>(alive_), id](const protocol::Envelope& e) {
    if (alive.expired()) return;
    // Deliver outside the session's own callback stack.
    boost::asio::post(io_, [this, alive, id, e]() mutable {
      if (!alive.expired()) on_child_done(id, std::move(e));
    });
  });
}

void Hub::pump() {
  bool waiting_on_lock = false;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (running_ >= cfg_.max_concurrent) break;
    auto cit = children_.find(*it);
    if (cit == children_.end()) {
      it = queue_.erase(it);
      continue;
    }
    Child& c = *cit->second;
    if (started_this_turn_ >= cfg_.max_per_turn) {
      c.waiting_for =
          "the per-turn limit (" + std::to_string(cfg_.max_per_turn) + ") is reached; waits for the next turn";
      ++it;
      continue;
    }
    if (try_start(c)) {
      it = queue_.erase(it);
    } else if (std::chrono::steady_clock::now() - c.queued_at >= std::chrono::milliseconds(c.budgets.timeout_ms)) {
      // The wall-clock budget covers the wait for the lock too.
      const std::string why = "waited " + std::to_string(c.budgets.timeout_ms) + " ms (the child's timeout) for the " +
                              "workspace lock: " + c.waiting_for;
      it = queue_.erase(it);
      deliver(c, unstarted_envelope(c.id, *c.preset, c.req.description, protocol::Status::timeout, why));
    } else {
      waiting_on_lock = true;
      ++it;
    }
  }
  for (const auto& id : queue_) {
    Child& c = *children_.at(id);
    if (c.waiting_for.empty())
      c.waiting_for = "the concurrency limit (" + std::to_string(cfg_.max_concurrent) + ") is reached";
  }
  // Locks held by other supervisor processes give no wake-up: poll for them.
  if (waiting_on_lock && !polling_) {
    polling_ = true;
    lock_poll_.expires_after(std::chrono::milliseconds(200));
    lock_poll_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;  // only ~Hub cancels it: `this` may be gone
      polling_ = false;
      pump();
    });
  }
}

void Hub::on_child_done(const std::string& id, protocol::Envelope e) {
  auto it = children_.find(id);
  if (it == children_.end()) return;
  Child& c = *it->second;
  if (c.web) {
    attach_sources(e, *c.web);
    c.web.reset();
  }
  // The later-execution scan, the patch, the worktree's removal and the final transcript write run
  // off the loop; the child keeps its slot and its lock until they are done.
  if (cfg_.registry) cfg_.registry->update(c.id, {{"phase", "finishing"}});
  FinishWork w{c.later_execution,         c.later_before, c.later_protected, c.req.workspace, c.worktree,
               cfg_.workspaces.state_dir, c.id,           c.preset->writes,  c.records};
  jobs_.run(
      io_,
      [w = std::move(w), locked = c.lock.has_value(), e = std::move(e)]() mutable {
        std::string problem = finish_off_loop(w, locked, e);
        return std::make_pair(std::move(e), std::move(problem));
      },
      [this, id](Outcome<std::pair<protocol::Envelope, std::string>> r) { on_child_finished(id, std::move(r)); });
}

void Hub::on_child_finished(const std::string& id, Outcome<std::pair<protocol::Envelope, std::string>> r) {
  auto it = children_.find(id);
  if (it == children_.end()) return;
  Child& c = *it->second;
  --running_;
  c.lock.reset();  // the next writer may go
  c.worktree.reset();
  protocol::Envelope e;
  if (r) {
    e = std::move(r.value->first);
    if (c.records) c.records->report_problem(r.value->second);
  } else {
    e = unstarted_envelope(c.id, *c.preset, c.req.description, protocol::Status::failed,
                           "could not finish the child's records: " + r.error);
  }
  deliver(c, std::move(e));
  pump();
  // Idle: no child runs, starts or waits. A long-lived serve or mcp hands back to the system what the
  // burst that just ended freed (lines of up to 1 MiB decoded on the workers leave their arenas, and
  // glibc's raised mmap threshold leaves the main heap, holding pages no one uses), so its resident
  // size follows what it holds, not the largest burst it ever saw. On a worker: a trim takes about
  // 2 ms, which a spawn arriving now would otherwise wait for. The soak (tests/soak_test.cpp)
  // measures at these points.
  if (running_ == 0 && queue_.empty()) {
#ifdef __GLIBC__
    jobs_.run(
        io_, [] { malloc_trim(0); }, [](Outcome<void>) {});
#endif
  }
}

void Hub::deliver(Child& c, protocol::Envelope e) {
  if (!c.records && cfg_.audit) {  // never started: still on the record
    cfg_.audit->record(make_event(EventKind::envelope, {{"envelope", protocol::to_json(e)}}),
                       {c.id, c.preset->name, cfg_.parent});
  }
  c.state = ChildState::done;
  c.envelope = e;
  c.session.reset();
  // Settled: its worktree and final transcript are done with (on_child_finished, or it never started).
  if (cfg_.registry && !c.removal_pending) cfg_.registry->settled(c.id);
  // A finished child keeps only what list and output show. Its records (the transcript is on disk)
  // and its full preset (the parsed policy file among it) grew a long-lived supervisor with every
  // child: the soak (scripts/soak.sh) saw +17 KB a child.
  c.records.reset();
  auto shown = std::make_shared<Preset>();
  shown->name = c.preset->name;
  shown->workspace_mode = c.preset->workspace_mode;
  c.preset = std::move(shown);
  if (cfg_.on_event)
    cfg_.on_event(make_event(EventKind::delivered, {{"child", c.id}, {"status", protocol::to_string(e.status)}}));
  auto done = std::move(c.on_done);
  c.on_done = nullptr;
  if (done) done(e);
  forget_finished(c);
  check_shutdown();
}

void Hub::forget_finished(const Child& newest) {
  // Only the newest kKeepFinished finished children are remembered for list and output.
  std::size_t finished = 0;
  auto oldest = children_.end();
  for (auto it = children_.begin(); it != children_.end(); ++it) {
    if (it->second->state != ChildState::done) continue;
    ++finished;
    if (oldest == children_.end() || it->second->queued_at < oldest->second->queued_at) oldest = it;
  }
  if (finished > kKeepFinished && oldest != children_.end() && oldest->second.get() != &newest) children_.erase(oldest);
}

bool Hub::cancel(const std::string& id, const std::string& reason) {
  auto it = children_.find(id);
  if (it == children_.end()) return false;
  Child& c = *it->second;
  if (c.state == ChildState::done) return true;
  if (c.session) {
    c.session->cancel(reason);
    return true;
  }
  if (c.starting) {  // its worktree or scan is being prepared: it ends when that is done
    if (!c.cancelled_while_starting) c.cancelled_while_starting = reason;
    return true;
  }
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  deliver(c, unstarted_envelope(id, *c.preset, c.req.description, protocol::Status::cancelled,
                                "cancelled before it started: " + reason));
  return true;
}

std::optional<ChildInfo> Hub::info(const std::string& id) const {
  auto it = children_.find(id);
  if (it == children_.end()) return std::nullopt;
  const Child& c = *it->second;
  Progress p;
  if (c.session) {
    p = c.session->progress();
  } else {
    p.id = c.id;
    p.state = c.state;
    p.max_steps = c.budgets.max_steps;
    p.max_tool_calls = c.budgets.max_tool_calls;
    p.max_tokens = c.budgets.max_tokens;
    if (c.envelope) {
      p.steps = c.envelope->steps;
      p.tool_calls = c.envelope->tool_calls;
      p.tokens = c.envelope->usage.total();
      p.elapsed_ms = c.envelope->duration_ms;
    }
  }
  return ChildInfo{c.id, c.state, c.preset->name, c.req.description, c.waiting_for, p, c.envelope};
}

std::vector<ChildInfo> Hub::list() const {
  std::vector<ChildInfo> out;
  for (const auto& [id, c] : children_) out.push_back(*info(id));
  std::sort(out.begin(), out.end(), [&](const ChildInfo& a, const ChildInfo& b) {
    return children_.at(a.id)->queued_at < children_.at(b.id)->queued_at;
  });
  return out;
}

void Hub::new_turn() {
  started_this_turn_ = 0;
  for (const auto& id : queue_) children_.at(id)->waiting_for.clear();
  pump();
}

void Hub::shutdown(const std::string& reason, std::function<void()> done) {
  shutting_down_ = true;
  shutdown_reason_ = reason;
  shutdown_done_ = std::move(done);
  std::vector<std::string> ids;
  for (const auto& [id, c] : children_)
    if (c->state != ChildState::done) ids.push_back(id);
  for (const auto& id : ids) cancel(id, reason);
  check_shutdown();
}

void Hub::drain(std::function<void()> done) {
  shutting_down_ = true;
  shutdown_done_ = std::move(done);
  check_shutdown();
}

void Hub::check_shutdown() {
  if (!shutting_down_ || !shutdown_done_ || checking_ != 0) return;
  for (const auto& [id, c] : children_)
    if (c->state != ChildState::done) return;
  auto done = std::move(shutdown_done_);
  shutdown_done_ = nullptr;
  boost::asio::post(io_, std::move(done));
}

}  // namespace supervisor
