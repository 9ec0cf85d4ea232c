// The audit log: scrubbed JSON lines, one write(2) each on an O_APPEND descriptor.
#include "records/audit.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "protocol/envelope.hpp"
#include "records/transcript.hpp"

namespace supervisor {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path default_audit_file() { return default_transcript_dir() / "audit.jsonl"; }

AuditLog::AuditLog(AuditOptions options, std::shared_ptr<const Scrubber> scrubber)
    : options_(std::move(options)), scrubber_(scrubber ? std::move(scrubber) : default_scrubber()) {
  std::error_code ec;
  fs::path f = options_.file.empty() ? default_audit_file() : options_.file;
  fs::path abs = fs::absolute(f, ec);
  file_ = ec ? f : abs.lexically_normal();
}

AuditLog::~AuditLog() {
  if (fd_ >= 0) ::close(fd_);
}

bool AuditLog::audited(std::optional<EventKind> kind) noexcept {
  if (!kind) return false;
  switch (*kind) {
    case EventKind::spawn:
    case EventKind::tool_decision:
    case EventKind::approval:
    case EventKind::denial:
    case EventKind::budget:
    case EventKind::kill:
    case EventKind::cancel:
    case EventKind::failure:
    case EventKind::envelope:
    case EventKind::abandoned:
      return true;
    default:
      return false;
  }
}

json AuditLog::line_for(const json& event, const AuditContext& who, Scrubbed already) const {
  const std::optional<EventKind> kind = event_kind(event);
  if (!audited(kind)) return nullptr;
  json line = {{"time", rfc3339_utc()},
               {"event", to_string(*kind)},
               {"child", who.child.empty() ? event.value("child", "") : who.child},
               {"preset", who.preset},
               {"parent", who.parent}};
  if (kind == EventKind::envelope) {
    const json& e = event.contains("envelope") ? event["envelope"] : json::object();
    for (const char* k : {"status", "budget", "reason", "steps", "tool_calls", "tools_used", "tools_denied", "usage",
                          "duration_ms", "exit", "transcript", "sandbox_missing"})
      if (e.is_object() && e.contains(k)) line[k] = e[k];
    if (event.contains("elapsed_ms")) line["elapsed_ms"] = event["elapsed_ms"];
  } else {
    for (auto it = event.begin(); it != event.end(); ++it)
      if (!line.contains(it.key()))
        line[it.key()] =
            already == Scrubbed::yes ? detail::capped_copy(it.value(), options_.max_string_bytes) : it.value();
    if (kind == EventKind::spawn && line["preset"].get_ref<const std::string&>().empty() && event.contains("preset"))
      line["preset"] = event["preset"];
  }
  scrubber_->scrub_in_place(line);
  detail::cap_json_strings(line, options_.max_string_bytes);
  return line;
}

std::string AuditLog::record(const json& event, const AuditContext& who, Scrubbed already) noexcept {
  try {
    json line = line_for(event, who, already);
    if (line.is_null()) return {};
    std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() + 1 > options_.max_line_bytes && line.contains("args")) {
      line["args"] = json{{"omitted_bytes", line["args"].dump().size()}};
      text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    if (text.size() + 1 > options_.max_line_bytes) {
      json small;
      for (const char* k : {"time", "event", "child", "preset", "parent", "tool", "decision", "status"})
        if (line.contains(k)) small[k] = line[k];
      small["omitted_bytes"] = text.size();
      text = small.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    text += '\n';
    return append(text);
  } catch (const std::exception& e) {
    return "audit log " + file_.string() + ": " + e.what();
  } catch (...) {
    return "audit log " + file_.string() + ": unknown error";
  }
}

std::string AuditLog::append(const std::string& line) noexcept {
  std::lock_guard lock(mu_);
  if (fd_ < 0) {
    if (std::string e = detail::make_private_dirs(file_.parent_path()); !e.empty())
      return "audit log " + file_.string() + ": " + e;
    fd_ = ::open(file_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) return "cannot open audit log " + file_.string() + ": " + std::strerror(errno);
  }
  // One write(2) per line: with O_APPEND the kernel places it at the end in one piece, so lines of
  // concurrent supervisors never interleave.
  ssize_t n;
  do n = ::write(fd_, line.data(), line.size());
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(line.size())) return {};
  const int err = n < 0 ? errno : ENOSPC;
  std::string partial;
  if (n > 0) {
    // A full disk took part of the line: cut it off again while it is still the file's end (our
    // offset is the end of what we wrote), so every line of the log stays whole JSON. When another
    // writer appended meanwhile, the fragment is ended with a newline: a line of its own that no
    // reader takes for part of the next one.
    struct stat st;
    const off_t end = ::lseek(fd_, 0, SEEK_CUR);
    if (end >= n && ::fstat(fd_, &st) == 0 && st.st_size == end && ::ftruncate(fd_, end - n) == 0)
      partial = " (the partial line was removed)";
    else if (::write(fd_, "\n", 1) == 1)
      partial = " (a partial line was written and ended with a newline)";
    else
      partial = " (a partial line was written)";
  }
  ::close(fd_);
  fd_ = -1;  // reopened at the next line (the disk may have room again)
  std::string text = "cannot append to audit log " + file_.string() + ": " + std::strerror(err) + partial;
  if (err == ENOSPC || err == EDQUOT) text += "; the filesystem holding " + file_.parent_path().string() + " is full";
  return text;
}

}  // namespace supervisor
