#include "orchestration/session.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <cstring>

#include "protocol/tools.hpp"
#include "sandbox/launch.hpp"

namespace supervisor {

namespace asio = boost::asio;
namespace proto = protocol;
using nlohmann::json;

namespace {

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
  int release_read() { return std::exchange(read, -1); }
  int release_write() { return std::exchange(write, -1); }
};

void ignore_sigpipe_once() {
  static const bool done = [] {
    ::signal(SIGPIPE, SIG_IGN);  // a dead child's pipe must give EPIPE, not kill the supervisor
    return true;
  }();
  (void)done;
}

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

std::string new_child_id() {
  unsigned char bytes[6];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<std::size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id.push_back(hex[b >> 4]);
    id.push_back(hex[b & 15]);
  }
  return id;
}

std::shared_ptr<ChildSession> ChildSession::create(asio::io_context& io, SessionConfig cfg,
                                                   std::unique_ptr<ModelProvider> provider) {
  return std::shared_ptr<ChildSession>(new ChildSession(io, std::move(cfg), std::move(provider)));
}

ChildSession::ChildSession(asio::io_context& io, SessionConfig cfg, std::unique_ptr<ModelProvider> provider)
    : io_(io),
      cfg_(std::move(cfg)),
      provider_(std::move(provider)),
      pidfd_(io),
      rewait_(io),
      to_child_(io),
      from_child_(io),
      child_err_(io),
      reader_(cfg_.max_line),
      deadline_(io),
      grace_(io),
      handshake_(io),
      exit_timer_(io),
      drain_timer_(io) {}

ChildSession::~ChildSession() {
  // Invariant 6: no child outlives its session, and none is left a zombie. Only reached with the
  // child alive when the owner drops the session early (e.g. the supervisor is exiting).
  if (pid_ > 0 && !exited_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    if (pidfd_.is_open()) {
      const int fd = pidfd_.native_handle();
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // Asio set it; this wait must block
      siginfo_t info{};
      while (::waitid(P_PIDFD, static_cast<id_t>(pidfd_.native_handle()), &info, WEXITED) < 0 && errno == EINTR) {
      }
    }
    sandbox::release(launched_);
  }
}

std::uint64_t ChildSession::elapsed_ms() const {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count());
}

Progress ChildSession::progress() const {
  static constexpr const char* names[] = {"starting", "starting", "running", "wrapping_up", "finishing", "done"};
  Progress p;
  p.id = cfg_.id;
  p.state = names[static_cast<int>(state_)];
  p.steps = steps_;
  p.max_steps = cfg_.budgets.max_steps;
  p.tool_calls = tool_calls_;
  p.max_tool_calls = cfg_.budgets.max_tool_calls;
  p.tokens = usage_.total();
  p.max_tokens = cfg_.budgets.max_tokens;
  p.elapsed_ms = state_ == State::starting ? 0 : elapsed_ms();
  return p;
}

void ChildSession::emit(json event) {
  if (!cfg_.on_event) return;
  event["child"] = cfg_.id;
  event["elapsed_ms"] = elapsed_ms();
  cfg_.on_event(event);
}

json ChildSession::tool_specs_for_child() const {
  // The catalogue's specs (protocol/tools.json), for exactly the tools the policy offers: local
  // and brokered alike (a policy naming a tool outside the catalogue was refused at load).
  return protocol::tool_specs(offered_tools(*cfg_.preset));
}

void ChildSession::report_progress() {
  if (cfg_.on_progress) cfg_.on_progress(progress());
}

