// `subagent-supervisor run`: one child, one envelope on stdout.
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <deque>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "sandbox/launch.hpp"
#include "sandbox/workspace_guard.hpp"
#include "records/terminal.hpp"
#include "session/budgets.hpp"
#include "records/audit.hpp"
#include "cli/cli.hpp"
#include "cli/front_end.hpp"
#include "frontends/operations.hpp"
#include "cli/install_layout.hpp"
#include "records/scrub.hpp"
#include "web/research.hpp"
#include "session/session.hpp"
#include "session/session_records.hpp"
#include "records/transcript.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kRunHelp = R"(usage: subagent-supervisor run --preset NAME --workspace DIR --brief TEXT [options]

Runs one child agent under its preset's sandbox and prints one result envelope (JSON) on stdout.

Required:
  --preset NAME            preset from the policy directory (explore, ...), or a path to a policy file
  --workspace DIR          the directory the child works in (must exist; "/", the home directory
                           itself, system directories such as /etc or /usr and credential
                           directories such as ~/.ssh, ~/.aws or ~/.config are refused unless
                           --allow-unsafe-workspace is given)
  --brief TEXT             the child's task; --brief-file FILE reads it from a file ("-" for stdin)
  --model SPEC             the model: openai:MODEL, anthropic:MODEL, a provider named in the model
                           config, or replay:FILE (a JSONL script of assistant turns); see docs/models.md

