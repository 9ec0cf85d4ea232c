// ChildSession's broker (session.hpp): the handshake, every model call with its budget reservation,
// and every tool request with its decision, approval and result.
#include "session/session.hpp"

#include <algorithm>

#include "policy/decide.hpp"
#include "protocol/tools.hpp"

namespace supervisor {

namespace asio = boost::asio;
namespace proto = protocol;
using nlohmann::json;

namespace {

// What the child's own framing may add to a capped tool result ("Tool error: ", "Tool call denied by
// the supervisor: <reason>") before the supervisor cuts it.
constexpr std::size_t kToolResultSlack = 512;

// Cuts every tool message in `messages` longer than the cap (plus the slack) down to the cap, with
// a note saying so: tool_result_bytes holds on what reaches the model, whatever the child claims.
std::size_t cap_tool_results(json& messages, std::uint64_t cap) {
  if (cap == 0) return 0;
  std::size_t cut = 0;
  for (auto& msg : messages) {
    if (!msg.is_object() || msg.value("role", "") != "tool") continue;
    auto c = msg.find("content");
    if (c == msg.end() || !c->is_string()) continue;
    const std::size_t n = c->get_ref<const std::string&>().size();
    if (n <= cap + kToolResultSlack) continue;
    std::string text = proto::cap_utf8(c->get_ref<const std::string&>(), cap).text;
    text += "\n[cut by the supervisor: this tool result was " + std::to_string(n) + " bytes; tool_result_bytes is " +
            std::to_string(cap) + "]";
    *c = std::move(text);
    ++cut;
  }
  return cut;
}

std::string shown_id(const std::string& id) { return proto::cap_utf8(id, 64).text; }

}  // namespace

json ChildSession::tool_specs_for_child() const {
  // The catalogue's specs (protocol/tools.json), for exactly the tools the policy offers: local
  // and brokered alike (a policy naming a tool outside the catalogue was refused at load).
  return protocol::tool_specs(offered_tools(*cfg_.preset));
}

void ChildSession::handle(const proto::Hello& m) {
  if (state_ != State::handshake) {
    fail(proto::Status::protocol_error, "protocol error: a second hello");
    return;
  }
  handshake_.cancel();
  auto version = proto::negotiate_version(m.versions);
  if (!version) {
    std::string offered;
    for (int v : m.versions) offered += (offered.empty() ? "" : ", ") + std::to_string(v);
    send(proto::Error{"unsupported_version", "this supervisor speaks protocol " + std::to_string(proto::kMinVersion) +
                                                 ".." + std::to_string(proto::kVersion) + "; the child offered [" +
                                                 offered + "]"});
    fail(proto::Status::protocol_error, "protocol error: no common protocol version (child offered [" + offered + "])");
    return;
  }
  emit(make_event(EventKind::hello, {{"agent", m.agent}, {"version", *version}}));
  proto::Welcome w;
  w.version = *version;
  w.child_id = cfg_.id;
  w.task.brief = cfg_.brief;
  w.task.description = cfg_.description;
  w.task.preset = cfg_.preset->name;
  w.task.workspace = cfg_.workspace.string();
  w.task.tools = tool_specs_for_child();
  w.task.limits = child_limits(cfg_.budgets);
  state_ = State::running;
  send(w);
  report_progress();
}

namespace {
bool cut_turn(const std::string& finish_reason) { return finish_reason == "length" || finish_reason == "budget"; }
}  // namespace

void ChildSession::handle(const proto::ModelRequest& m) {
  if (state_ == State::finishing || state_ == State::done) return;
  if (!used_ids_.insert(std::hash<std::string>{}(m.id)).second) {
    fail(proto::Status::protocol_error, "protocol error: model_request id '" + shown_id(m.id) +
                                            "' was already used in this session (request ids must be unique)");
    return;
  }
  if (model_in_flight_) {
    fail(proto::Status::protocol_error,
         "protocol error: model_request '" + m.id + "' while '" + *model_in_flight_ + "' is still in flight");
    return;
  }
  if (final_) {
    fail(proto::Status::protocol_error, "protocol error: model_request after final");
    return;
  }
  if (ending_.is(proto::Status::cancelled)) {
    // Cancelled, its kill not landed yet: a request already in the pipe starts no new (billed) turn.
    send(proto::ModelError{m.id, "wrap_up", ending_.reason() + "; no more model turns"});
    return;
  }
  // Only tools the policy offers reach the model, whatever the child put in the request.
  json tools = json::array();
  {
    const auto offered = offered_tools(*cfg_.preset);
    for (const auto& spec : m.tools) {
      std::string name = spec.is_object() ? spec.value("name", "") : "";
      if (std::find(offered.begin(), offered.end(), name) != offered.end()) tools.push_back(spec);
    }
  }
  // The reservation is made on what the model will be sent: tool results capped, only offered tools.
  ModelCall call;
  call.child_id = cfg_.id;
  call.messages = m.messages;
  const std::size_t cut = cap_tool_results(call.messages, cfg_.budgets.tool_result_bytes);
  InputEstimator::Request shape = InputEstimator::shape(call.messages, tools);
  std::uint64_t est_input = estimator_.reserve(shape);
  if (state_ == State::running)
    if (auto used_up = meter_.before_model_call(est_input))
      begin_wrap_up(proto::Status::budget_exhausted, used_up->budget, used_up->why);
  const bool wrap_turn = state_ == State::wrapping_up;
  if (wrap_turn) {
    tools = json::array();
    shape = InputEstimator::shape(call.messages, tools);
    est_input = estimator_.reserve(shape);
  }
  if (wrap_turn && (wrap_turn_used_ || meter_.reservation_refusal(est_input, kMinOutputTokens))) {
    // No model turn left to give: the child reports with what it has. Without a wrap-up turn the
    // model never wrote its report, so the envelope marks the answer partial.
    if (!wrap_turn_used_) no_wrap_turn_ = true;
    send(proto::ModelError{m.id, "budget_exhausted",
                           wrap_turn_used_
                               ? "the wrap-up turn was already used; send your final answer"
                               : ending_.reason() + "; no budget is left for a wrap-up turn (it could need " +
                                     std::to_string(est_input) + " input + " + std::to_string(kMinOutputTokens) +
                                     " output tokens); send your final answer with what you have"});
    return;
  }
  call.tools = std::move(tools);
  if (cut)
    emit(make_event(EventKind::tool_results_cut,
                    {{"id", m.id}, {"count", cut}, {"tool_result_bytes", cfg_.budgets.tool_result_bytes}}));
  call.max_thinking_tokens = meter_.thinking_left();
  call.wrap_up = wrap_turn;
  call.deadline = started_ + std::chrono::milliseconds(cfg_.budgets.timeout_ms + cfg_.budgets.wrap_up_grace_ms);
  call.max_tokens = meter_.output_room(est_input, &pending_cap_budget_);
  if (wrap_turn) {
    wrap_turn_used_ = true;
    call.max_tokens = std::min(call.max_tokens, kWrapUpTurnTokens);
  }
  if (m.max_tokens) call.max_tokens = std::min(call.max_tokens, *m.max_tokens);
  call.max_tokens = std::max<std::uint64_t>(call.max_tokens, 1);
  meter_.count_step();
  model_in_flight_ = m.id;
  pending_shape_ = std::move(shape);
  pending_estimate_ = est_input;
  pending_max_tokens_ = call.max_tokens;
  // The transcript gets each message the model is sent once, in order, as sent (tool results
  // already capped): the child resends its whole history every turn, so only what is new is
  // recorded, from the first message that differs from what was recorded before.
  std::size_t from = 0;
  json new_messages = json::array();
  {
    std::vector<std::size_t> hashes;
    hashes.reserve(call.messages.size());
    for (const auto& msg : call.messages) hashes.push_back(std::hash<std::string>{}(msg.dump()));
    while (from < recorded_messages_.size() && from < hashes.size() && recorded_messages_[from] == hashes[from]) ++from;
    for (std::size_t i = from; i < call.messages.size(); ++i) new_messages.push_back(call.messages[i]);
    recorded_messages_ = std::move(hashes);
  }
  json tool_names = json::array();
  for (const auto& spec : call.tools) tool_names.push_back(spec.value("name", ""));
  emit(make_event(EventKind::model_request, {{"id", m.id},
                                             {"step", meter_.steps()},
                                             {"messages", m.messages.size()},
                                             {"messages_from", from},
                                             {"new_messages", std::move(new_messages)},
                                             {"tools", call.tools.size()},
                                             {"tool_names", std::move(tool_names)},
                                             {"max_tokens", call.max_tokens},
                                             {"estimated_input_tokens", est_input},
                                             {"thinking_tokens_left", call.max_thinking_tokens},
                                             {"wrap_up_turn", wrap_turn}}));
  read_tokens_ += model_request_charge_;  // a model call paces this request (session.hpp, read_rate)
  model_request_charge_ = 0;
  provider_->start(std::move(call),
                   [self = shared_from_this(), id = m.id](ModelReply r) { self->on_model_reply(id, std::move(r)); });
}

void ChildSession::on_model_reply(const std::string& request_id, ModelReply r) {
  model_in_flight_.reset();
  if (state_ == State::finishing || state_ == State::done) return;
  const double call_cost = meter_.charge(r.usage);
  if (r.usage.input_tokens > 0 && !r.usage_estimated)
    estimator_.observe(std::move(pending_shape_), r.usage.input_tokens, r.usage.reasoning_tokens);
  else if (r.usage.input_tokens > 0)
    estimator_.observe(std::move(pending_shape_), std::max(r.usage.input_tokens, pending_estimate_),
                       r.usage.reasoning_tokens);
  const bool cut = r.ok && cut_turn(r.finish_reason);
  json event =
      make_event(EventKind::model_response,
                 {{"id", request_id},
                  {"ok", r.ok},
                  {"error", r.error_code.empty() ? json(nullptr) : json(r.error_code + ": " + r.error_message)},
                  {"usage", proto::to_json(r.usage)},
                  {"usage_estimated", r.usage_estimated},
                  {"estimated_input_tokens", pending_estimate_},
                  {"request", r.request},
                  {"content_bytes", r.content.size()},
                  {"content", r.content},
                  {"tool_calls",
                   [&] {
                     json calls = json::array();
                     for (const auto& c : r.tool_calls)
                       calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
                     return calls;
                   }()},
                  {"finish_reason", r.finish_reason}});
  if (meter_.price()) event["cost_usd"] = call_cost;
  if (cut) event["cut"] = true;
  emit(std::move(event));
  if (r.ok)
    model_failed_.clear();
  else if (r.error_code != "budget_exhausted")
    model_failed_ = (r.error_code.empty() ? std::string("provider_error") : r.error_code) + ": " + r.error_message;
  if (r.ok) {
    last_cut_ = cut;
    if (cut) cut_text_ = r.content;
  }
  if (cut) {
    // A turn the token cap ended is not an answer: its tool calls are dropped (their arguments may be
    // cut too), and the child is asked to wrap up, with a wrap-up turn if the budget still has one.
    r.tool_calls.clear();
    // The cost budget is named when it set the call's cap and the turn reached it; otherwise the
    // token cap (the budget's or the provider's) ended it.
    const bool by_cost = pending_cap_budget_ == Budget::cost && r.usage.output_tokens >= pending_max_tokens_;
    begin_wrap_up(proto::Status::budget_exhausted, by_cost ? Budget::cost : Budget::tokens,
                  std::string("the model's turn was cut by the token cap (") +
                      (r.finish_reason == "budget" ? "the supervisor stopped the stream at the call's output cap of "
                                                   : "the server's finish_reason is length; output cap ") +
                      std::to_string(r.usage.output_tokens) + " tokens used)");
  }
  if (!r.ok) {
    send(proto::ModelError{request_id, r.error_code.empty() ? "provider_error" : r.error_code, r.error_message});
  } else {
    proto::ModelResponse resp;
    resp.id = request_id;
    resp.content = std::move(r.content);
    resp.tool_calls = std::move(r.tool_calls);
    resp.usage = r.usage;
    resp.finish_reason = std::move(r.finish_reason);
    send(resp);
  }
  report_progress();
}

void ChildSession::handle(proto::ToolRequest& m) {
  if (state_ == State::finishing || state_ == State::done) return;
  if (tools_denied_ >= kMaxToolDenials) {
    fail(proto::Status::protocol_error, "protocol error: tool_request '" + shown_id(m.id) + "' after " +
                                            std::to_string(tools_denied_) + " denied tool requests (at most " +
                                            std::to_string(kMaxToolDenials) +
                                            " are answered in a session; a child that keeps asking is ended)");
    return;
  }
  if (!used_ids_.insert(std::hash<std::string>{}(m.id)).second) {
    fail(proto::Status::protocol_error,
         "protocol error: tool_request id '" + shown_id(m.id) + "' reused (request ids must be unique in a session)");
    return;
  }
  if (state_ == State::running)
    if (auto used_up = meter_.before_tool_call())
      begin_wrap_up(proto::Status::budget_exhausted, used_up->budget, used_up->why);
  if (state_ == State::wrapping_up || ending_.is(proto::Status::cancelled)) {
    // Wrapping up, or cancelled with its kill not landed yet: nothing more runs for it.
    emit(make_event(EventKind::tool_decision,
                    {{"id", m.id}, {"tool", m.tool}, {"decision", "deny"}, {"reason", "wrap-up"}}));
    const std::string told = "the supervisor asked you to wrap up (" + ending_.reason() + "); no more tools";
    deny_tool(m, "wrap-up", told, told);
    return;
  }
  decide_tool(m);
}

void ChildSession::deny_tool(const proto::ToolRequest& req, const std::string& rule, const std::string& reason,
                             const std::string& told) {
  ++tools_denied_;
  proto::Denial d = proto::capped_denial(proto::Denial{req.tool, rule, reason});
  emit(make_event(EventKind::denial, {{"id", req.id}, {"tool", d.tool}, {"rule", d.rule}, {"reason", d.reason}}));
  denials_.add(std::move(d));
  send(proto::ToolDecision{req.id, false, told});
}

void ChildSession::record_decision(proto::ToolRequest& m, const char* decision, const std::string& rule,
                                   const std::string& reason, bool take_args) {
  if (!cfg_.on_event) return;
  // Field by field rather than from an initializer list: one per tool call, and the list's
  // intermediate [key, value] arrays cost more than the event itself.
  json ev = make_event(EventKind::tool_decision);
  ev["id"] = m.id;
  ev["tool"] = m.tool;
  Scrubbed args = Scrubbed::no;
  if (args_scrubbed_) {  // the intake scrubbed them off the loop (a large request)
    ev["args"] = std::move(*args_scrubbed_);
    args_scrubbed_.reset();
    args = Scrubbed::yes;
  } else if (take_args) {
    ev["args"] = std::move(m.args);
  } else {
    ev["args"] = m.args;
  }
  ev["decision"] = decision;
  ev["rule"] = rule;
  ev["reason"] = reason;
  emit(std::move(ev), args);
}

void ChildSession::decide_tool(proto::ToolRequest& m) {
  std::string why, rule;
  const Decision d = decide(*cfg_.preset, m.tool, m.args, why, &rule);
  if (d == Decision::allow) {
    const bool brokered = cfg_.brokered && cfg_.brokered->handles(m.tool);  // runs here, on m.args
    record_decision(m, "allow", rule, why, /*take_args=*/!brokered);
    allow_tool(m, why);
    return;
  }
  if (d == Decision::deny) {
    record_decision(m, "deny", rule, why, /*take_args=*/true);
    deny_tool(m, rule, why, why);
    return;
  }
  if (!cfg_.approver) return deny_ask(m, rule, "ask: no approver", why, "no approver is attached");
  if (approvals_.size() >= kMaxWaitingApprovals)
    return deny_ask(
        m, rule, "ask: too many waiting", why,
        std::to_string(approvals_.size()) + " of this child's approvals are already waiting for the parent");
  record_decision(m, "ask", rule, why, /*take_args=*/false);  // the approver is shown them
  ask_approval(m, why);
}

void ChildSession::deny_ask(proto::ToolRequest& m, const std::string& rule, const char* refused_as,
                            const std::string& why, const std::string& because) {
  const std::string reason = why + ", and " + because + ", so it is denied";
  record_decision(m, "deny", rule, reason, /*take_args=*/true);
  deny_tool(m, refused_as, why, reason);
}

void ChildSession::allow_tool(const proto::ToolRequest& req, const std::string& reason) {
  meter_.count_tool_call();
  ++tools_used_[req.tool];
  pending_tools_[req.id] = req.tool;
  if (cfg_.brokered && cfg_.brokered->handles(req.tool)) {
    cfg_.brokered->run(cfg_.id, req.tool, req.args,
                       [self = shared_from_this(), id = req.id](bool ok, std::string content) {
                         self->on_brokered_result(id, ok, std::move(content));
                       });
  } else {
    send(proto::ToolDecision{req.id, true, reason});
  }
  report_progress();
}

void ChildSession::on_brokered_result(const std::string& id, bool ok, std::string content) {
  if (state_ == State::finishing || state_ == State::done) return;
  pending_tools_.erase(id);
  const std::uint64_t cap = cfg_.budgets.tool_result_bytes;
  if (cap > 0 && content.size() > cap) {  // the same cap as a local tool's result
    const std::size_t n = content.size();
    content = proto::cap_utf8(content, cap).text + "\n[cut by the supervisor: " + std::to_string(n) +
              " bytes; tool_result_bytes is " + std::to_string(cap) + "]";
  }
  emit(make_event(EventKind::tool_result, {{"id", id}, {"ok", ok}, {"bytes", content.size()}, {"content", content}}));
  send(proto::ToolResult{id, ok, std::move(content)});
}

void ChildSession::ask_approval(const proto::ToolRequest& m, const std::string& why) {
  auto& pending = approvals_[m.id];
  pending = std::make_unique<PendingApproval>(PendingApproval{m, why, asio::steady_timer(io_, cfg_.approval_timeout)});
  pending->timer.async_wait([self = shared_from_this(), id = m.id](boost::system::error_code ec) {
    if (!ec) self->on_approval_timeout(id);
  });
  // The parent is asked once the transcript on disk holds the question (docs/transcripts.md).
  after_recorded([self = shared_from_this(), id = m.id] {
    auto it = self->approvals_.find(id);
    if (it == self->approvals_.end()) return;  // timed out, or the session ended meanwhile
    if (self->state_ == State::finishing || self->state_ == State::done) return;
    if (self->ending_.is(proto::Status::cancelled)) return;  // its kill is on the way: nobody asks
    if (self->state_ == State::wrapping_up) {                // an answer could only be denied now
      self->on_approval(id, false, "the child is wrapping up", "wrap-up");
      return;
    }
    const PendingApproval& p = *it->second;
    self->cfg_.approver(ApprovalRequest{self->cfg_.id, self->cfg_.preset->name, self->cfg_.description, p.request.tool,
                                        p.request.args, p.why},
                        [self, id](bool allow, std::string reason) {
                          self->on_approval(id, allow, std::move(reason), "ask: declined by parent");
                        });
  });
}

void ChildSession::after_recorded(std::function<void()> next) {
  if (!cfg_.wait_recorded) return next();
  after_recorded_.push_back({cfg_.wait_recorded(), std::move(next)});
  if (!recorded_wait_) wait_recorded();
}

void ChildSession::wait_recorded() {
  recorded_wait_ = true;
  records_wait_.run(
      io_, [wait = after_recorded_.front().wait] { wait(); },
      [self = shared_from_this()](Outcome<void>) {
        auto next = std::move(self->after_recorded_.front().next);
        self->after_recorded_.pop_front();
        self->recorded_wait_ = false;
        next();  // may ask for another wait, which then starts (in order)
        if (!self->after_recorded_.empty() && !self->recorded_wait_) self->wait_recorded();
      });
}

void ChildSession::on_approval_timeout(const std::string& id) {
  on_approval(id, false, "no answer within " + std::to_string(cfg_.approval_timeout.count()) + " ms",
              "ask: approval timed out");
}

void ChildSession::on_approval(const std::string& id, bool allow, std::string reason, const char* denied_rule) {
  auto it = approvals_.find(id);
  if (it == approvals_.end()) return;  // answered already, or timed out
  std::unique_ptr<PendingApproval> pending = std::move(it->second);
  approvals_.erase(it);
  pending->timer.cancel();
  if (state_ == State::finishing || state_ == State::done) return;
  emit(
      make_event(EventKind::approval,
                 {{"id", pending->request.id}, {"tool", pending->request.tool}, {"allow", allow}, {"reason", reason}}));
  // The answer is acted on once the transcript on disk holds it.
  after_recorded([self = shared_from_this(), m = std::move(pending->request), why = std::move(pending->why), allow,
                  reason = std::move(reason), denied_rule] {
    if (self->state_ == State::finishing || self->state_ == State::done) return;
    if (self->ending_.is(proto::Status::cancelled)) return;  // its kill is on the way: nothing runs
    if (self->state_ == State::wrapping_up) {
      self->deny_tool(m, "wrap-up", why + "; the child is wrapping up", "approval denied: the child is wrapping up");
      return;
    }
    if (allow)
      self->allow_tool(m, "approved: " + reason);
    else
      self->deny_tool(m, denied_rule, why + "; " + reason, "approval denied: " + reason);
  });
}

void ChildSession::handle(const proto::ToolDone& m) {
  auto it = pending_tools_.find(m.id);
  if (it == pending_tools_.end()) {
    fail(proto::Status::protocol_error, "protocol error: tool_done for '" + m.id + "', which was not allowed");
    return;
  }
  const std::uint64_t cap = cfg_.budgets.tool_result_bytes;
  if (cap > 0 && m.bytes > cap + kToolResultSlack) {
    fail(proto::Status::protocol_error, "protocol error: tool_done '" + shown_id(m.id) + "' says bytes " +
                                            std::to_string(m.bytes) + ", more than tool_result_bytes " +
                                            std::to_string(cap) + " allows");
    return;
  }
  if (cfg_.on_event) {  // one per tool call: built field by field, as in record_decision
    json ev = make_event(EventKind::tool_done);
    ev["id"] = m.id;
    ev["tool"] = std::move(it->second);
    ev["ok"] = m.ok;
    ev["bytes"] = m.bytes;
    ev["error"] = m.error;
    emit(std::move(ev));
  }
  pending_tools_.erase(it);
  check_disk();  // what the tool wrote may have used up the disk budget
}

}  // namespace supervisor