void ChildSession::start(DoneHandler on_done) {
  ignore_sigpipe_once();
  on_done_ = std::move(on_done);
  started_ = std::chrono::steady_clock::now();
  price_ = provider_->price();
  emit({{"event", "spawn"},
        {"preset", cfg_.preset->name},
        {"policy_digest", cfg_.preset->digest},
        {"description", cfg_.description},
        {"workspace", cfg_.workspace.string()},
        {"model", provider_->describe()}});
  if (cfg_.budgets.max_cost_usd && !price_) {
    // A cost budget nobody can count is refused, never silently ignored.
    fail(proto::Status::failed, "max_cost_usd " + format_usd(*cfg_.budgets.max_cost_usd) + " is set but the model " +
                                    provider_->describe() +
                                    " has no price in the model config (add it under \"prices\", docs/models.md)");
    exited_ = true;
    stdout_eof_ = true;
    asio::post(io_, [self = shared_from_this()] { self->maybe_finish(); });
    return;
  }
  try {
    Pipe in, out, err;
    sandbox::LaunchRequest req;
    req.executable = cfg_.child_executable.string();
    req.argv.push_back(cfg_.child_executable.string());
    req.argv.insert(req.argv.end(), cfg_.child_args.begin(), cfg_.child_args.end());
    req.workspace = cfg_.workspace;
    req.allow_unsafe_workspace = cfg_.allow_unsafe_workspace;
    req.child_dir = cfg_.child_executable;  // ${child}: the one program this child may exec
    req.extra_env.push_back("SUBAGENT_CHILD_ID=" + cfg_.id);
    req.stdin_fd = in.read;
    req.stdout_fd = out.write;
    req.stderr_fd = err.write;
    sandbox::PlanPtr plan = sandbox::prepare(cfg_.preset->sandbox, req);
    for (const auto& l : sandbox::layers(*plan))
      (l.applied ? layers_applied_ : layers_missing_).push_back(l.name);
    sandbox::Child child = sandbox::launch(*plan);
    launched_ = child;
    pid_ = child.pid;
    pidfd_.assign(child.pidfd);
    to_child_.assign(in.release_write());
    from_child_.assign(out.release_read());
    child_err_.assign(err.release_read());
  } catch (const std::exception& e) {
    // Launch failed before the child ran anything: report, never run it unsandboxed.
    fail(proto::Status::failed, std::string("could not start the child: ") + e.what());
    exited_ = true;
    stdout_eof_ = true;
    asio::post(io_, [self = shared_from_this()] { self->maybe_finish(); });
    return;
  }
  emit({{"event", "started"}, {"pid", pid_}, {"sandbox", {{"applied", layers_applied_}, {"missing", layers_missing_}}}});
  state_ = State::handshake;

  wait_exit();
  do_read();
  do_read_stderr();

  handshake_.expires_after(cfg_.handshake_timeout);
  handshake_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && self->state_ == State::handshake)
      self->fail(proto::Status::protocol_error,
                 "the child sent no hello within " + std::to_string(self->cfg_.handshake_timeout.count()) + " ms");
  });
  deadline_.expires_after(std::chrono::milliseconds(cfg_.budgets.timeout_ms));
  deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;
    self->begin_wrap_up(proto::Status::timeout, "time",
                        "wall-clock budget of " + std::to_string(self->cfg_.budgets.timeout_ms) + " ms reached");
  });
}

void ChildSession::cancel(const std::string& reason) {
  if (state_ == State::done || state_ == State::finishing) return;
  if (!status_ || *status_ == proto::Status::budget_exhausted || *status_ == proto::Status::timeout) {
    status_ = proto::Status::cancelled;
    budget_.clear();
    reason_ = "cancelled: " + reason;
  }
  emit({{"event", "cancel"}, {"reason", reason}});
  provider_->cancel();
  if (state_ == State::starting) return;  // launch failure already reported
  // Kill first: a child that read `cancel` before the kill landed could exit on its own, and a
  // cancel always ends the tree the same way. The message still goes out (a pipe to a dead child
  // is handled like any other write error).
  kill_tree("cancelled");
  send(proto::Cancel{reason});
}

// ---- reading the child ---------------------------------------------------------------------------

void ChildSession::do_read() {
  from_child_.async_read_some(asio::buffer(read_buf_), [self = shared_from_this()](boost::system::error_code ec,
                                                                                    std::size_t n) {
    self->on_read(ec, n);
  });
}

void ChildSession::on_read(boost::system::error_code ec, std::size_t n) {
  std::vector<proto::Frame> frames;
  if (ec) {
    reader_.finish(frames);
  } else {
    reader_.feed(std::string_view(read_buf_.data(), n), frames);
  }
  for (auto& f : frames) {
    if (state_ == State::finishing || state_ == State::done) break;
    handle_frame(f);
  }
  if (ec) {
    stdout_eof_ = true;
    boost::system::error_code ignored;
    from_child_.close(ignored);
    if (!exited_ && !final_ && state_ != State::finishing && state_ != State::done) {
      // Its output closed but the child lives on: it can never report again. A child that is just
      // exiting closes stdout a moment before the kernel says it exited, so wait that moment first.
      exit_timer_.expires_after(cfg_.exit_grace);
      exit_timer_.async_wait([self = shared_from_this()](boost::system::error_code e) {
        if (e || self->exited_ || self->final_) return;
        self->fail(proto::Status::protocol_error,
                   "protocol error: the child closed its stdout but kept running (still alive " +
                       std::to_string(self->cfg_.exit_grace.count()) + " ms later)");
      });
    }
    maybe_finish();
    return;
  }
  do_read();
}

