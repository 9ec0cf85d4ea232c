// The operations every front end offers a parent (operations.hpp), over one Hub.
#include "frontends/operations.hpp"

#include "workspace/apply_work.hpp"
#include "policy/decide.hpp"

namespace supervisor {
namespace fs = std::filesystem;

std::vector<PresetSummary> preset_summaries(const PresetCatalog& presets) {
  // A preset that did not load is not offered: a spawn naming it gets its error, and `policy check`
  // names it.
  std::vector<PresetSummary> out;
  for (const Preset* p : presets.loaded())
    out.push_back({p->name, p->description, offered_tools(*p), to_string(p->workspace_mode)});
  return out;
}

Operations::Operations(boost::asio::io_context& io, HubConfig cfg, AskParent ask)
    : io_(io), ask_parent_(std::move(ask)) {
  cfg.approver = nullptr;
  if (ask_parent_)
    cfg.approver = [this](const ApprovalRequest& r, ApprovalReply reply) { this->ask(r, std::move(reply)); };
  hub_ = std::make_unique<Hub>(io, std::move(cfg));
}

Operations::~Operations() {
  // Whatever the hub still delivers while it goes finds no operations layer.
  alive_.reset();
  hub_.reset();
}

void Operations::spawn(const SpawnRequest& req, std::function<void(const SpawnAnswer&)> answer, DoneHandler on_done,
                       Hub::PrepareRequest prepare) {
  std::weak_ptr<int> alive = alive_;
  hub_->spawn_async(
      req,
      [this, alive, answer = std::move(answer)](const std::string& id, std::exception_ptr error) {
        if (alive.expired()) return;
        SpawnAnswer a;
        a.error = error;
        if (!error) {
          auto info = hub_->info(id);
          a.spawned = Spawned{id, info ? info->state : ChildState::done};
        }
        answer(a);
      },
      [this, alive, on_done = std::move(on_done)](const protocol::Envelope& e) {
        if (alive.expired()) return;
        // The parent's own answer first (the sync result), then whoever waits for the same end.
        on_done(e);
        child_ended(e.id);
      },
      std::move(prepare));
}

std::vector<ChildInfo> Operations::list() const { return hub_->list(); }

std::optional<ChildInfo> Operations::output(const std::string& child_id) const { return hub_->info(child_id); }

std::uint64_t Operations::wait(const std::string& child_id, std::chrono::milliseconds wait, WaitHandler done) {
  auto info = hub_->info(child_id);
  if (!info) return 0;
  const std::uint64_t ticket = ++next_waiter_;
  if (info->state == ChildState::done || wait.count() <= 0) {
    done(*info);
    return ticket;
  }
  Waiter& w = waiters_[ticket];
  w.child_id = child_id;
  w.done = std::move(done);
  w.timer = std::make_unique<boost::asio::steady_timer>(io_, wait);
  std::weak_ptr<int> alive = alive_;
  w.timer->async_wait([this, alive, ticket](boost::system::error_code ec) {
    if (ec || alive.expired()) return;  // woken by the child's end, or dropped
    auto it = waiters_.find(ticket);
    if (it == waiters_.end()) return;
    Waiter fired = std::move(it->second);
    waiters_.erase(it);
    if (auto now = hub_->info(fired.child_id)) fired.done(*now);
  });
  return ticket;
}

bool Operations::stop_waiting(std::uint64_t ticket) {
  auto it = waiters_.find(ticket);
  if (it == waiters_.end()) return false;
  it->second.timer->cancel();
  waiters_.erase(it);
  return true;
}

void Operations::child_ended(const std::string& child_id) {
  // Approvals of a child that has ended can no longer be answered: forgotten, so that a late answer
  // is told the approval is unknown.
  for (auto it = pending_approvals_.begin(); it != pending_approvals_.end();)
    it = it->second.child_id == child_id ? pending_approvals_.erase(it) : std::next(it);
  std::vector<Waiter> woken;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.child_id != child_id) {
      ++it;
      continue;
    }
    it->second.timer->cancel();
    woken.push_back(std::move(it->second));
    it = waiters_.erase(it);
  }
  if (woken.empty()) return;
  auto info = hub_->info(child_id);
  if (!info) return;
  for (auto& w : woken) w.done(*info);
}

