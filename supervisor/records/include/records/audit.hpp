// The audit log: one JSON line per spawn, tool decision, approval, budget event, kill and envelope, each
// naming the child, its preset and the parent that asked, with an RFC 3339 UTC time. Lines are scrubbed
// and appended with O_APPEND in a single write(2) each, so concurrent supervisors sharing the file never
// interleave within a line. Line format and jq recipes: docs/transcripts.md.
//
// Threading: record() may be called from any thread (one write per line, no shared buffer).
//
// Errors: never thrown from recording: record() returns the error naming the file, and the session goes
// on.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "records/events.hpp"
#include "records/scrub.hpp"

namespace supervisor {

// default_transcript_dir()/audit.jsonl: next to the transcripts.
std::filesystem::path default_audit_file();

struct AuditOptions {
  std::filesystem::path file;           // empty: default_audit_file(); parent created mode 0700, file 0600
  std::size_t max_string_bytes = 2048;  // per string, cut after scrubbing (tool arguments can be large)
  std::size_t max_line_bytes = 60 * 1024;
};

struct AuditContext {
  std::string child;
  std::string preset;
  std::string parent;
};

class AuditLog {
 public:
  AuditLog(AuditOptions options, std::shared_ptr<const Scrubber> scrubber);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Whether events of this kind (spawn, tool_decision, ...) go to the audit log.
  static bool audited(std::optional<EventKind> kind) noexcept;

  // The line that would be written for a session event, or null for an event that is not audited.
  // `already`: the event was scrubbed whole by this log's scrubber, so its long strings are cut
  // while copied (the line is still scrubbed: `who` is not).
  nlohmann::json line_for(const nlohmann::json& event, const AuditContext& who, Scrubbed already = Scrubbed::no) const;

  // Appends the line for a session event (others are ignored). Returns "" or an error naming the file.
  // Never throws.
  std::string record(const nlohmann::json& event, const AuditContext& who, Scrubbed already = Scrubbed::no) noexcept;

  const std::filesystem::path& file() const noexcept { return file_; }
  const std::shared_ptr<const Scrubber>& scrubber() const noexcept { return scrubber_; }

 private:
  std::string append(const std::string& line) noexcept;

  AuditOptions options_;
  std::shared_ptr<const Scrubber> scrubber_;
  std::filesystem::path file_;
  std::mutex mu_;  // guards fd_ (opened lazily, reopened after an error)
  int fd_ = -1;
};

}  // namespace supervisor
