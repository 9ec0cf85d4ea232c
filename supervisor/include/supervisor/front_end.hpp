// Options and setup shared by the parent-facing front ends (`serve` and `mcp`): both put a Hub on
// the io_context and differ only in the wire protocol they speak to the parent.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "supervisor/cli.hpp"
#include "supervisor/hub.hpp"
#include "supervisor/parent_io.hpp"

namespace supervisor::cli {

struct FrontEndOptions {
  HubConfig base;  // finished by finish_front_end()
  std::filesystem::path default_workspace = std::filesystem::current_path();
  std::size_t max_line = 4u << 20;
  std::string policy_dir, child, transcript_dir, audit_file;
  std::uint64_t keep_transcripts = 200;
  bool no_transcript = false;
  std::vector<std::string> redact;

  FrontEndOptions();
};

// The help text for the flags parse_front_end_flag() understands.
extern const char* const kFrontEndFlagsHelp;

// Consumes `flag` (and its value) when it is one of the shared flags; false when it is not.
bool parse_front_end_flag(Args& args, const std::string& flag, FrontEndOptions& o);

// Checks the values (throws UsageError naming the flag) and completes `o.base`: policy directory,
// transcripts, audit log, child executable.
void finish_front_end(FrontEndOptions& o);

struct ParentLoop {
  std::function<void(const nlohmann::json&)> on_message;
  std::function<void(const std::string& error)> on_bad_line;  // not JSON, not UTF-8, too long
  std::function<void(const std::string& why)> on_end;         // end of input, SIGINT, SIGTERM
  std::string eof_reason = "the parent closed its input";
  std::function<void()> on_eof;  // when set, end of input calls this instead of on_end (serve --drain)
};

// Serves one parent on stdin/stdout: creates `parent` (so handlers can send through it), then runs
// `io` until it is stopped, as end_front_end() does.
void run_parent_loop(boost::asio::io_context& io, std::shared_ptr<ParentIo>& parent, std::size_t max_line,
                     ParentLoop loop);

// Ends a front end: cancels every child (when there is a hub; each envelope is still delivered),
// writes out what is queued for the parent, then stops `io`.
void end_front_end(boost::asio::io_context& io, Hub* hub, const std::shared_ptr<ParentIo>& parent, const std::string& why);

}  // namespace supervisor::cli