void ChildSession::handle_frame(proto::Frame& f) {
  if (f.error != proto::FrameError::none) {
    std::string what = std::string("protocol error: ") + proto::to_string(f.error);
    if (f.error == proto::FrameError::line_too_long)
      what += " (a line of at least " + std::to_string(f.size) + " bytes; the limit is " +
              std::to_string(reader_.max_line()) + ")";
    else if (f.error == proto::FrameError::truncated)
      what += " (the child's output ended inside a line of " + std::to_string(f.size) + " bytes)";
    else
      what += " (a line of " + std::to_string(f.size) + " bytes is not valid UTF-8)";
    fail(proto::Status::protocol_error, what);
    return;
  }
  if (f.line.empty()) return;  // blank lines are allowed and ignored
  auto decoded = proto::decode_child_message(f.line);
  if (!decoded) {
    fail(proto::Status::protocol_error, "protocol error: " + decoded.error);
    return;
  }
  const auto& m = *decoded.message;
  if (state_ == State::handshake && !std::holds_alternative<proto::Hello>(m) && !std::holds_alternative<proto::Log>(m)) {
    fail(proto::Status::protocol_error,
         std::string("protocol error: expected hello first, got ") + proto::type_name(m));
    return;
  }
  std::visit([this](const auto& msg) { handle(msg); }, m);
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
  emit({{"event", "hello"}, {"agent", m.agent}, {"version", *version}});
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
std::size_t request_bytes(const json& messages, const json& tools) {
  return messages.dump(-1, ' ', false, json::error_handler_t::replace).size() +
         (tools.empty() ? 0 : tools.dump(-1, ' ', false, json::error_handler_t::replace).size());
}
bool cut_turn(const std::string& finish_reason) { return finish_reason == "length" || finish_reason == "budget"; }
}  // namespace

std::uint64_t ChildSession::tokens_left() const {
  return cfg_.budgets.max_tokens > usage_.total() ? cfg_.budgets.max_tokens - usage_.total() : 0;
}

std::uint64_t ChildSession::thinking_left() const {
  return cfg_.budgets.max_thinking_tokens > usage_.reasoning_tokens ? cfg_.budgets.max_thinking_tokens - usage_.reasoning_tokens
                                                                    : 0;
}

std::uint64_t ChildSession::output_room(std::uint64_t est_input) const {
  // What the budgets leave for this call's output once its estimated input is paid for.
  const std::uint64_t left = tokens_left();
  std::uint64_t room = left > est_input ? left - est_input : 0;
  if (cfg_.budgets.max_cost_usd && price_) {
    const double money = *cfg_.budgets.max_cost_usd - cost_usd_ -
                         static_cast<double>(est_input) * worst_input_price(*price_) / 1e6;
    const double out = money <= 0 ? 0 : price_->output > 0 ? money * 1e6 / price_->output : 1e18;
    room = std::min<std::uint64_t>(room, out >= 1e18 ? UINT64_MAX : static_cast<std::uint64_t>(out));
  }
  return room;
}

