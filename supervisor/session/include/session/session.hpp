// One child: launch under its preset's sandbox, speak protocol v1 with it, broker its model calls and
// tool decisions, enforce its budgets from outside, and produce exactly one envelope.
//
// Shape (after Boost.Beast's session): one object per child, paired do_read/on_read, one timer per
// deadline, one fail() sink. Everything runs on the io_context's single thread (but the decoding of
// a long line, which goes to the worker pool with a copy of nothing else: kOffloadLine); the public
// methods must be called on that thread too. The session keeps itself alive (shared_from_this) until on_done
// has run. Where the child runs is its runtime's business (runtime/child_runtime.hpp): the session
// gets three pipes, an end notification and kill_tree(), and never forks, waits or reaps itself.
//
// Errors: none thrown once start() is called; every failure (launch, protocol, budget, model) ends in
// the envelope's status and reason.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "protocol/envelope.hpp"
#include "protocol/framing.hpp"
#include "protocol/messages.hpp"
#include "offload/offload.hpp"
#include "records/scrub.hpp"
#include "runtime/child_runtime.hpp"
#include "web/brokered_tools.hpp"
#include "session/budget_meter.hpp"
#include "session/budgets.hpp"
#include "session/ending.hpp"
#include "records/events.hpp"
#include "models/model.hpp"
#include "policy/preset.hpp"

