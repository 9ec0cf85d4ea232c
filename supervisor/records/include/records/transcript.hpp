// Transcripts: one JSON file per child, `subagent-<id>.json`, in a transcript store directory, so that a
// person can reconstruct afterwards what a child did. Format and jq recipes: docs/transcripts.md.
//
// Durability: every write replaces the whole file atomically (a temporary file in the same directory
// created O_EXCL 0600, written, fsync'd, renamed over the old version, then the directory fsync'd), so a
// supervisor killed at any moment leaves the previous version or the new one, never half a file. A
// transcript is written when it is opened (status "running"), at key events (sandbox started, approval
// asked, budget, cancel, kill, failure, exit), at most every `checkpoint_interval` otherwise, and last
// with the envelope (status "finished").
//
// Ownership: a store never overwrites a file it did not create in this process (an existing id is
// refused; the first version is linked in with RENAME_NOREPLACE), and retention deletes only regular
// files named subagent-<id>.json, never one that is still being written by this store, and the
// temporaries (.subagent-<id>.json.tmp-<pid>-<n>) of writer processes that no longer exist.
//
// Errors (directory missing, read-only, full) never throw out of these classes: they are returned as
// strings naming the file and the cause, and the envelope's transcript is then null.
//
// Threading: TranscriptStore may be shared between sessions and threads (it locks what it shares);
// a Transcript belongs to one session and is used on one thread at a time: the session's io thread,
// or a worker the hub hands a finished session's records to (scheduling/hub.cpp). Its waits,
// error() and writes() may be called from any thread. A background
// store writes on its own thread (TranscriptOptions::background), one job at a time in the order
// they were queued: open() queues the first version and then the retention scan and returns without
// touching the disk beyond the id checks, and record() queues every checkpoint behind. An approval
// question and its answer are checkpoints: the session waits for them on a worker (wait_written(n),
// through SessionConfig::wait_recorded) before it asks the parent or acts on the answer, so the
// parent is never asked what the file does not hold yet, and the loop never waits for the disk.
// A failed background write is the transcript's error() (the envelope's transcript is then null).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/envelope.hpp"
#include "records/scrub.hpp"

