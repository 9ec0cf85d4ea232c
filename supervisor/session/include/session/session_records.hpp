// SessionRecords: the wiring between one ChildSession and the records (transcript.hpp, audit.hpp,
// scrub.hpp): every event into the transcript and the audit log, everything that leaves the supervisor
// through the session's callbacks scrubbed first.
//
// Errors never throw out of it: transcript and audit failures are logged once and the envelope's
// transcript is then null. Threading: one object per session, used on that session's io thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/envelope.hpp"
#include "records/audit.hpp"
#include "records/scrub.hpp"
#include "session/session.hpp"
#include "records/transcript.hpp"

namespace supervisor {

// Scrubs the envelope's free text (reason, description, summary, answer, artifacts) in place and keeps
// summary and answer within their caps (a redaction marker can be longer than what it replaced).
void scrub_envelope(const Scrubber& scrubber, protocol::Envelope& e, std::size_t summary_cap, std::size_t answer_cap);

// The wiring between one ChildSession and the records: transcript, audit log, scrubbed outputs.
//
//   auto records = SessionRecords::attach(cfg, store, audit, "cli");   // before ChildSession::create
//   session->start([&](const protocol::Envelope& done) {
//     protocol::Envelope e = done;
//     records->finish(e);          // scrubbed, e.transcript set (or null, with the reason logged)
//     ...
//   });
//
// attach() wraps cfg.on_event and cfg.on_log: every event goes to the transcript and the audit log, and
// whatever callbacks were there before receive the events and log lines scrubbed. `store` or `audit` may
// be null (that record is then not kept). Transcript and audit errors are reported through the previous
// on_log as "[subagent:<id>] transcript: ..." lines and never interrupt the session.
class SessionRecords {
 public:
  static std::shared_ptr<SessionRecords> attach(SessionConfig& cfg, std::shared_ptr<TranscriptStore> store,
                                                std::shared_ptr<AuditLog> audit, std::string parent,
                                                std::shared_ptr<const Scrubber> scrubber = nullptr);

  // Scrubs `e`, sets e.transcript to the transcript's path when the final version is on disk (null
  // otherwise), and returns the transcript error ("" when none). When `e` differs from the envelope
  // the session emitted (e.g. the hub added a patch artifact) the transcript is rewritten with `e`.
  std::string finish(protocol::Envelope& e) noexcept;
  // finish() in two halves, for the hub, which finishes off the loop once the session is done (no
  // event can arrive any more): finish_quietly() logs nothing and returns in `problem` what finish()
  // would log; report_problem() logs it, on the loop thread.
  std::string finish_quietly(protocol::Envelope& e, std::string* problem) noexcept;
  void report_problem(const std::string& problem) noexcept;

  const std::shared_ptr<Transcript>& transcript() const noexcept { return transcript_; }
  // Why there is no transcript or it is not current, or empty.
  const std::string& transcript_error() const noexcept { return transcript_error_; }
  const Scrubber& scrubber() const noexcept { return *scrubber_; }

  // What attach() installs as cfg.on_event / cfg.on_log.
  // Scrubs `event` in place, once: the transcript and the audit log (when they share this scrubber)
  // and the callbacks after it all get the scrubbed event. `args` == yes: its "args" were scrubbed
  // with this object's scrubber already (SessionConfig::on_event_args_scrubbed) and are left alone.
  void on_event(nlohmann::json event, Scrubbed args = Scrubbed::no);
  void on_log(const std::string& line);

 private:
  SessionRecords() = default;
  void report(const std::string& what) noexcept;

  std::shared_ptr<const Scrubber> scrubber_;
  std::shared_ptr<TranscriptStore> store_;
  std::shared_ptr<AuditLog> audit_;
  std::shared_ptr<Transcript> transcript_;
  std::string transcript_error_;
  std::string audit_error_;
  std::string reported_;  // the last error logged, so one failure is logged once
  std::string id_, preset_, parent_;
  std::size_t summary_cap_ = 0, answer_cap_ = 0;
  std::function<void(nlohmann::json&&)> next_event_;
  std::function<void(const std::string&)> next_log_;
  bool envelope_seen_ = false;
};

}  // namespace supervisor
