// The command-line flags shared by the parent-facing front ends (`serve` and `mcp`): both put the
// operations layer on an io_context (frontends/operations.hpp) and differ only in the wire protocol
// they speak to the parent; `run` shares the record flags. Errors: a bad flag throws UsageError naming it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli.hpp"
#include "scheduling/hub.hpp"

namespace supervisor::cli {

// Where a supervisor keeps its records (--transcript-dir, --keep-transcripts, --no-transcript,
// --audit-log, --redact), the same flags for run, serve and mcp.
struct RecordOptions {
  std::string transcript_dir, audit_file;
  std::uint64_t keep_transcripts = 200;
  bool no_transcript = false;
  std::vector<std::string> redact;
};

// Sets hc.transcripts (unless no_transcript) and hc.audit, both scrubbing with the built-in
// patterns and `o.redact`; transcripts are written off the loop (records/transcript.hpp).
void attach_records(HubConfig& hc, const RecordOptions& o);

struct FrontEndOptions {
  HubConfig base;  // finished by finish_front_end()
  std::filesystem::path default_workspace = std::filesystem::current_path();
  std::size_t max_line = 4u << 20;
  std::string policy_dir, child;
  RecordOptions records;

  FrontEndOptions();
};

// The help text for the flags parse_front_end_flag() understands.
extern const char* const kFrontEndFlagsHelp;

// Consumes `flag` (and its value) when it is one of the shared flags; false when it is not.
bool parse_front_end_flag(Args& args, const std::string& flag, FrontEndOptions& o);

// Checks the values (throws UsageError naming the flag) and completes `o.base`: policy directory,
// transcripts, audit log, child executable.
// `command` ("serve", "mcp") names it in the crash-recovery registry (register_supervisor).
void finish_front_end(FrontEndOptions& o, const char* command = "serve");

// recover_at_start(), then hc.registry: this process's crash-recovery registry (a warning on
// stderr when it cannot be made; the supervisor runs on without one).
void register_supervisor(HubConfig& hc, const std::string& command);

}  // namespace supervisor::cli
