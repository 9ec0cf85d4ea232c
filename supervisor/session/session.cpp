// ChildSession's lifecycle (session.hpp): create, start (through its runtime), cancel, wrap-up,
// failure, kill, and the one envelope. The I/O is in session_io.cpp, the model calls
// and tool decisions in session_broker.cpp.
#include "session/session.hpp"

#include <sys/random.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <cstring>

#include "protocol/tools.hpp"
#include "runtime/local_runtime.hpp"

namespace supervisor {

namespace asio = boost::asio;
namespace proto = protocol;
using nlohmann::json;

namespace {

void ignore_sigpipe_once() {
  static const bool done = [] {
    ::signal(SIGPIPE, SIG_IGN);  // a dead child's pipe must give EPIPE, not kill the supervisor
    return true;
  }();
  (void)done;
}

}  // namespace

std::shared_ptr<ChildSession> ChildSession::create(asio::io_context& io, SessionConfig cfg,
                                                   std::unique_ptr<ModelProvider> provider) {
  return std::shared_ptr<ChildSession>(new ChildSession(io, std::move(cfg), std::move(provider)));
}

ChildSession::ChildSession(asio::io_context& io, SessionConfig cfg, std::unique_ptr<ModelProvider> provider)
    : io_(io),
      cfg_(std::move(cfg)),
      provider_(std::move(provider)),
      runtime_(cfg_.runtime ? cfg_.runtime : local_runtime()),
      to_child_(io),
      from_child_(io),
      child_err_(io),
      reader_(cfg_.max_line),
      read_tokens_(static_cast<double>(cfg_.read_burst)),
      read_filled_(std::chrono::steady_clock::now()),
      rate_timer_(io),
      deadline_(io),
      grace_(io),
      handshake_(io),
      stdout_closed_timer_(io),
      after_final_timer_(io),
      drain_timer_(io),
      disk_timer_(io) {}

// The child, if it still runs, is killed and reaped by its RunningChild (invariant 6: no child
// outlives its session); a start still in flight is abandoned by its PendingStart.
ChildSession::~ChildSession() = default;

std::uint64_t ChildSession::elapsed_ms() const {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count());
}

const char* to_string(ChildState s) noexcept {
  switch (s) {
    case ChildState::queued:
      return "queued";
    case ChildState::waiting_for_lock:
      return "waiting_for_lock";
    case ChildState::starting:
      return "starting";
    case ChildState::running:
      return "running";
    case ChildState::wrapping_up:
      return "wrapping_up";
    case ChildState::finishing:
      return "finishing";
    case ChildState::done:
      return "done";
  }
  return "done";
}

Progress ChildSession::progress() const {
  static constexpr ChildState shown[] = {ChildState::starting,    ChildState::starting,  ChildState::running,
                                         ChildState::wrapping_up, ChildState::finishing, ChildState::done};
  Progress p;
  p.id = cfg_.id;
  p.state = shown[static_cast<int>(state_)];
  if (state_ == State::starting && runtime_state_ == RuntimeState::queued) p.state = ChildState::queued;
  p.steps = meter_.steps();
  p.max_steps = cfg_.budgets.max_steps;
  p.tool_calls = meter_.tool_calls();
  p.max_tool_calls = cfg_.budgets.max_tool_calls;
  p.tokens = meter_.usage().total();
  p.max_tokens = cfg_.budgets.max_tokens;
  p.elapsed_ms = state_ == State::starting ? 0 : elapsed_ms();
  return p;
}

void ChildSession::emit(json event, Scrubbed args) {
  if (!cfg_.on_event) return;
  event["child"] = cfg_.id;
  event["elapsed_ms"] = elapsed_ms();
  if (args == Scrubbed::yes && cfg_.on_event_args_scrubbed) return cfg_.on_event_args_scrubbed(std::move(event));
  cfg_.on_event(std::move(event));
}

void ChildSession::report_progress() {
  if (cfg_.on_progress) cfg_.on_progress(progress());
}