std::string ChildSession::reservation_refusal(std::uint64_t est_input, std::uint64_t min_output) const {
  if (output_room(est_input) >= min_output) return {};
  const std::uint64_t left = tokens_left();
  if (left < est_input + min_output)
    return "token budget exhausted: the next call needs about " + std::to_string(est_input) + " input + " +
           std::to_string(min_output) + " output tokens and " + std::to_string(left) + " of " +
           std::to_string(cfg_.budgets.max_tokens) + " remain (" + std::to_string(usage_.total()) + " used)";
  return "cost budget exhausted: the next call could cost up to " +
         format_usd(static_cast<double>(est_input) * worst_input_price(*price_) / 1e6 +
                    static_cast<double>(min_output) * price_->output / 1e6) +
         " and " + format_usd(std::max(0.0, *cfg_.budgets.max_cost_usd - cost_usd_)) + " of " +
         format_usd(*cfg_.budgets.max_cost_usd) + " remain (" + format_usd(cost_usd_) + " spent)";
}

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
  // Only tools the policy offers reach the model, whatever the child put in the request.
  json tools = json::array();
  {
    const auto offered = offered_tools(*cfg_.preset);
    for (const auto& spec : m.tools) {
      std::string name = spec.is_object() ? spec.value("name", "") : "";
      if (std::find(offered.begin(), offered.end(), name) != offered.end()) tools.push_back(spec);
    }
  }
  std::size_t bytes = request_bytes(m.messages, tools);
  std::uint64_t est_input = estimator_.estimate(bytes, m.messages.size());
  if (state_ == State::running) {
    if (steps_ >= cfg_.budgets.max_steps)
      begin_wrap_up(proto::Status::budget_exhausted, "steps",
                    "step budget exhausted (" + std::to_string(steps_) + " of " + std::to_string(cfg_.budgets.max_steps) + ")");
    else if (std::string why = reservation_refusal(est_input, kMinOutputTokens); !why.empty())
      begin_wrap_up(proto::Status::budget_exhausted, why.rfind("cost", 0) == 0 ? "cost" : "tokens", why);
    else if (usage_.reasoning_tokens >= cfg_.budgets.max_thinking_tokens && cfg_.budgets.max_thinking_tokens > 0)
      begin_wrap_up(proto::Status::budget_exhausted, "thinking_tokens",
                    "thinking-token budget exhausted (" + std::to_string(usage_.reasoning_tokens) + " of " +
                        std::to_string(cfg_.budgets.max_thinking_tokens) + ")");
  }
  const bool wrap_turn = state_ == State::wrapping_up;
  if (wrap_turn) {
    tools = json::array();
    bytes = request_bytes(m.messages, tools);
    est_input = estimator_.estimate(bytes, m.messages.size());
  }
  if (wrap_turn && (wrap_turn_used_ || !reservation_refusal(est_input, kMinOutputTokens).empty())) {
    // No model turn left to give: the child reports with what it has.
    send(proto::ModelError{m.id, "budget_exhausted",
                           wrap_turn_used_ ? "the wrap-up turn was already used; send your final answer"
                                           : reason_ + "; no budget is left for a wrap-up turn; send your final "
                                                       "answer with what you have"});
    return;
  }
  ModelCall call;
  call.child_id = cfg_.id;
  call.messages = m.messages;
  call.tools = std::move(tools);
  if (std::size_t cut = cap_tool_results(call.messages, cfg_.budgets.tool_result_bytes))
    emit({{"event", "tool_results_cut"}, {"id", m.id}, {"count", cut}, {"tool_result_bytes", cfg_.budgets.tool_result_bytes}});
  call.max_thinking_tokens = thinking_left();
  call.wrap_up = wrap_turn;
  call.deadline = started_ + std::chrono::milliseconds(cfg_.budgets.timeout_ms + cfg_.budgets.wrap_up_grace_ms);
  call.max_tokens = output_room(est_input);
  if (wrap_turn) {
    wrap_turn_used_ = true;
    call.max_tokens = std::min(call.max_tokens, kWrapUpTurnTokens);
  }
  if (m.max_tokens) call.max_tokens = std::min(call.max_tokens, *m.max_tokens);
  call.max_tokens = std::max<std::uint64_t>(call.max_tokens, 1);
  ++steps_;
  model_in_flight_ = m.id;
  pending_bytes_ = bytes;
  pending_messages_ = m.messages.size();
  pending_estimate_ = est_input;
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
  emit({{"event", "model_request"},
        {"id", m.id},
        {"step", steps_},
        {"messages", m.messages.size()},
        {"messages_from", from},
        {"new_messages", std::move(new_messages)},
        {"tools", call.tools.size()},
        {"tool_names", std::move(tool_names)},
        {"max_tokens", call.max_tokens},
        {"estimated_input_tokens", est_input},
        {"thinking_tokens_left", call.max_thinking_tokens},
        {"wrap_up_turn", wrap_turn}});
  provider_->start(std::move(call), [self = shared_from_this(), id = m.id](ModelReply r) {
    self->on_model_reply(id, std::move(r));
  });
}