Options:
  --description TEXT       a short label for the parent's records (shown in approvals and envelopes)
  --max-steps N            model turns (default: the preset's, 100)
  --max-tool-calls N       tool calls (default: the preset's, 200)
  --max-tokens N           input + output tokens (default: the preset's, 1,000,000)
  --max-thinking-tokens N  reasoning tokens (default: the preset's)
  --max-cost-usd X         estimated spend in US dollars at the model config's prices (default: none)
  --timeout DURATION       wall clock, e.g. 90s, 5m, 1h (default: the preset's, 30m)
  --wrap-up-grace DURATION time the child gets to report after wrap_up (default: the preset's, 10s)
  --max-disk-bytes N       bytes a writer may add to disk (default: the preset's writes.max_disk_bytes)
  --summary-bytes N        cap on the envelope's summary (default: the preset's, 2000)
  --answer-bytes N         cap on the envelope's answer (default: the preset's, 48000)
  --policy-dir DIR         where presets are read from (default: $SUBAGENT_POLICY_DIR or the installed policies/)
  --child PATH             the child program (default: the subagent-child installed with this executable); any
                           program that speaks protocol v1 (protocol/README.md) works
  --child-arg ARG          an argument for the child program (repeatable)
  --max-line BYTES         longest protocol line accepted from the child (default 1048576)
  --handshake-timeout DUR  how long the child may take to say hello (default 10s)
  --quiet                  no progress on stderr
  --transcript-dir DIR     where transcripts go (default: $XDG_STATE_HOME/subagent-supervisor/transcripts)
  --keep-transcripts N     newest transcripts kept in that directory (default 200; 0 keeps all)
  --no-transcript          keep no transcript (the envelope's transcript is null)
  --audit-log FILE         the audit log (default: audit.jsonl in the transcript directory)
  --redact VALUE           a value to scrub from every output, besides the built-in patterns (repeatable)
  --redact-file FILE       values to scrub, one per line
  --parent NAME            who is asking, for the audit log (default: cli)
  --search-endpoint URL    SearxNG-compatible JSON search for web_search (default $SUBAGENT_SEARCH_ENDPOINT)
  --state-dir DIR          worktrees and patches (default $SUBAGENT_STATE_DIR, else $XDG_STATE_HOME/subagent-supervisor)
  --lock-dir DIR           workspace locks (shared by every supervisor of this user)
  -h, --help               this text

Limits may only tighten the preset's: asking for more is refused before anything starts.
Workspace modes hold as in serve and mcp: a worker takes the workspace lock (waiting, with a line on
stderr, while another writer holds it or a directory above or below it; the wait counts against
--timeout); an implementation child works in an isolated worktree and the envelope's
artifacts.patch names the reviewed patch for `subagent-supervisor apply ID`.
Approvals: when stdin and stderr are a terminal, a tool call the policy marks "ask" is put to you on
the terminal (y/N); without a terminal nobody can answer, so it is denied at once.
Progress (steps, tool calls, tokens, elapsed) goes to stderr when stderr is a terminal; the child's
stderr lines go to stderr prefixed [subagent:<id>]. Every tool call the supervisor refuses gets one
line of its own, "subagent-supervisor run: [subagent:<id>] denied TOOL (RULE): REASON" (a child's
lines never start that way), and is listed in the envelope's denials.

)";

std::string read_all(const std::string& path) {
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--brief-file: cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::uint64_t ms_of(const std::string& flag, const std::string& text) {
  try {
    return static_cast<std::uint64_t>(parse_duration(text).count());
  } catch (const std::invalid_argument& e) {
    throw UsageError(flag + ": " + e.what());
  }
}

double usd_of(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v > 0) || v > 1e9)
    throw UsageError(flag + " takes a positive number of US dollars (e.g. 0.50), not '" + text + "'");
  return v;
}

// `run` on a terminal asks on the terminal: one question at a time, answered by a line on /dev/tty.
class TerminalApprover {
 public:
  TerminalApprover(boost::asio::io_context& io, int tty) : tty_(io, tty) {}
  void ask(const ApprovalRequest& r, ApprovalReply reply) {
    // The tool and its arguments are the model's; the description is the parent's.
    print_for_terminal(stderr, "\n[subagent:%s] %s%s%s asks to run %s %s\n  (%s)\n  allow? [y/N] ", r.child_id.c_str(),
                       r.preset.c_str(), r.description.empty() ? "" : ": ",
                       escape_for_terminal(r.description, false).c_str(), escape_for_terminal(r.tool, false).c_str(),
                       r.args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str(), r.rule.c_str());
    std::fflush(stderr);
    waiting_.push_back(std::move(reply));
    if (waiting_.size() == 1) read();
  }

 private:
  void read() {
    boost::asio::async_read_until(tty_, boost::asio::dynamic_buffer(line_), '\n',
                                  [this](boost::system::error_code ec, std::size_t n) {
                                    if (waiting_.empty()) return;
                                    bool yes = !ec && n > 0 && (line_[0] == 'y' || line_[0] == 'Y');
                                    if (!ec) line_.erase(0, n);
                                    ApprovalReply reply = std::move(waiting_.front());
                                    waiting_.pop_front();
                                    reply(yes, yes ? "approved on the terminal" : "denied on the terminal");
                                    if (!ec && !waiting_.empty()) read();
                                  });
  }
  boost::asio::posix::stream_descriptor tty_;
  std::string line_;
  std::deque<ApprovalReply> waiting_;
};

// Lines `run` prints for refused tool calls before it only counts them (a child that keeps asking
// while it wraps up must not flood the terminal).
constexpr std::uint64_t kMaxDenialLines = 256;

std::string human(std::uint64_t n) {
  char buf[32];
  if (n >= 1'000'000)
    std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) / 1e6);
  else if (n >= 10'000)
    std::snprintf(buf, sizeof buf, "%.1fk", static_cast<double>(n) / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

int cmd_run(Args args) {
  std::string preset_name, workspace, brief, description, model, policy_dir, child;
  std::string parent = "cli", search_endpoint = default_search_endpoint();
  std::string state_dir, lock_dir;
  RecordOptions records;
  bool allow_unsafe_workspace = false;
  std::vector<std::string> child_args;
  bool have_brief = false, quiet = false;
  BudgetOverrides o;
  std::optional<std::uint64_t> max_disk_bytes;
  std::size_t max_line = protocol::kDefaultMaxLine;
  std::uint64_t handshake_ms = 10'000;
  try {
    while (auto a = args.next()) {
      const std::string& f = *a;
      if (f == "-h" || f == "--help") {
        std::fputs(kRunHelp, stdout);
        std::fputs("\n", stdout);
        std::fputs(kExitStatusTable, stdout);
        return 0;
      } else if (f == "--preset")
        preset_name = args.value(f);
      else if (f == "--workspace")
        workspace = args.value(f);
      else if (f == "--allow-unsafe-workspace")
        allow_unsafe_workspace = true;
      else if (f == "--brief")
        brief = args.value(f), have_brief = true;
      else if (f == "--brief-file")
        brief = read_all(args.value(f)), have_brief = true;
      else if (f == "--description")
        description = args.value(f);
      else if (f == "--model")
        model = args.value(f);
      else if (f == "--max-steps")
        o.max_steps = args.number(f);
      else if (f == "--max-tool-calls")
        o.max_tool_calls = args.number(f);
      else if (f == "--max-tokens")
        o.max_tokens = args.number(f);
      else if (f == "--max-thinking-tokens")
        o.max_thinking_tokens = args.number(f);
      else if (f == "--max-cost-usd")
        o.max_cost_usd = usd_of(f, args.value(f));
      else if (f == "--timeout")
        o.timeout_ms = ms_of(f, args.value(f));
      else if (f == "--wrap-up-grace")
        o.wrap_up_grace_ms = ms_of(f, args.value(f));
      else if (f == "--max-disk-bytes")
        max_disk_bytes = args.number(f);
      else if (f == "--summary-bytes")
        o.summary_bytes = args.number(f);
      else if (f == "--answer-bytes")
        o.answer_bytes = args.number(f);
      else if (f == "--policy-dir")
        policy_dir = args.value(f);
      else if (f == "--child")
        child = args.value(f);
      else if (f == "--child-arg")
        child_args.push_back(args.value(f));
      else if (f == "--max-line")
        max_line = args.number(f);
      else if (f == "--handshake-timeout")
        handshake_ms = ms_of(f, args.value(f));
      else if (f == "--quiet")
        quiet = true;
      else if (f == "--transcript-dir")
        records.transcript_dir = args.value(f);
      else if (f == "--keep-transcripts")
        records.keep_transcripts = args.number(f);
      else if (f == "--no-transcript")
        records.no_transcript = true;
      else if (f == "--audit-log")
        records.audit_file = args.value(f);
      else if (f == "--redact")
        records.redact.push_back(args.value(f));
      else if (f == "--redact-file") {
        try {
          for (auto& v : load_redact_file(args.value(f))) records.redact.push_back(std::move(v));
        } catch (const std::runtime_error& e) {
          throw UsageError(std::string("--redact-file: ") + e.what());
        }
      } else if (f == "--parent")
        parent = args.value(f);
      else if (f == "--search-endpoint")
        search_endpoint = args.value(f);
      else if (f == "--state-dir")
        state_dir = args.value(f);
      else if (f == "--lock-dir")
        lock_dir = args.value(f);
      else
        throw UsageError("unknown option '" + f + "' (see run --help)");
    }
    if (preset_name.empty()) throw UsageError("--preset is required (see run --help)");
    if (workspace.empty()) throw UsageError("--workspace is required");
    if (!have_brief || brief.empty()) throw UsageError("--brief (or --brief-file) is required and may not be empty");
    if (model.empty()) throw UsageError("--model is required, e.g. --model replay:examples/explore-demo.jsonl");
    if (max_line < 1024) throw UsageError("--max-line must be at least 1024");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
    return kUsageError;
  }

  // Checked here so that errors name the command line's flags; the hub checks the same again.
  fs::path ws, child_executable;
  std::shared_ptr<Preset> preset;
  const fs::path policies = policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir);
  try {
    preset = std::make_shared<Preset>(load_preset_or_usage(preset_name, policies, load_preset));
    (void)tighten(preset->budgets, o, "the preset " + preset->name);
    std::error_code ec;
    ws = fs::canonical(workspace, ec);
    if (ec || !fs::is_directory(ws)) throw UsageError("workspace '" + workspace + "' is not an existing directory");
    if (!allow_unsafe_workspace) sandbox::check_workspace(workspace, "workspace");
    try {
      validate_model_spec(model);
    } catch (const std::exception& e) {
      throw UsageError(std::string("--model: ") + e.what());
    }
    child_executable = child.empty() ? default_child_executable() : fs::absolute(child);
    if (::access(child_executable.c_str(), X_OK) != 0)
      throw SetupError("child program '" + child_executable.string() + "' is not an executable file");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
    return kUsageError;
  } catch (const SetupError& e) {
    std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
    return kSetupError;
  } catch (const WideningError& e) {
    std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
    return kUsageError;
  } catch (const sandbox::UnsafeWorkspaceError& e) {
    std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
    return kSetupError;
  }

  // One child through the operations layer (frontends/operations.hpp), the same path as serve's and
  // mcp's spawns: the workspace lock for writers, an isolated worktree and a reviewed patch for
  // implementation children.
  boost::asio::io_context io;
  HubConfig hc;
  hc.policy_dir = policies;
  hc.child_executable = child_executable;
  hc.child_args = child_args;
  hc.max_concurrent = 1;
  hc.max_per_turn = 1;
  hc.allow_unsafe_workspace = allow_unsafe_workspace;
  hc.default_model = model;
  hc.parent = parent;
  hc.workspaces = default_workspace_config();
  if (!state_dir.empty()) hc.workspaces.state_dir = fs::absolute(state_dir);
  if (!lock_dir.empty()) hc.workspaces.lock_dir = fs::absolute(lock_dir);
  hc.search_endpoint = search_endpoint;
  hc.max_line = max_line;
  hc.handshake_timeout = std::chrono::milliseconds(handshake_ms);
  const bool tty = !quiet && ::isatty(STDERR_FILENO);
  bool progress_shown = false;
  hc.on_log = [&](const std::string& line) {
    if (progress_shown) std::fputs("\r\033[K", stderr);
    progress_shown = false;
    std::fprintf(stderr, "%s\n", escape_for_terminal(line, false).c_str());  // already escaped, tty or not
  };
  // Every refused tool call gets one line, printed by the supervisor itself. Its "subagent-supervisor
  // run:" marker is one no relayed child line can carry: each of those starts "[subagent:ID] ", is cut
  // at its newline and has its carriage returns escaped, so a child can only ever print the same words
  // after its own prefix. Tool names and reasons are the model's text: escaped, tty or not.
  std::uint64_t denial_lines = 0;
  hc.on_event = [&](const nlohmann::json& ev) {
    if (event_kind(ev) != EventKind::denial) return;
    if (++denial_lines > kMaxDenialLines) return;
    if (progress_shown) std::fputs("\r\033[K", stderr);
    progress_shown = false;
    auto field = [&](const char* k) { return escape_for_terminal(ev.value(k, std::string()), false); };
    std::fprintf(stderr, "subagent-supervisor run: [subagent:%s] denied %s (%s): %s\n", field("child").c_str(),
                 field("tool").c_str(), field("rule").c_str(), field("reason").c_str());
    if (denial_lines == kMaxDenialLines)
      std::fprintf(stderr,
                   "subagent-supervisor run: [subagent:%s] (more denials are not shown; the envelope's "
                   "tools_denied counts them all)\n",
                   field("child").c_str());
  };
  hc.on_waiting = [&](const std::string& id, const std::string& why) {
    if (quiet) return;
    std::fprintf(stderr, "[subagent:%s] waiting: %s\n", id.c_str(), escape_for_terminal(why, false).c_str());
  };
  // Everything below reaches stderr, stdout or the disk scrubbed (docs/transcripts.md).
  attach_records(hc, records);
  register_supervisor(hc, "run");
  if (tty) {
    hc.on_progress = [&](const Progress& p) {
      std::fprintf(stderr, "\r\033[K[subagent:%s] %s · step %llu/%llu · tools %llu/%llu · tokens %s/%s · %.1fs",
                   p.id.c_str(), to_string(p.state), (unsigned long long)p.steps, (unsigned long long)p.max_steps,
                   (unsigned long long)p.tool_calls, (unsigned long long)p.max_tool_calls, human(p.tokens).c_str(),
                   human(p.max_tokens).c_str(), static_cast<double>(p.elapsed_ms) / 1000.0);
      progress_shown = true;
    };
  }

  std::unique_ptr<TerminalApprover> terminal;
  std::unique_ptr<Operations> ops;
  Operations::AskParent ask;
  if (::isatty(STDIN_FILENO) && ::isatty(STDERR_FILENO)) {
    int tty_fd = ::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tty_fd >= 0) {
      terminal = std::make_unique<TerminalApprover>(io, tty_fd);
      ask = [&terminal, &ops](const std::string& approval_id, const ApprovalRequest& r) {
        terminal->ask(r,
                      [&ops, approval_id](bool yes, const std::string& why) { ops->approve(approval_id, yes, why); });
      };
    }
  }
  // Without a terminal nobody can answer: "ask" is denied at once (`ask` stays empty).
  ops = std::make_unique<Operations>(io, hc, std::move(ask));
  SpawnRequest req;
  req.preset = preset_name;
  req.brief = brief;
  req.description = description;
  req.workspace = ws;
  req.model = model;
  req.limits = o;
  req.max_disk_bytes = max_disk_bytes;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  int status = 1;
  std::string id;
  bool finished = false;
  // The checks run on a worker; the answer comes on the loop, before or after the envelope (a child
  // refused before it started ends first).
  int refused = 0;
  ops->spawn(
      req,
      [&](const Operations::SpawnAnswer& a) {
        if (!a.error) {
          id = a.spawned->child_id;
          if (finished) return;
          signals.async_wait([&](boost::system::error_code ec, int sig) {
            if (!ec) ops->cancel(id, sig == SIGINT ? "the supervisor got SIGINT" : "the supervisor got SIGTERM");
          });
          return;
        }
        try {
          std::rethrow_exception(a.error);
        } catch (const WideningError& e) {
          std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
          refused = kUsageError;
        } catch (const std::exception& e) {  // nothing was started: the workspace, the model, the preset
          std::fprintf(stderr, "subagent-supervisor run: %s\n", e.what());
          refused = kSetupError;
        }
      },
      [&](const protocol::Envelope& e) {
        finished = true;
        if (progress_shown) std::fputs("\n", stderr);
        std::string out = protocol::to_json(e).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
        write_for_terminal(stdout, out);  // the summary and details are the model's text
        std::fputc('\n', stdout);
        std::fflush(stdout);
        status = protocol::exit_code_for(e.status);
        signals.cancel();
      });
  io.run();
  if (refused != 0) return refused;
  return status;
}

}  // namespace supervisor::cli