void ChildSession::start(DoneHandler on_done) {
  ignore_sigpipe_once();
  on_done_ = std::move(on_done);
  started_ = std::chrono::steady_clock::now();
  meter_ = BudgetMeter(cfg_.budgets, provider_->price());
  emit(make_event(EventKind::spawn, {{"preset", cfg_.preset->name},
                                     {"policy_digest", cfg_.preset->digest},
                                     {"description", cfg_.description},
                                     {"workspace", cfg_.workspace.string()},
                                     {"model", provider_->describe()},
                                     {"runtime", std::string(runtime_->name())}}));
  if (cfg_.budgets.max_cost_usd && !meter_.price()) {
    // A cost budget nobody can count is refused, never silently ignored.
    refuse_start("max_cost_usd " + format_usd(*cfg_.budgets.max_cost_usd) + " is set but the model " +
                 provider_->describe() + " has no price in the model config (add it under \"prices\", docs/models.md)");
    return;
  }
  LaunchSpec spec;
  spec.child_id = cfg_.id;
  spec.preset = cfg_.preset;
  spec.executable = cfg_.child_executable;
  spec.args = cfg_.child_args;
  spec.workspace = cfg_.workspace;
  spec.allow_unsafe_workspace = cfg_.allow_unsafe_workspace;
  spec.extra_env.push_back("SUBAGENT_CHILD_ID=" + cfg_.id);
  StartHandlers handlers;
  handlers.on_state = [self = shared_from_this()](RuntimeState s) { self->on_runtime_state(s); };
  handlers.on_started = [self = shared_from_this()](std::unique_ptr<RunningChild> child, std::string error) {
    self->on_started(std::move(child), error);
  };
  starting_ = runtime_->start(io_, std::move(spec), std::move(handlers));
}

void ChildSession::on_runtime_state(RuntimeState s) {
  if (state_ != State::starting || runtime_state_ == s) return;
  runtime_state_ = s;
  if (s == RuntimeState::queued)
    emit(make_event(EventKind::runtime_state, {{"state", to_string(s)}, {"runtime", std::string(runtime_->name())}}));
  report_progress();
}

void ChildSession::start_failed(const std::string& why) {
  // The runtime could not start the child: nothing of it ran, and it never runs unsandboxed.
  refuse_start(std::string("could not start the child: ") + why);
}

void ChildSession::refuse_start(const std::string& reason) {
  fail(proto::Status::failed, reason);
  exited_ = true;
  stdout_eof_ = true;
  asio::post(io_, [self = shared_from_this()] { self->maybe_finish(); });
}

void ChildSession::on_started(std::unique_ptr<RunningChild> child, const std::string& error) {
  starting_.reset();
  if (done_) return;  // a cancel while it was queued ended the session; the child goes with `child`
  // A cancel() that came while the child was set up does not stop the start: the child is started
  // and its tree killed like any other cancelled child's, so the envelope reports the same exit.
  if (!child) return start_failed(error);
  child_ = std::move(child);
  runtime_state_ = RuntimeState::running;
  layers_applied_ = sandbox::layer_names(child_->layers().applied);
  layers_missing_ = sandbox::layer_names(child_->layers().missing);
  to_child_.assign(child_->take_stdin());
  from_child_.assign(child_->take_stdout());
  child_err_.assign(child_->take_stderr());
  json started = {{"runtime", std::string(runtime_->name())},
                  {"runtime_id", child_->runtime_id()},
                  {"sandbox", {{"applied", layers_applied_}, {"missing", layers_missing_}}}};
  if (child_->local_pid()) started["pid"] = *child_->local_pid();
  emit(make_event(EventKind::started, std::move(started)));
  state_ = State::handshake;

  child_->on_end([self = shared_from_this()](const ChildEnd& end) { self->on_end(end); });
  do_read();
  do_read_stderr();
  if (ending_.is(proto::Status::cancelled)) {  // cancel() came while it was launched: end it as cancel() does
    kill_tree("cancelled");
    return;
  }

  handshake_.expires_after(cfg_.handshake_timeout);
  handshake_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && self->state_ == State::handshake)
      self->fail(proto::Status::protocol_error,
                 "the child sent no hello within " + std::to_string(self->cfg_.handshake_timeout.count()) + " ms");
  });
  deadline_.expires_after(std::chrono::milliseconds(cfg_.budgets.timeout_ms));
  deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;
    self->begin_wrap_up(proto::Status::timeout, Budget::time,
                        "wall-clock budget of " + std::to_string(self->cfg_.budgets.timeout_ms) + " ms reached");
  });
  if (cfg_.disk) watch_disk();
}