void ChildSession::on_model_reply(const std::string& request_id, ModelReply r) {
  model_in_flight_.reset();
  if (state_ == State::finishing || state_ == State::done) return;
  usage_ += r.usage;
  double call_cost = 0;
  if (price_) {
    call_cost = cost_of(r.usage, *price_);
    cost_usd_ += call_cost;
  }
  if (r.usage.input_tokens > 0 && !r.usage_estimated) estimator_.observe(pending_bytes_, pending_messages_, r.usage.input_tokens);
  else if (r.usage.input_tokens > 0) estimator_.observe(pending_bytes_, pending_messages_, std::max(r.usage.input_tokens, pending_estimate_));
  const bool cut = r.ok && cut_turn(r.finish_reason);
  json event = {{"event", "model_response"},
                {"id", request_id},
                {"ok", r.ok},
                {"error", r.error_code.empty() ? json(nullptr) : json(r.error_code + ": " + r.error_message)},
                {"usage", proto::to_json(r.usage)},
                {"usage_estimated", r.usage_estimated},
                {"estimated_input_tokens", pending_estimate_},
                {"request", r.request},
                {"content_bytes", r.content.size()},
                {"content", r.content},
                {"tool_calls", [&] {
                   json calls = json::array();
                   for (const auto& c : r.tool_calls) calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
                   return calls;
                 }()},
                {"finish_reason", r.finish_reason}};
  if (price_) event["cost_usd"] = call_cost;
  if (cut) event["cut"] = true;
  emit(std::move(event));
  if (r.ok) model_failed_.clear();
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
    begin_wrap_up(proto::Status::budget_exhausted, "tokens",
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

void ChildSession::handle(const proto::ToolRequest& m) {
  if (state_ == State::finishing || state_ == State::done) return;
  if (!used_ids_.insert(std::hash<std::string>{}(m.id)).second) {
    fail(proto::Status::protocol_error, "protocol error: tool_request id '" + shown_id(m.id) +
                                            "' reused (request ids must be unique in a session)");
    return;
  }
  if (state_ == State::running && tool_calls_ >= cfg_.budgets.max_tool_calls)
    begin_wrap_up(proto::Status::budget_exhausted, "tool_calls",
                  "tool-call budget exhausted (" + std::to_string(tool_calls_) + " of " +
                      std::to_string(cfg_.budgets.max_tool_calls) + ")");
  if (state_ == State::wrapping_up) {
    emit({{"event", "tool_decision"}, {"id", m.id}, {"tool", m.tool}, {"decision", "deny"}, {"reason", "wrap-up"}});
    const std::string told = "the supervisor asked you to wrap up (" + reason_ + "); no more tools";
    deny_tool(m, "wrap-up", told, told);
    return;
  }
  decide_tool(m);
}

void ChildSession::deny_tool(const proto::ToolRequest& req, const std::string& rule, const std::string& reason,
                             const std::string& told) {
  ++tools_denied_;
  proto::Denial d = proto::capped_denial(proto::Denial{req.tool, rule, reason});
  emit({{"event", "denial"}, {"id", req.id}, {"tool", d.tool}, {"rule", d.rule}, {"reason", d.reason}});
  denials_.add(std::move(d));
  send(proto::ToolDecision{req.id, false, told});
}

void ChildSession::decide_tool(const proto::ToolRequest& m) {
  std::string why, rule;
  Decision d = decide(*cfg_.preset, m.tool, m.args, why, &rule);
  auto record = [&](const char* decision, const std::string& reason) {
    emit({{"event", "tool_decision"},
          {"id", m.id},
          {"tool", m.tool},
          {"args", m.args},
          {"decision", decision},
          {"rule", rule},
          {"reason", reason}});
  };
  auto allow = [this](const proto::ToolRequest& req, const std::string& reason) {
    ++tool_calls_;
    ++tools_used_[req.tool];
    if (cfg_.brokered && cfg_.brokered->handles(req.tool)) {
      pending_tools_[req.id] = req.tool;
      cfg_.brokered->run(cfg_.id, req.tool, req.args,
                         [self = shared_from_this(), id = req.id](bool ok, std::string content) {
                           if (self->state_ == State::finishing || self->state_ == State::done) return;
                           self->pending_tools_.erase(id);
                           const std::uint64_t cap = self->cfg_.budgets.tool_result_bytes;
                           if (cap > 0 && content.size() > cap) {  // the same cap as a local tool's result
                             const std::size_t n = content.size();
                             content = proto::cap_utf8(content, cap).text + "\n[cut by the supervisor: " +
                                       std::to_string(n) + " bytes; tool_result_bytes is " + std::to_string(cap) + "]";
                           }
                           self->emit({{"event", "tool_result"}, {"id", id}, {"ok", ok}, {"bytes", content.size()},
                                       {"content", content}});
                           self->send(proto::ToolResult{id, ok, std::move(content)});
                         });
    } else {
      pending_tools_[req.id] = req.tool;
      send(proto::ToolDecision{req.id, true, reason});
    }
    report_progress();
  };
  if (d == Decision::allow) {
    record("allow", why);
    allow(m, why);
    return;
  }
  if (d == Decision::deny) {
    record("deny", why);
    deny_tool(m, rule, why, why);
    return;
  }
  // ask
  if (!cfg_.approver) {
    std::string reason = why + ", and no approver is attached, so it is denied";
    record("deny", reason);
    deny_tool(m, "ask: no approver", why, reason);
    return;
  }
  record("ask", why);
  ++approvals_pending_;
  auto answered = std::make_shared<bool>(false);
  auto timed_out = std::make_shared<bool>(false);
  auto timer = std::make_shared<asio::steady_timer>(io_, cfg_.approval_timeout);
  auto reply = [self = shared_from_this(), m, why, answered, timed_out, timer, allow](bool ok, std::string reason) {
    if (*answered) return;
    *answered = true;
    timer->cancel();
    --self->approvals_pending_;
    if (self->state_ == State::finishing || self->state_ == State::done) return;
    self->emit({{"event", "approval"}, {"id", m.id}, {"tool", m.tool}, {"allow", ok}, {"reason", reason}});
    if (self->state_ == State::wrapping_up) {
      self->deny_tool(m, "wrap-up", why + "; the child is wrapping up", "approval denied: the child is wrapping up");
      return;
    }
    if (ok) allow(m, "approved: " + reason);
    else
      self->deny_tool(m, *timed_out ? "ask: approval timed out" : "ask: declined by parent", why + "; " + reason,
                      "approval denied: " + reason);
  };
  timer->async_wait([reply, timed_out, ms = cfg_.approval_timeout.count()](boost::system::error_code ec) {
    if (ec) return;
    *timed_out = true;
    reply(false, "no answer within " + std::to_string(ms) + " ms");
  });
  cfg_.approver(ApprovalRequest{cfg_.id, cfg_.preset->name, cfg_.description, m.tool, m.args, why}, reply);
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
  emit({{"event", "tool_done"}, {"id", m.id}, {"tool", it->second}, {"ok", m.ok}, {"bytes", m.bytes},
        {"error", m.error}});
  pending_tools_.erase(it);
}

void ChildSession::handle(const proto::Final& m) {
  if (final_) {
    fail(proto::Status::protocol_error, "protocol error: a second final");
    return;
  }
  final_ = m;
  if (!status_ && !model_failed_.empty()) {
    // The model server failed (down, resetting, stalled) and the child gave up: its report is what
    // it had, not a completed task.
    status_ = proto::Status::failed;
    reason_ = "the model call failed (" + model_failed_ + "); the child reported what it had";
  } else if (!status_) {
    status_ = proto::Status::completed;
    reason_ = "the child sent its final answer";
  } else if (*status_ == proto::Status::budget_exhausted || *status_ == proto::Status::timeout) {
    reason_ += "; the child wrapped up with a final answer";
  }
  grace_.cancel();
  emit({{"event", "final"}, {"summary_bytes", m.summary.size()}, {"answer_bytes", m.answer.size()}});
  state_ = State::finishing;
  // The child should exit now; give it a moment, then make sure.
  exit_timer_.expires_after(cfg_.exit_grace);
  exit_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->exited_) self->kill_tree("did not exit after its final answer");
  });
  maybe_finish();
}

