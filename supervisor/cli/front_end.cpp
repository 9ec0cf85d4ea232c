#include "cli/front_end.hpp"

#include "sandbox/workspace_guard.hpp"
#include "cli/install_layout.hpp"
#include "models/model.hpp"
#include "web/research.hpp"
#include "records/scrub.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;

const char* const kFrontEndFlagsHelp =
    R"(  --model SPEC             default model for spawns that name none (e.g. replay:FILE)
  --workspace DIR          default workspace for spawns that name none (default: the current directory)
  --allow-unsafe-workspace let "/", the home directory itself, a system directory (/etc, /usr, ...)
                           or a credential directory (~/.ssh, ~/.aws, ~/.config, ...) be a workspace
                           (refused by default; see policies/README.md)
  --policy-dir DIR         where presets are read from
  --child PATH             the child program (default: the subagent-child installed with this executable)
  --child-arg ARG          an argument for the child program (repeatable)
  --max-concurrent N       children running at once (default 8, at most 64)
  --max-per-turn N         children started per parent turn (default 24, at most 256)
  --approval-timeout DUR   an unanswered approval is denied after this long (default 5m)
  --state-dir DIR          worktrees and patches (default $XDG_STATE_HOME/subagent-supervisor)
  --lock-dir DIR           workspace locks (shared by every supervisor of this user)
  --max-line BYTES         longest request line accepted (default 4194304)
  --transcript-dir DIR     where transcripts go (default $XDG_STATE_HOME/subagent-supervisor/transcripts)
  --keep-transcripts N     newest transcripts kept (default 200)
  --no-transcript          keep no transcripts
  --audit-log FILE         the audit log (default: audit.jsonl in the transcript directory)
  --redact VALUE           a value to scrub from every output, besides the built-in patterns (repeatable)
  --search-endpoint URL    SearxNG-compatible JSON search for research children's web_search
)";

void attach_records(HubConfig& hc, const RecordOptions& o) {
  ScrubOptions scrub_options;
  scrub_options.literals = o.redact;
  auto scrubber = std::make_shared<const Scrubber>(scrub_options);
  hc.transcripts = nullptr;
  if (!o.no_transcript) {
    TranscriptOptions t;
    t.dir = o.transcript_dir;
    t.keep = o.keep_transcripts;
    t.background = true;  // the loop never waits for the disk (records/transcript.hpp)
    hc.transcripts = std::make_shared<TranscriptStore>(t, scrubber);
  }
  hc.audit = std::make_shared<AuditLog>(AuditOptions{!o.audit_file.empty() ? fs::path(o.audit_file)
                                                     : hc.transcripts      ? hc.transcripts->dir() / "audit.jsonl"
                                                                           : default_audit_file()},
                                        scrubber);
}

FrontEndOptions::FrontEndOptions() {
  base.workspaces = default_workspace_config();
  base.search_endpoint = default_search_endpoint();
}

bool parse_front_end_flag(Args& args, const std::string& f, FrontEndOptions& o) {
  if (f == "--model")
    o.base.default_model = args.value(f);
  else if (f == "--workspace")
    o.default_workspace = fs::absolute(args.value(f));
  else if (f == "--policy-dir")
    o.policy_dir = args.value(f);
  else if (f == "--allow-unsafe-workspace")
    o.base.allow_unsafe_workspace = true;
  else if (f == "--child")
    o.child = args.value(f);
  else if (f == "--child-arg")
    o.base.child_args.push_back(args.value(f));
  else if (f == "--max-concurrent")
    o.base.max_concurrent = args.number(f);
  else if (f == "--max-per-turn")
    o.base.max_per_turn = args.number(f);
  else if (f == "--approval-timeout") {
    try {
      o.base.approval_timeout = parse_duration(args.value(f));
    } catch (const std::invalid_argument& e) {
      throw UsageError(f + ": " + e.what());
    }
  } else if (f == "--state-dir")
    o.base.workspaces.state_dir = fs::absolute(args.value(f));
  else if (f == "--lock-dir")
    o.base.workspaces.lock_dir = fs::absolute(args.value(f));
  else if (f == "--max-line")
    o.max_line = args.number(f);
  else if (f == "--transcript-dir")
    o.records.transcript_dir = args.value(f);
  else if (f == "--keep-transcripts")
    o.records.keep_transcripts = args.number(f);
  else if (f == "--no-transcript")
    o.records.no_transcript = true;
  else if (f == "--audit-log")
    o.records.audit_file = args.value(f);
  else if (f == "--redact")
    o.records.redact.push_back(args.value(f));
  else if (f == "--search-endpoint")
    o.base.search_endpoint = args.value(f);
  else
    return false;
  return true;
}

void finish_front_end(FrontEndOptions& o, const char* command) {
  HubConfig& b = o.base;
  if (b.max_concurrent == 0 || b.max_concurrent > kMaxConcurrentCeiling)
    throw UsageError("--max-concurrent must be 1.." + std::to_string(kMaxConcurrentCeiling));
  if (b.max_per_turn == 0 || b.max_per_turn > kMaxPerTurnCeiling)
    throw UsageError("--max-per-turn must be 1.." + std::to_string(kMaxPerTurnCeiling));
  if (o.max_line < 1024) throw UsageError("--max-line must be at least 1024");
  std::error_code ec;
  if (!fs::is_directory(o.default_workspace, ec))
    throw UsageError("--workspace: '" + o.default_workspace.string() + "' is not an existing directory");
  if (!b.allow_unsafe_workspace) {
    try {
      sandbox::check_workspace(o.default_workspace, "--workspace");
    } catch (const sandbox::UnsafeWorkspaceError& e) {
      throw UsageError(e.what());
    }
  }
  if (!b.default_model.empty()) validate_model_spec(b.default_model);
  b.policy_dir = o.policy_dir.empty() ? default_policy_dir() : fs::path(o.policy_dir);
  attach_records(b, o.records);
  b.child_executable = o.child.empty() ? default_child_executable() : fs::absolute(o.child);
  register_supervisor(b, command);  // before the loop runs: recovery may run git
}

}  // namespace supervisor::cli