void ChildSession::watch_disk() {
  disk_timer_.expires_after(std::chrono::seconds(1));
  disk_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->done_) return;
    self->check_disk();
    if (self->state_ == State::handshake || self->state_ == State::running) self->watch_disk();
  });
}

void ChildSession::check_disk() {
  if (!cfg_.disk || state_ != State::running) return;
  struct statfs st {};
  if (::statfs(cfg_.disk->path.c_str(), &st) != 0) return;  // gone or unreadable: the next check tries again
  const std::uint64_t free = static_cast<std::uint64_t>(st.f_bavail) * static_cast<std::uint64_t>(st.f_bsize);
  if (free >= cfg_.disk->floor_bytes) return;
  begin_wrap_up(proto::Status::budget_exhausted, Budget::disk,
                "disk budget exhausted: " + cfg_.disk->what + " (" + std::to_string(free) + " bytes free on " +
                    cfg_.disk->path.string() + ")");
}

void ChildSession::cancel(const std::string& reason) {
  if (state_ == State::done || state_ == State::finishing) return;
  EndingInput in;
  in.event = EndingEvent::cancel;
  in.reason = reason;
  ending_.on(in);
  emit(make_event(EventKind::cancel, {{"reason", reason}}));
  provider_->cancel();
  if (state_ == State::starting) {
    // Waiting in its runtime's queue: the start is withdrawn and nothing of the child ever runs.
    if (runtime_state_ == RuntimeState::queued && starting_) {
      starting_.reset();
      exited_ = true;
      stdout_eof_ = true;
      asio::post(io_, [self = shared_from_this()] { self->maybe_finish(); });
    }
    // Being set up: on_started() kills the tree once the child exists; or the start failed, which
    // is already reported.
    return;
  }
  // Kill first: a child that read `cancel` before the kill landed could exit on its own, and a
  // cancel always ends the tree the same way. The message still goes out (a pipe to a dead child
  // is handled like any other write error).
  kill_tree("cancelled");
  send(proto::Cancel{reason});
}

void ChildSession::handle(const proto::Final& m) {
  if (final_) {
    fail(proto::Status::protocol_error, "protocol error: a second final");
    return;
  }
  final_ = m;
  EndingInput in;
  in.event = EndingEvent::final_answer;
  in.model_failed = model_failed_;
  ending_.on(in);
  grace_.cancel();
  emit(make_event(EventKind::final, {{"summary_bytes", m.summary.size()}, {"answer_bytes", m.answer.size()}}));
  state_ = State::finishing;
  // The child should exit now; give it a moment, then make sure.
  after_final_timer_.expires_after(cfg_.exit_grace);
  after_final_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->exited_) self->kill_tree("did not exit after its final answer");
  });
  maybe_finish();
}

void ChildSession::begin_wrap_up(proto::Status status, Budget budget, const std::string& why) {
  if (state_ != State::running && state_ != State::handshake) return;
  if (state_ == State::handshake) {
    fail(status, why + " before the child said hello");
    return;
  }
  EndingInput in;
  in.event = EndingEvent::budget;
  in.status = status;
  in.budget = budget;
  in.reason = why;
  // Already decided (a cancel whose kill has not landed yet): that ending stands, no wrap-up.
  if (ending_.on(in) != Ending::Effect::decided) return;
  state_ = State::wrapping_up;
  emit(make_event(EventKind::budget,
                  {{"budget", to_string(budget)}, {"status", proto::to_string(status)}, {"reason", why}}));
  send(proto::WrapUp{status == proto::Status::timeout ? "timeout" : "budget_exhausted", to_string(budget)});
  grace_.expires_after(std::chrono::milliseconds(cfg_.budgets.wrap_up_grace_ms));
  grace_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->final_ || self->exited_) return;
    EndingInput expired;
    expired.event = EndingEvent::grace_expired;
    expired.grace_ms = self->cfg_.budgets.wrap_up_grace_ms;
    self->ending_.on(expired);
    self->kill_tree("wrap-up grace expired");
  });
  report_progress();
}