namespace {
// What one child may send to the parent's log, stderr lines and `log` messages together: a child
// that floods its log must not flood the parent (or the supervisor's queue to a slow parent).
constexpr std::size_t kMaxLogBytes = 1 << 20;
}  // namespace

void ChildSession::handle(const proto::Log& m) {
  if (!cfg_.on_log || stderr_logged_ > kMaxLogBytes) return;
  std::string line = "[subagent:" + cfg_.id + "] " + (m.level.empty() ? "" : m.level + ": ") + m.message;
  stderr_logged_ += line.size();
  cfg_.on_log(line);
  if (stderr_logged_ > kMaxLogBytes)
    cfg_.on_log("[subagent:" + cfg_.id + "] (more than 1 MiB of log; the rest is dropped)");
}

// ---- stderr, exit, timers ------------------------------------------------------------------------

void ChildSession::do_read_stderr() {
  child_err_.async_read_some(asio::buffer(err_buf_), [self = shared_from_this()](boost::system::error_code ec,
                                                                                   std::size_t n) {
    std::vector<proto::Frame> frames;
    if (ec) self->err_reader_.finish(frames);
    else self->err_reader_.feed(std::string_view(self->err_buf_.data(), n), frames);
    for (const auto& f : frames) {
      if (!self->cfg_.on_log || self->stderr_logged_ > kMaxLogBytes) continue;
      std::string text = f.error == proto::FrameError::none ? f.line
                         : f.error == proto::FrameError::invalid_utf8 ? "(a line of invalid UTF-8)"
                         : f.error == proto::FrameError::truncated ? "(an unterminated line)"
                                                                   : "(a line over 4096 bytes, dropped)";
      self->stderr_logged_ += text.size();
      self->cfg_.on_log("[subagent:" + self->cfg_.id + "] " + text);
      if (self->stderr_logged_ > kMaxLogBytes)
        self->cfg_.on_log("[subagent:" + self->cfg_.id + "] (more than 1 MiB of log; the rest is dropped)");
    }
    if (ec) {
      boost::system::error_code ignored;
      self->child_err_.close(ignored);
      return;
    }
    self->do_read_stderr();
  });
}