namespace supervisor {

class AuditLog;

// $XDG_STATE_HOME/subagent-supervisor, or ~/.local/state/subagent-supervisor.
std::filesystem::path default_state_dir();
// default_state_dir()/transcripts
std::filesystem::path default_transcript_dir();

// "2024-05-01T12:34:56.789Z"
std::string rfc3339_utc(std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

namespace detail {
// Cuts every string in `v` to `max` bytes on a UTF-8 boundary, noting how long it was. Used after
// scrubbing, so a cut never leaves the first half of a secret the scrubber could have recognised.
void cap_json_strings(nlohmann::json& v, std::size_t max);
// A copy of `v` with every string cut as cap_json_strings() cuts it, made without copying the
// parts that are cut off (a 900 KB argument costs its first `max` bytes, not a copy of it).
nlohmann::json capped_copy(const nlohmann::json& v, std::size_t max);
// mkdir -p; directories it creates get mode 0700. Returns "" or the error naming the directory.
std::string make_private_dirs(const std::filesystem::path& dir);
}  // namespace detail

struct TranscriptOptions {
  std::filesystem::path dir;  // empty: default_transcript_dir(); created (with parents) mode 0700
  std::size_t keep = 200;     // newest subagent-*.json files kept; 0 keeps all
  std::chrono::milliseconds checkpoint_interval{5'000};
  std::size_t max_string_bytes = 64 * 1024;   // per string inside an event, cut after scrubbing
  std::size_t max_record_bytes = 512 * 1024;  // per event: longer ones keep the start of each string
  std::size_t max_events = 20'000;            // later events are counted in "events_dropped"
  bool sync = true;                           // fsync file and directory (off only in benchmarks)
  // Checkpoints go to disk on the store's own writer thread, in order, and record() returns at
  // once (the front ends set this: their event loop never waits for a disk). flush() is still on
  // disk when it returns; SessionRecords::finish waits for the final version; a session waits for a
  // question to the parent (an "ask" or approval event) on a worker. Errors show in error() once
  // the write is done.
  bool background = false;
};

// What a transcript says about the child before any event.
struct TranscriptHeader {
  std::string id;
  std::string parent;  // who asked for the child (a parent agent's name, a connection, "cli")
  std::string brief;
  std::string description;
  std::string preset;
  std::string policy_digest;
  std::string workspace;
  std::string model;
};

class Transcript;

class TranscriptStore {
 public:
  TranscriptStore(TranscriptOptions options, std::shared_ptr<const Scrubber> scrubber);
  ~TranscriptStore();
  TranscriptStore(const TranscriptStore&) = delete;
  TranscriptStore& operator=(const TranscriptStore&) = delete;

  const std::filesystem::path& dir() const noexcept;
  const TranscriptOptions& options() const noexcept;
  const std::shared_ptr<const Scrubber>& scrubber() const noexcept;
  // Why the directory is unusable, or empty.
  std::string error() const;

  // Starts a child's transcript and writes its first version (status "running"), then applies
  // retention. Returns nullptr with `error` set when the id is not a safe file name, a file for it
  // already exists, or the directory cannot be written.
  std::shared_ptr<Transcript> open(const TranscriptHeader& header, std::string& error) noexcept;

  // Deletes the oldest subagent-<id>.json files beyond `keep` (by modification time), never one this
  // store is still writing, and the temporaries of dead writer processes (a supervisor killed
  // mid-write); never any other file. Returns how many transcripts were deleted.
  std::size_t prune(std::string* error = nullptr) noexcept;

  std::filesystem::path path_for(const std::string& id) const;

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

class Transcript {
 public:
  ~Transcript();
  Transcript(const Transcript&) = delete;
  Transcript& operator=(const Transcript&) = delete;

  // Records one session event (as ChildSession emits it): scrubbed (unless `already` says the
  // store's own scrubber did that), long strings cut, a "time" added. Writes the file at key
  // events and checkpoints. Never throws.
  void record(const nlohmann::json& event, Scrubbed already = Scrubbed::no) noexcept;
  // Records the envelope (scrubbed; its "transcript" set to this file) and writes the final version
  // (a background store queues it: wait_written() then). Returns whether that write succeeded or
  // was queued.
  bool record_envelope(const nlohmann::json& envelope) noexcept;
  // Writes the current state now; returns whether it succeeded.
  bool flush() noexcept;

  const std::filesystem::path& path() const noexcept { return path_; }
  // The envelope as recorded (scrubbed), or null before record_envelope().
  const nlohmann::json& envelope() const noexcept { return doc_["envelope"]; }
  // The last write's error, or empty when the file on disk is current.
  std::string error() const;
  bool finished() const noexcept { return finished_; }
  std::size_t writes() const noexcept;
  // Waits until every version queued by a background store is on disk (or failed).
  void wait_written() noexcept;
  // How many versions a background store has queued so far; wait_written(n) waits until the
  // first n are on disk (or failed), however many are queued after them. Both may be called
  // from any thread.
  std::uint64_t versions_queued() const noexcept;
  void wait_written(std::uint64_t upto) noexcept;

 private:
  friend class TranscriptStore;
  Transcript(std::shared_ptr<TranscriptStore::Shared> store, const TranscriptHeader& header);
  bool write() noexcept;  // the current version, on disk when it returns
  // The current version; a background store queues it and, when `behind`, returns at once.
  bool write_version(bool behind) noexcept;
  // One version of the file: the document without its events (head), and the events' text as
  // immutable blocks plus a copy of the block still being filled.
  struct Version {
    std::string head;
    bool has_events = false;
    std::vector<std::shared_ptr<const std::string>> blocks;
    std::string open;
  };
  static constexpr std::size_t kBlockBytes = 64 * 1024;
  void append_event(const nlohmann::json& e);
  Version snapshot();                             // on the caller's thread: cheap, whatever the length
  static std::string assemble(const Version& v);  // on the writer's: the file's bytes
  bool write_now(const std::string& data) noexcept;
  void set_error(std::string e) noexcept;

  std::shared_ptr<TranscriptStore::Shared> store_;
  std::string id_;
  std::filesystem::path path_;
  nlohmann::json doc_;  // everything but the events, whose "events" stays empty
  // The recorded events as they stand in the file (append_event_text): closed blocks of about
  // kBlockBytes, shared with queued versions, then the open one.
  std::vector<std::shared_ptr<const std::string>> closed_blocks_;
  std::string open_block_;
  std::size_t events_ = 0;
  std::size_t dropped_ = 0;
  // Shared with the writer thread of a background store, under disk_mu_: error_, writes_, pending_.
  // on_disk_ is touched only by write_now() (the writer thread when there is one).
  mutable std::mutex disk_mu_;
  std::condition_variable disk_idle_;
  std::size_t pending_ = 0;
  std::uint64_t queued_ = 0, written_ = 0;  // versions queued, and done (in order) by the writer
  std::string error_;
  bool finished_ = false;
  bool dirty_ = false;
  std::optional<std::pair<dev_t, ino_t>> on_disk_;  // the file this object created
  std::chrono::steady_clock::time_point last_write_{};
  std::size_t writes_ = 0;
};

}  // namespace supervisor