void ChildSession::fail(proto::Status status, const std::string& reason) {
  if (state_ == State::done) return;
  EndingInput in;
  in.event = EndingEvent::failure;
  in.status = status;
  in.reason = reason;
  in.supervisor_killed = killed_;
  if (ending_.on(in) == Ending::Effect::after_kill) {
    // The supervisor already ended this child for its own reason (timeout, budget, cancel); a line
    // its SIGKILL cut short, or a pipe it closed, is the kill's doing and not the child's fault.
    emit(make_event(EventKind::after_kill, {{"reason", reason}}));
    return;
  }
  emit(make_event(EventKind::failure, {{"status", proto::to_string(status)}, {"reason", reason}}));
  provider_->cancel();
  if (child_) {
    if (status == proto::Status::protocol_error) send(proto::Error{"protocol_error", reason});
    kill_tree(reason);
  }
  if (state_ != State::starting) state_ = State::finishing;
}

void ChildSession::kill_tree(const std::string& why) {
  if (!child_ || exited_) return;
  if (!killed_) emit(make_event(EventKind::kill, {{"reason", why}}));
  killed_ = true;
  child_->kill_tree();
}

// ---- the envelope --------------------------------------------------------------------------------

void ChildSession::maybe_finish() {
  if (done_ || !exited_ || !stdout_eof_) return;
  if (intake_busy_ || !held_frames_.empty()) return;  // on_intake_done() comes back here
  finish();
}

void ChildSession::finish() {
  done_ = true;
  state_ = State::done;
  boost::system::error_code ignored;
  deadline_.cancel();
  grace_.cancel();
  handshake_.cancel();
  stdout_closed_timer_.cancel();
  after_final_timer_.cancel();
  disk_timer_.cancel();
  for (auto& [id, pending] : approvals_) pending->timer.cancel();  // a late answer finds the session done
  drain_timer_.cancel();
  rate_timer_.cancel();
  to_child_.close(ignored);
  provider_->cancel();

  proto::Envelope e;
  e.id = cfg_.id;
  e.preset = cfg_.preset->name;
  e.description = cfg_.description;
  EndingInput exited;
  exited.event = EndingEvent::exited;
  exited.code = exit_.code;
  exited.signal = exit_.signal;
  ending_.on(exited);  // decides only when nothing else did
  ending_.seal();      // from here on, no event changes the envelope
  e.status = *ending_.status();
  e.budget = ending_.budget() ? to_string(*ending_.budget()) : "";
  e.reason = ending_.reason();
  if (final_) {
    e.summary = proto::cap_utf8(final_->summary, cfg_.budgets.summary_bytes);
    e.answer = proto::cap_utf8(final_->answer, cfg_.budgets.answer_bytes);
  }
  if (last_cut_) {
    // The last model turn was cut by the token cap and none came after it: whatever the child made of
    // it is a fragment. Without a final, the fragment itself is the answer, marked as such.
    e.answer_partial = true;
    if (!final_ || final_->answer.empty()) {
      e.answer = proto::cap_utf8(cut_text_, cfg_.budgets.answer_bytes);
      e.summary = proto::cap_utf8("(partial: the model's turn was cut by the token cap) " +
                                      cut_text_.substr(0, std::min<std::size_t>(cut_text_.size(), 200)),
                                  cfg_.budgets.summary_bytes);
    }
  }
  // The budget left no wrap-up turn: the model never wrote its report, and the answer is whatever the
  // child had before (protocol/README.md, "Budgets").
  if (no_wrap_turn_) e.answer_partial = true;
  if (meter_.price()) e.cost_usd = meter_.cost_usd();
  e.tools_used = tools_used_;
  e.tools_denied = tools_denied_;
  e.denials = denials_;
  e.usage = meter_.usage();
  e.steps = meter_.steps();
  e.tool_calls = meter_.tool_calls();
  e.duration_ms = elapsed_ms();
  e.exit = exit_;
  e.sandbox_applied = layers_applied_;
  e.sandbox_missing = layers_missing_;
  emit(make_event(EventKind::envelope, {{"envelope", proto::to_json(e)}}));
  report_progress();
  auto done = std::move(on_done_);
  on_done_ = nullptr;
  if (done) done(e);
}

}  // namespace supervisor