void ChildSession::wait_exit() {
  pidfd_.async_wait(asio::posix::descriptor_base::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    siginfo_t info{};
    int rc;
    while ((rc = ::waitid(P_PIDFD, static_cast<id_t>(self->pidfd_.native_handle()), &info,
                          WEXITED | WNOHANG)) < 0 &&
           errno == EINTR) {
    }
    // Asio made the pidfd non-blocking: then a child that has not exited yet gives EAGAIN.
    if ((rc == 0 && info.si_pid == 0) || (rc < 0 && errno == EAGAIN)) {
      // Not exited yet: look again shortly rather than spin on a level-triggered wake-up.
      self->rewait_.expires_after(std::chrono::milliseconds(5));
      self->rewait_.async_wait([self](boost::system::error_code e) {
        if (!e) self->wait_exit();
      });
      return;
    }
    int status = 0;
    if (rc == 0) {
      if (info.si_code == CLD_EXITED) status = W_EXITCODE(info.si_status, 0);
      else status = info.si_status & 0x7f;  // killed or dumped: the signal number
    }
    self->on_exit(status);
  });
}

void ChildSession::on_exit(int status) {
  exited_ = true;
  if (WIFEXITED(status)) exit_.code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) exit_.signal = WTERMSIG(status);
  boost::system::error_code close_ec;
  pidfd_.close(close_ec);
  // The leader is gone; anything it left behind in its process group goes too.
  ::kill(-pid_, SIGKILL);
  sandbox::release(launched_);
  emit({{"event", "exit"},
        {"code", exit_.code ? json(*exit_.code) : json(nullptr)},
        {"signal", exit_.signal ? json(*exit_.signal) : json(nullptr)}});
  if (!stdout_eof_) {
    // Give buffered output a moment to drain; a grandchild holding the pipe must not keep us waiting.
    drain_timer_.expires_after(std::chrono::milliseconds(200));
    drain_timer_.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (e || self->stdout_eof_) return;
      self->stdout_eof_ = true;
      boost::system::error_code ignored;
      self->from_child_.cancel(ignored);
      self->maybe_finish();
    });
  }
  maybe_finish();
}