namespace supervisor {

struct ApprovalRequest {
  std::string child_id;
  std::string preset;
  std::string description;
  std::string tool;
  nlohmann::json args;
  std::string rule;  // why the policy said "ask"
};
// Answers one approval; call exactly once, on the io thread.
using ApprovalReply = std::function<void(bool allow, std::string reason)>;
using Approver = std::function<void(const ApprovalRequest&, ApprovalReply)>;

// Where a child is in its life. The hub reports queued, waiting_for_lock, running and done for its
// children (ChildInfo); a running child's progress says which part of running it is in.
enum class ChildState { queued, waiting_for_lock, starting, running, wrapping_up, finishing, done };
// "queued", "waiting_for_lock", "starting", "running", "wrapping_up", "finishing", "done"
const char* to_string(ChildState s) noexcept;

struct Progress {
  std::string id;
  ChildState state = ChildState::starting;
  std::uint64_t steps = 0, max_steps = 0;
  std::uint64_t tool_calls = 0, max_tool_calls = 0;
  std::uint64_t tokens = 0, max_tokens = 0;
  std::uint64_t elapsed_ms = 0;
};

// A writer's disk budget as the supervisor watches it (docs/writers.md, "Disk"): after each tool
// call and every second while the child runs, statfs(path); once fewer than floor_bytes are free
// the child is asked to wrap up (budget "disk"). For a size-capped worktree the floor is "nearly
// full"; for a write root on a shared filesystem it is the free space at the start less the budget.
struct DiskWatch {
  std::filesystem::path path;
  std::uint64_t floor_bytes = 0;
  std::string what;  // the reason's words: "the worktree's 1073745920-byte tmpfs is full"
};

struct SessionConfig {
  std::string id;
  std::shared_ptr<const Preset> preset;
  Budgets budgets;  // effective budgets (already tightened)
  std::string brief;
  std::string description;
  std::filesystem::path workspace;      // canonical
  bool allow_unsafe_workspace = false;  // "/", $HOME, /etc... (sandbox/workspace_guard.hpp)
  std::filesystem::path child_executable;
  std::vector<std::string> child_args;  // after argv[0]
  std::size_t max_line = protocol::kDefaultMaxLine;
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds exit_grace{2'000};  // after `final`, before the child is killed
  // How fast the child's long lines are taken while it runs: a token bucket of read_burst bytes
  // that refills at read_rate bytes a second (0: no limit), charged with every line of 4 KiB or
  // more (ChildSession::kRateChargedLine), every log line and 64 bytes a blank line, and given
  // back for a model request that starts a model call (the model paces those, the token budget
  // bounds them). Other short lines (tool requests and tool_done) are bounded by the tool-call
  // budget and answered one by one; their cost is per message, shared out by the
  // one-read-per-turn rule. Once the bucket is empty the child's pipe is not read until the
  // bucket holds 64 KiB again: what the child sends meanwhile waits there (its writes block:
  // push-back, nothing dropped), and its deadline keeps running. Every byte costs the supervisor
  // CPU (read, decoded, scrubbed, recorded): a child flooding tool requests of 900 KB kept both
  // CPUs busy and made a sibling's round trip p99 30 times longer (bench/README.md, Stop 49).
  // What is charged comes from the model's output (tool arguments) or the child's bookkeeping,
  // kilobytes a second in an honest run.
  std::size_t read_rate = 2u << 20;
  std::size_t read_burst = 4u << 20;
  std::chrono::milliseconds approval_timeout{300'000};
  Approver approver;  // empty: nobody can answer, so "ask" is denied at once
  std::shared_ptr<BrokeredTools> brokered;
  std::function<void(const std::string& line)> on_log;  // child stderr, prefixed [subagent:<id>]
  // Transcript / audit events, handed over (SessionRecords scrubs each in place).
  std::function<void(nlohmann::json&& event)> on_event;
  // Optional, set by SessionRecords with on_event: takes a tool decision's event whose "args" the
  // session already scrubbed with `scrubber` (a large request's, scrubbed off the loop with its
  // decoding), and scrubs the rest. Without it such events go to on_event.
  std::function<void(nlohmann::json&& event)> on_event_args_scrubbed;
  std::shared_ptr<const Scrubber> scrubber;
  // Optional, set by SessionRecords with on_event when its transcript is written behind (on the
  // store's writer thread). Called on the loop, it returns a wait for the transcript versions
  // queued so far (those holding the events recorded so far); the session runs that wait on a
  // worker thread, never on the loop, before it asks the parent a question and before it acts on
  // the answer (docs/transcripts.md: that version is on disk first).
  std::function<std::function<void()>()> wait_recorded;
  std::function<void(const Progress&)> on_progress;
  std::optional<DiskWatch> disk;  // writers: the disk budget
  // Where the child runs; null: this host's sandbox (local_runtime()).
  std::shared_ptr<ChildRuntime> runtime;
};

class ChildSession : public std::enable_shared_from_this<ChildSession> {
 public:
  using DoneHandler = std::function<void(const protocol::Envelope&)>;

  // Bounds on what a child's requests can make the supervisor hold, whatever its budgets say. Every
  // denial is recorded and audited and every request id is remembered, so a child flooding denied
  // requests would grow the audit log and the session without end: after this many denials its
  // next tool request ends it (protocol_error). Allowed calls are bounded by max_tool_calls.
  static constexpr std::uint64_t kMaxToolDenials = 1000;
  // At most this many of one child's "ask" requests wait for the parent at once; another is denied
  // at once (rule "ask: too many waiting"), so a child cannot flood the parent with questions.
  static constexpr std::size_t kMaxWaitingApprovals = 8;

  static std::shared_ptr<ChildSession> create(boost::asio::io_context& io, SessionConfig cfg,
                                              std::unique_ptr<ModelProvider> provider);
  ~ChildSession();

  // Launches the child. `on_done` runs exactly once, on the io thread, with the envelope.
  void start(DoneHandler on_done);
  // Cancels the child: its whole process tree is killed and the envelope says cancelled.
  void cancel(const std::string& reason);

  const std::string& id() const noexcept { return cfg_.id; }
  const SessionConfig& config() const noexcept { return cfg_; }
  Progress progress() const;
  bool done() const noexcept { return done_; }
  // How often the child's output was left unread for a while because it came faster than
  // SessionConfig::read_rate (for tests and diagnostics).
  std::size_t read_rate_pauses() const noexcept { return rate_pauses_; }

 private:
  enum class State { starting, handshake, running, wrapping_up, finishing, done };

  ChildSession(boost::asio::io_context& io, SessionConfig cfg, std::unique_ptr<ModelProvider> provider);

  // Reading the child's stdout: wait until it is readable, then read() until a read comes back
  // short (a pipe that gave less than was asked for is empty), so no read ever returns EAGAIN in
  // the normal case. Each chunk is decoded as it comes (consume); on_read_end reports the end.
  void do_read();
  void on_readable(boost::system::error_code ec);
  void consume(std::string_view chunk);
  void handle_frames();  // frames_, in order, until the session is finishing
  void on_read_end(boost::system::error_code ec);
  void do_read_stderr();
  // The runtime's answers: the child is queued or starting, it started (or could not), it ended.
  void on_runtime_state(RuntimeState s);
  void on_started(std::unique_ptr<RunningChild> child, const std::string& error);
  void on_end(const ChildEnd& end);
  void handle_frame(protocol::Frame& f);
  // A frame's message, decoded here or by the intake (below).
  void handle_decoded(protocol::Decoded<protocol::ChildMessage>& decoded);
  // The intake of a large line: decoded (and a tool request's arguments scrubbed for its event) on
  // a worker; the frames after it wait in held_frames_ and reading pauses until it is handled.
  void offload_frame(protocol::Frame& f);
  void on_intake_done();
  void handle(const protocol::Hello& m);
  void handle(const protocol::ModelRequest& m);
  void handle(protocol::ToolRequest& m);  // may take m.args (decide_tool)
  void handle(const protocol::ToolDone& m);
  void handle(const protocol::Final& m);
  void handle(const protocol::Log& m);
  void on_model_reply(const std::string& request_id, ModelReply reply);
  // A tool request the budgets let through: the preset's rules decide (allow, deny, or ask the approver).
  // The decision's event takes m.args when nothing after it reads them (a denial, or a tool the
  // child runs itself): one copy less per call.
  void decide_tool(protocol::ToolRequest& m);
  void record_decision(protocol::ToolRequest& m, const char* decision, const std::string& rule,
                       const std::string& reason, bool take_args);
  // Counts the call and lets it run: in the child, or here for a brokered tool.
  void allow_tool(const protocol::ToolRequest& req, const std::string& reason);
  void on_brokered_result(const std::string& id, bool ok, std::string content);
  // Puts an "ask" to the approver; the answer or the approval timeout, whichever is first, decides.
  void ask_approval(const protocol::ToolRequest& m, const std::string& why);
  void on_approval(const std::string& id, bool allow, std::string reason, const char* denied_rule);
  void on_approval_timeout(const std::string& id);
  // Runs `next` on the loop once every event emitted so far is on disk (cfg_.wait_recorded, waited
  // for on a worker), in the order asked; at once when there is nothing to wait for.
  void after_recorded(std::function<void()> next);
  void wait_recorded();
  // Writes at once when nothing is queued (most messages: no loop turn and no completion handler);
  // what the pipe does not take is queued, and queued lines go out together in one gathered write.
  void send(const protocol::SupervisorMessage& m);
  void do_write();
  void close_to_child();
  // A budget (or the clock: Budget::time with Status::timeout) is used up: the child is asked to wrap up.
  void begin_wrap_up(protocol::Status status, Budget budget, const std::string& why);
  // cfg_.disk: wraps the child up when its filesystem has fewer than floor_bytes free.
  void check_disk();
  void watch_disk();
  void fail(protocol::Status status, const std::string& reason);  // protocol errors, launch failures
  void kill_tree(const std::string& why);
  void maybe_finish();
  void start_failed(const std::string& why);
  // Ends a session that never ran a child: status failed with `reason`, finished on the next turn.
  void refuse_start(const std::string& reason);
  void finish();
  nlohmann::json tool_specs_for_child() const;
  // `args`: whether the event's "args" are scrubbed already (cfg_.on_event_args_scrubbed).
  void emit(nlohmann::json event, Scrubbed args = Scrubbed::no);
  // An "ask" nobody can take now, denied at once as `refused_as`: the reason is the rule's `why`,
  // "and `because`, so it is denied".
  void deny_ask(protocol::ToolRequest& m, const std::string& rule, const char* refused_as, const std::string& why,
                const std::string& because);
  // Refuses tool request `req`: counts it, lists it for the envelope and emits a "denial" event
  // (what run prints on stderr), then tells the child `told`.
  void deny_tool(const protocol::ToolRequest& req, const std::string& rule, const std::string& reason,
                 const std::string& told);
  void report_progress();
  std::uint64_t elapsed_ms() const;

  boost::asio::io_context& io_;
  SessionConfig cfg_;
  std::unique_ptr<ModelProvider> provider_;
  DoneHandler on_done_;
  State state_ = State::starting;
  std::chrono::steady_clock::time_point started_;

  std::shared_ptr<ChildRuntime> runtime_;
  std::unique_ptr<PendingStart> starting_;  // between start() and on_started()
  RuntimeState runtime_state_ = RuntimeState::starting;
  // The child, once started: destroying it before it ended kills its tree and reaps it.
  std::unique_ptr<RunningChild> child_;
  boost::asio::posix::stream_descriptor to_child_, from_child_, child_err_;
  std::array<char, 65536> read_buf_{};
  std::array<char, 8192> err_buf_{};
  protocol::LineReader reader_;
  std::vector<protocol::Frame> frames_;  // reused for every chunk read
  protocol::LineReader err_reader_{4096};
  std::size_t stderr_logged_ = 0;
  std::deque<std::string> write_queue_;
  bool writing_ = false;

  // A line of at least kOffloadLine bytes is decoded on a worker thread (with its tool request's
  // arguments scrubbed for the decision's event), so one child's large lines do not hold up the
  // loop for the others. Meanwhile this child is not read (its pipe fills and its writes block:
  // push-back, nothing dropped) and the frames read after that line wait in held_frames_, in order.
  static constexpr std::size_t kOffloadLine = 64 * 1024;
  // At most this much of one child's output (one read) per turn of the loop; then the others get
  // theirs, so a child writing without pause delays another's answer by one read at most.
  static constexpr std::size_t kReadPerTurn = 65536;
  bool intake_busy_ = false;
  bool read_paused_ = false;  // do_read() is due once the intake is done
  // The read rate (SessionConfig::read_rate): the bucket, when it was last filled, and the timer
  // that resumes reading once it holds kResumeBytes again.
  static constexpr double kResumeBytes = 65536;
  static constexpr std::size_t kRateChargedLine = 4096;
  static constexpr double kBlankLineCharge = 64;  // a 64 KiB read of blank lines costs 4 MiB
  double read_tokens_ = 0;
  double model_request_charge_ = 0;  // the last line's charge, when it was a model request
  std::chrono::steady_clock::time_point read_filled_{};
  bool rate_paused_ = false;
  std::size_t rate_pauses_ = 0;
  boost::asio::steady_timer rate_timer_;
  bool over_read_rate();  // refills the bucket; true (and a resume scheduled) when it is empty
  void resume_after_rate();
  void charge_read_rate(std::size_t bytes, const protocol::Decoded<protocol::ChildMessage>& decoded);
  std::deque<protocol::Frame> held_frames_;
  std::optional<nlohmann::json> args_scrubbed_;  // the intake's, for the decision's event
  OffloadGroup intake_;

  boost::asio::steady_timer deadline_;             // the wall-clock budget
  boost::asio::steady_timer grace_;                // the wrap-up grace, once a budget is used up
  boost::asio::steady_timer handshake_;            // hello must come within handshake_timeout
  boost::asio::steady_timer stdout_closed_timer_;  // stdout closed: the child must exit within exit_grace
  boost::asio::steady_timer after_final_timer_;    // final sent: the child must exit within exit_grace
  boost::asio::steady_timer drain_timer_;          // exited: its pipes get a moment to drain
  boost::asio::steady_timer disk_timer_;           // cfg_.disk: the once-a-second check

  // What happened, for the envelope.
  Ending ending_;  // status, budget and reason: every way the child ends goes through it
  std::optional<protocol::Final> final_;
  bool exited_ = false;
  bool stdout_eof_ = false;
  bool killed_ = false;
  bool done_ = false;
  protocol::ChildExit exit_;
  std::vector<std::string> layers_applied_, layers_missing_;

  // Budgets in use.
  BudgetMeter meter_;
  std::uint64_t tools_denied_ = 0;
  protocol::DenialList denials_;  // the envelope's denials (capped); tools_denied_ counts them all
  std::map<std::string, std::uint64_t> tools_used_;
  std::optional<std::string> model_in_flight_;
  std::string model_failed_;  // the last model call's error, until a call succeeds
  bool wrap_turn_used_ = false;
  bool no_wrap_turn_ = false;  // the wrap-up turn was refused: no budget was left for it
  InputEstimator estimator_;
  InputEstimator::Request pending_shape_;       // of the call in flight
  Budget pending_cap_budget_ = Budget::tokens;  // which budget set its output cap (tokens or cost)
  std::uint64_t pending_max_tokens_ = 0;        // and that cap
  std::uint64_t pending_estimate_ = 0;
  bool last_cut_ = false;  // the last completed model turn was cut by the token cap
  std::string cut_text_;
  std::map<std::string, std::string> pending_tools_;  // request id -> tool, allowed and not yet done
  std::vector<std::size_t> recorded_messages_;        // hashes of the history already in the transcript
  std::unordered_set<std::size_t> used_ids_;          // hashes of every request id the child used (unique per session)
  struct PendingApproval {
    protocol::ToolRequest request;
    std::string why;                  // the rule's reason for asking
    boost::asio::steady_timer timer;  // the approval timeout
  };
  std::map<std::string, std::unique_ptr<PendingApproval>> approvals_;  // request id -> unanswered ask
  struct AfterRecorded {
    std::function<void()> wait;  // on a worker: the versions queued when it was asked for
    std::function<void()> next;  // on the loop, once `wait` returned
  };
  std::deque<AfterRecorded> after_recorded_;  // in the order asked; the front one's wait runs
  bool recorded_wait_ = false;                // a wait runs on a worker
  OffloadGroup records_wait_;
};

// A fresh child id: 12 lowercase hex characters from the kernel's random source.
std::string new_child_id();

}  // namespace supervisor
