// What a parent can do with its children, written once: spawn, list, output (and wait for an end),
// cancel, apply and approve, over one Hub. `serve`'s JSON lines (serve_server.cpp) and MCP's tools
// (mcp_server.cpp) are codecs over it, and `run` (cli/run.cpp) is a client of one spawn; each only
// turns its wire format into these calls and their answers back.
//
//   Operations ops(io, cfg, [&](const std::string& approval_id, const ApprovalRequest& r) {
//     ask_the_parent(approval_id, r);  // later: ops.approve(approval_id, yes, why)
//   });
//   ops.spawn(request, [&](const Operations::SpawnAnswer& a) { ... a.spawned->child_id or a.error ... },
//             [&](const protocol::Envelope& e) { ... });
//
// Single-threaded: every call on the io_context's thread, as the Hub. A spawn's checks (they read
// files) and `apply`'s git steps run on worker threads (offload.hpp); `apply` one at a time in the
// order asked. Both answer on the loop. A front end that must keep its parent's requests in order
// holds the ones after a spawn until that spawn is answered (serve and MCP do).
//
// Errors: spawn() answers with what Hub::spawn_async answers (ScopeError, WideningError,
// PresetError, BadRequest ...), naming the field; nothing is started then. Every other call answers
// "unknown" rather than throwing.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "scheduling/hub.hpp"
#include "offload/offload.hpp"
#include "policy/preset.hpp"
#include "workspace/patch.hpp"

namespace supervisor {

// A preset as a parent is told of it (serve's hello, MCP's tool descriptions).
struct PresetSummary {
  std::string name;
  std::string description;
  std::vector<std::string> tools;
  std::string workspace_mode;
};

// Every preset of the catalog that loaded; one that did not is left out (`policy check` names it).
std::vector<PresetSummary> preset_summaries(const PresetCatalog& presets);

class Operations {
 public:
  // An approval waiting for the parent, under an id of this layer's ("a1", "a2", ...).
  using AskParent = std::function<void(const std::string& approval_id, const ApprovalRequest&)>;
  using DoneHandler = Hub::DoneHandler;
  using WaitHandler = std::function<void(const ChildInfo&)>;

  // `ask`: empty when nobody can answer (a tool call the policy marks "ask" is then denied at once).
  // cfg.approver is replaced by this layer's.
  Operations(boost::asio::io_context& io, HubConfig cfg, AskParent ask = {});
  ~Operations();
  Operations(const Operations&) = delete;
  Operations& operator=(const Operations&) = delete;

  struct Spawned {
    std::string child_id;
    ChildState state;  // right after the spawn: done when it was refused before it started
  };
  struct SpawnAnswer {
    std::optional<Spawned> spawned;  // set when the child was accepted
    std::exception_ptr error;        // otherwise: what was wrong (nothing was started)
  };
  // Validates (on a worker), then starts or queues one child. `answer` runs once, on the loop and
  // never within this call; `on_done` runs exactly once with an accepted child's envelope (it may
  // run before `answer`: a child refused before it started). `prepare` as Hub::spawn_async's.
  void spawn(const SpawnRequest& req, std::function<void(const SpawnAnswer&)> answer, DoneHandler on_done,
             Hub::PrepareRequest prepare = {});

  std::vector<ChildInfo> list() const;
  // nullopt: no such child (never spawned here, or forgotten: kKeepFinished).
  std::optional<ChildInfo> output(const std::string& child_id) const;
  // Calls `done` once the child has ended or `wait` has passed, whichever is first (at once when it
  // has ended or `wait` is zero). Returns a ticket for stop_waiting(), or 0 when the child is unknown
  // (then `done` is never called).
  std::uint64_t wait(const std::string& child_id, std::chrono::milliseconds wait, WaitHandler done);
  // The waiter is dropped without being called; false when it was already answered.
  bool stop_waiting(std::uint64_t ticket);
  // True while the waiter `ticket` has not been answered.
  bool waiting(std::uint64_t ticket) const { return waiters_.count(ticket) != 0; }

  // false when the id is unknown. A queued child ends at once with a cancelled envelope.
  bool cancel(const std::string& child_id, const std::string& reason);
  // Applies what a finished child left (its patch, or its held later-execution files), off the loop,
  // one apply at a time; `done` runs on the loop with the result (an unknown id is a result too), at
  // once (refused) when the layer has ended.
  void apply(const std::string& child_id, bool allow_flagged, std::function<void(ApplyResult)> done);
  // Answers an approval this layer asked the parent for; false when the id is unknown (answered,
  // never asked, timed out, or its child has ended).
  bool approve(const std::string& approval_id, bool allow, const std::string& reason);
  // True while `approval_id` waits for an answer.
  bool asking(const std::string& approval_id) const { return pending_approvals_.count(approval_id) != 0; }

  // True when no child is queued, waiting or running.
  bool idle() const;
  // The parent started a new turn: the per-turn count starts again.
  void new_turn();
  // Every child cancelled and every pending approval denied with `why`; `done` once every envelope
  // is delivered and every apply already asked for has been answered.
  void shutdown(const std::string& why, std::function<void()> done);
  // No new children; those there are finish on their own, and every approval pending or asked from
  // now on is denied with `denied_why` (the parent can no longer answer). `done` as in shutdown.
  void drain(const std::string& denied_why, std::function<void()> done);

  const HubConfig& config() const noexcept { return hub_->config(); }
  // The presets spawns are checked against, as read when this layer was made.
  std::vector<PresetSummary> presets() const { return preset_summaries(hub_->presets()); }

 private:
  struct Waiter {
    std::string child_id;
    WaitHandler done;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  struct PendingApproval {
    std::string child_id;
    ApprovalReply reply;
    // Forgets it when the session's own approval timeout has denied it (HubConfig::approval_timeout).
    std::unique_ptr<boost::asio::steady_timer> expiry;
  };
  struct PendingApply {
    std::string child_id;
    bool allow_flagged;
    std::function<void(ApplyResult)> done;
  };
  void ask(const ApprovalRequest& r, ApprovalReply reply);
  void child_ended(const std::string& child_id);
  void next_apply();
  void hub_finished();
  void finish_if_ended();

  boost::asio::io_context& io_;
  AskParent ask_parent_;
  std::unique_ptr<Hub> hub_;
  std::map<std::string, PendingApproval> pending_approvals_;
  std::uint64_t next_approval_ = 0;
  std::string denied_why_;  // set by drain(): approvals asked from then on are denied with it
  std::map<std::uint64_t, Waiter> waiters_;
  std::uint64_t next_waiter_ = 0;
  std::deque<PendingApply> applies_;
  bool applying_ = false;
  std::function<void()> ended_;  // shutdown's or drain's `done`, once the hub and the applies are done
  bool hub_ended_ = false;
  bool ended_called_ = false;  // an apply asked for after that is refused at once
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  OffloadGroup jobs_;  // last: destroyed first, so no apply result arrives at a half-destroyed layer
};

}  // namespace supervisor