void ChildSession::begin_wrap_up(proto::Status status, const std::string& budget, const std::string& why) {
  if (state_ != State::running && state_ != State::handshake) return;
  if (state_ == State::handshake) {
    fail(status, why + " before the child said hello");
    return;
  }
  state_ = State::wrapping_up;
  status_ = status;
  budget_ = budget;
  reason_ = why;
  emit({{"event", "budget"}, {"budget", budget}, {"status", proto::to_string(status)}, {"reason", why}});
  send(proto::WrapUp{status == proto::Status::timeout ? "timeout" : "budget_exhausted", budget});
  grace_.expires_after(std::chrono::milliseconds(cfg_.budgets.wrap_up_grace_ms));
  grace_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->final_ || self->exited_) return;
    self->reason_ += "; the child did not wrap up within " + std::to_string(self->cfg_.budgets.wrap_up_grace_ms) +
                     " ms and was killed";
    self->kill_tree("wrap-up grace expired");
  });
  report_progress();
}

void ChildSession::fail(proto::Status status, const std::string& reason) {
  if (state_ == State::done) return;
  if (status == proto::Status::protocol_error && killed_ && status_ && *status_ != proto::Status::protocol_error) {
    // The supervisor already ended this child for its own reason (timeout, budget, cancel); a line
    // its SIGKILL cut short, or a pipe it closed, is the kill's doing and not the child's fault.
    emit({{"event", "after_kill"}, {"reason", reason}});
    return;
  }
  if (!status_ || *status_ != proto::Status::cancelled) {
    status_ = status;
    budget_.clear();
    reason_ = reason;
  }
  emit({{"event", "failure"}, {"status", proto::to_string(status)}, {"reason", reason}});
  provider_->cancel();
  if (pid_ > 0) {
    if (status == proto::Status::protocol_error) send(proto::Error{"protocol_error", reason});
    kill_tree(reason);
  }
  if (state_ != State::starting) state_ = State::finishing;
}

void ChildSession::kill_tree(const std::string& why) {
  if (pid_ <= 0 || exited_) return;
  if (!killed_) emit({{"event", "kill"}, {"reason", why}});
  killed_ = true;
  // setsid() in the child made it a process-group leader; a PID namespace (when applied) takes the rest.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
}

// ---- writing -------------------------------------------------------------------------------------

void ChildSession::send(const proto::SupervisorMessage& m) {
  if (pid_ <= 0 || exited_ || !to_child_.is_open()) return;
  write_queue_.push_back(proto::encode_line(m));
  if (!writing_) do_write();
}

void ChildSession::do_write() {
  if (write_queue_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  asio::async_write(to_child_, asio::buffer(write_queue_.front()),
                    [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                      self->write_queue_.pop_front();
                      if (ec) {  // the child closed its stdin or died: nothing more to say to it
                        self->write_queue_.clear();
                        self->writing_ = false;
                        boost::system::error_code ignored;
                        self->to_child_.close(ignored);
                        return;
                      }
                      self->do_write();
                    });
}

// ---- the envelope --------------------------------------------------------------------------------

void ChildSession::maybe_finish() {
  if (done_ || !exited_ || !stdout_eof_) return;
  finish();
}

void ChildSession::finish() {
  done_ = true;
  state_ = State::done;
  boost::system::error_code ignored;
  deadline_.cancel();
  grace_.cancel();
  handshake_.cancel();
  exit_timer_.cancel();
  drain_timer_.cancel();
  to_child_.close(ignored);
  provider_->cancel();

  proto::Envelope e;
  e.id = cfg_.id;
  e.preset = cfg_.preset->name;
  e.description = cfg_.description;
  if (!status_) {
    status_ = proto::Status::failed;
    if (exit_.signal)
      reason_ = std::string("the child was killed by signal SIG") + (sigabbrev_np(*exit_.signal) ? sigabbrev_np(*exit_.signal) : "?") +
                " before sending a final answer";
    else
      reason_ = "the child exited with code " + std::to_string(exit_.code.value_or(-1)) +
                " before sending a final answer";
  }
  e.status = *status_;
  e.budget = budget_;
  e.reason = reason_;
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
  if (price_) e.cost_usd = cost_usd_;
  e.tools_used = tools_used_;
  e.tools_denied = tools_denied_;
  e.denials = denials_;
  e.usage = usage_;
  e.steps = steps_;
  e.tool_calls = tool_calls_;
  e.duration_ms = elapsed_ms();
  e.exit = exit_;
  e.sandbox_applied = layers_applied_;
  e.sandbox_missing = layers_missing_;
  emit({{"event", "envelope"}, {"envelope", proto::to_json(e)}});
  report_progress();
  auto done = std::move(on_done_);
  on_done_ = nullptr;
  if (done) done(e);
}

}  // namespace supervisor
