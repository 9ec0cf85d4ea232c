// SessionRecords: one session's events into its transcript and the audit log; everything that leaves
// the supervisor through the session's callbacks scrubbed first.
#include "session/session_records.hpp"

namespace supervisor {

using nlohmann::json;

namespace {

TranscriptHeader header_for(const SessionConfig& cfg, std::string parent) {
  TranscriptHeader h;
  h.id = cfg.id;
  h.parent = std::move(parent);
  h.brief = cfg.brief;
  h.description = cfg.description;
  if (cfg.preset) {
    h.preset = cfg.preset->name;
    h.policy_digest = cfg.preset->digest;
  }
  h.workspace = cfg.workspace.string();
  return h;
}

}  // namespace

void scrub_envelope(const Scrubber& scrubber, protocol::Envelope& e, std::size_t summary_cap, std::size_t answer_cap) {
  scrubber.scrub_in_place(e.reason);
  scrubber.scrub_in_place(e.description);
  scrubber.scrub_in_place(e.budget);
  auto text = [&](protocol::CappedText& t, std::size_t cap) {
    if (!scrubber.scrub_in_place(t.text) || cap == 0 || t.text.size() <= cap) return;
    const std::size_t original = t.original_bytes;
    t = protocol::cap_utf8(t.text, cap);
    t.truncated = true;
    t.original_bytes = std::max(original, t.original_bytes);
  };
  text(e.summary, summary_cap);
  text(e.answer, answer_cap);
  scrubber.scrub_in_place(e.artifacts);
  bool denials_changed = false;
  for (auto& d : e.denials.listed)
    for (std::string* s : {&d.tool, &d.rule, &d.reason})
      denials_changed = scrubber.scrub_in_place(*s) || denials_changed;
  if (denials_changed) e.denials.refit();  // a redaction marker may be longer than what it hides
  if (e.transcript) scrubber.scrub_in_place(*e.transcript);
}

std::shared_ptr<SessionRecords> SessionRecords::attach(SessionConfig& cfg, std::shared_ptr<TranscriptStore> store,
                                                       std::shared_ptr<AuditLog> audit, std::string parent,
                                                       std::shared_ptr<const Scrubber> scrubber) {
  std::shared_ptr<SessionRecords> r(new SessionRecords());
  if (!scrubber) scrubber = store ? store->scrubber() : audit ? audit->scrubber() : default_scrubber();
  r->scrubber_ = std::move(scrubber);
  r->store_ = std::move(store);
  r->audit_ = std::move(audit);
  r->id_ = cfg.id;
  r->preset_ = cfg.preset ? cfg.preset->name : std::string();
  r->parent_ = std::move(parent);
  r->summary_cap_ = cfg.budgets.summary_bytes;
  r->answer_cap_ = cfg.budgets.answer_bytes;
  r->next_event_ = std::move(cfg.on_event);
  r->next_log_ = std::move(cfg.on_log);
  if (r->store_) {
    std::string error;
    r->transcript_ = r->store_->open(header_for(cfg, r->parent_), error);
    if (!r->transcript_) {
      r->transcript_error_ = error;
      r->report("transcript: " + error + " (the envelope's transcript will be null)");
    }
  }
  cfg.on_event = [r](json&& e) { r->on_event(std::move(e)); };
  cfg.on_event_args_scrubbed = [r](json&& e) { r->on_event(std::move(e), Scrubbed::yes); };
  cfg.scrubber = r->scrubber_;
  cfg.on_log = [r](const std::string& line) { r->on_log(line); };
  if (r->transcript_ && r->store_->options().background)
    cfg.wait_recorded = [t = r->transcript_] {
      return std::function<void()>([t, upto = t->versions_queued()] { t->wait_written(upto); });
    };
  return r;
}

void SessionRecords::report(const std::string& what) noexcept {
  try {
    if (what == reported_) return;
    reported_ = what;
    if (next_log_) next_log_("[subagent:" + id_ + "] " + scrubber_->scrub(what));
  } catch (...) {
  }
}

void SessionRecords::on_event(json event, Scrubbed args) {
  json& clean = event;
  bool scrubbed = false;
  try {
    if (args == Scrubbed::yes && clean.is_object() && clean.contains("args")) {
      json taken = std::move(clean["args"]);  // scrubbed with scrubber_ already: the rest only
      clean.erase("args");
      scrubber_->scrub_in_place(clean);
      clean["args"] = std::move(taken);
    } else {
      scrubber_->scrub_in_place(clean);
    }
    scrubbed = true;
    const std::optional<EventKind> kind = event_kind(clean);
    if (kind == EventKind::envelope) envelope_seen_ = true;
    if (transcript_) {
      const std::string before = transcript_->error();
      transcript_->record(clean, store_->scrubber() == scrubber_ ? Scrubbed::yes : Scrubbed::no);
      const std::string& after = transcript_->error();
      if (!after.empty() && after != before) report("transcript: " + after);
      if (kind == EventKind::envelope && clean.contains("envelope") && clean["envelope"].is_object())
        clean["envelope"]["transcript"] =
            transcript_->finished() && after.empty() ? json(transcript_->path().string()) : json(nullptr);
    }
    if (audit_ && AuditLog::audited(kind)) {
      std::string err = audit_->record(clean, AuditContext{id_, preset_, parent_},
                                       audit_->scrubber() == scrubber_ ? Scrubbed::yes : Scrubbed::no);
      if (!err.empty() && err != audit_error_) report("audit: " + err);
      audit_error_ = std::move(err);
    }
  } catch (const std::exception& e) {
    report(std::string("records: ") + e.what());
  } catch (...) {
    report("records: unknown error");
  }
  if (!next_event_) return;
  if (scrubbed && !clean.is_null()) return next_event_(std::move(clean));
  next_event_(json::object());  // what could not be scrubbed never leaves
}

void SessionRecords::on_log(const std::string& line) {
  if (next_log_) next_log_(scrubber_->scrub(line));
}

std::string SessionRecords::finish(protocol::Envelope& e) noexcept {
  std::string problem;
  std::string error = finish_quietly(e, &problem);
  report_problem(problem);
  return error;
}

void SessionRecords::report_problem(const std::string& problem) noexcept {
  if (!problem.empty()) report(problem);
}

std::string SessionRecords::finish_quietly(protocol::Envelope& e, std::string* problem) noexcept {
  try {
    scrub_envelope(*scrubber_, e, summary_cap_, answer_cap_);
    if (!transcript_) {
      e.transcript.reset();
      return transcript_error_;
    }
    transcript_->wait_written();  // a background store's versions so far are on disk
    json final_json = protocol::to_json(e);
    final_json["transcript"] = transcript_->path().string();
    if (!envelope_seen_ || transcript_->envelope() != final_json) {
      envelope_seen_ = true;
      transcript_->record_envelope(final_json);
      transcript_->wait_written();
    }
    if (transcript_->finished() && transcript_->error().empty()) {
      e.transcript = transcript_->path().string();
      transcript_error_.clear();
    } else {
      e.transcript.reset();
      transcript_error_ = transcript_->error().empty() ? "the transcript has no envelope" : transcript_->error();
      if (problem) *problem = "transcript: " + transcript_error_ + " (the envelope's transcript is null)";
    }
  } catch (const std::exception& ex) {
    e.transcript.reset();
    transcript_error_ = ex.what();
  }
  return transcript_error_;
}

}  // namespace supervisor