bool Operations::cancel(const std::string& child_id, const std::string& reason) {
  return hub_->cancel(child_id, reason);
}

void Operations::apply(const std::string& child_id, bool allow_flagged, std::function<void(ApplyResult)> done) {
  if (ended_called_) return done(ApplyResult{false, "refused: the supervisor is ending; nothing was changed", {}});
  applies_.push_back({child_id, allow_flagged, std::move(done)});
  next_apply();
}

void Operations::next_apply() {
  // One at a time: two applies to one workspace must not interleave their git steps.
  if (applying_ || applies_.empty()) return;
  applying_ = true;
  const WorkspaceConfig dirs = hub_->config().workspaces;
  const PendingApply& next = applies_.front();
  jobs_.run(
      io_,
      [dirs, id = next.child_id, flagged = next.allow_flagged] {
        return apply_child_work(dirs.state_dir, dirs.lock_dir, id, flagged);
      },
      [this](Outcome<ApplyResult> r) {
        PendingApply a = std::move(applies_.front());
        applies_.pop_front();
        applying_ = false;
        ApplyResult out;
        if (r) {
          out = std::move(*r.value);
        } else {
          out.ok = false;
          out.message = "could not apply the work of child " + a.child_id + ": " + r.error;
        }
        a.done(std::move(out));
        next_apply();
        if (applies_.empty()) finish_if_ended();
      });
}

void Operations::hub_finished() {
  hub_ended_ = true;
  finish_if_ended();
}

void Operations::finish_if_ended() {
  // An apply the parent asked for before it left is answered before the front end ends.
  if (!hub_ended_ || !applies_.empty() || !ended_) return;
  auto done = std::move(ended_);
  ended_ = nullptr;
  ended_called_ = true;
  done();
}

void Operations::ask(const ApprovalRequest& r, ApprovalReply reply) {
  if (!denied_why_.empty()) return reply(false, denied_why_);
  std::string id = "a" + std::to_string(++next_approval_);
  auto expiry = std::make_unique<boost::asio::steady_timer>(io_, hub_->config().approval_timeout);
  std::weak_ptr<int> alive = alive_;
  expiry->async_wait([this, alive, id](boost::system::error_code ec) {
    if (!ec && !alive.expired()) pending_approvals_.erase(id);  // the session denied it at the same timeout
  });
  pending_approvals_[id] = {r.child_id, std::move(reply), std::move(expiry)};
  ask_parent_(id, r);
}

bool Operations::approve(const std::string& approval_id, bool allow, const std::string& reason) {
  auto it = pending_approvals_.find(approval_id);
  if (it == pending_approvals_.end()) return false;
  ApprovalReply reply = std::move(it->second.reply);
  pending_approvals_.erase(it);
  reply(allow, reason);
  return true;
}

bool Operations::idle() const {
  for (const auto& c : hub_->list())
    if (c.state != ChildState::done) return false;
  return true;
}

void Operations::new_turn() { hub_->new_turn(); }

void Operations::shutdown(const std::string& why, std::function<void()> done) {
  auto pending = std::move(pending_approvals_);
  pending_approvals_.clear();
  for (auto& [id, p] : pending) p.reply(false, why);
  ended_ = std::move(done);
  hub_->shutdown(why, [this] { hub_finished(); });
}

void Operations::drain(const std::string& denied_why, std::function<void()> done) {
  denied_why_ = denied_why;
  // Nobody can answer the approvals already asked either.
  auto pending = std::move(pending_approvals_);
  pending_approvals_.clear();
  for (auto& [id, p] : pending) p.reply(false, denied_why);
  ended_ = std::move(done);
  hub_->drain([this] { hub_finished(); });
}

}  // namespace supervisor
