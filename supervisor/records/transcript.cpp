// Transcript store: atomic whole-file writes, the never-overwrite rule and retention.
#include "records/transcript.hpp"
#include "records/events.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <set>
#include <vector>

namespace supervisor {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "subagent-transcript/1";
constexpr std::string_view kPrefix = "subagent-";
constexpr std::string_view kSuffix = ".json";

std::string errno_text(int err) { return std::strerror(err); }

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// The id of a retention candidate, or empty for any other name (temporary files start with '.').
std::string transcript_id_of(std::string_view name) {
  if (name.size() <= kPrefix.size() + kSuffix.size()) return {};
  if (name.substr(0, kPrefix.size()) != kPrefix || name.substr(name.size() - kSuffix.size()) != kSuffix) return {};
  std::string_view id = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  return valid_id(id) ? std::string(id) : std::string();
}

// The pid in a temporary's name (".subagent-<id>.json.tmp-<pid>-<n>", made by atomic_replace), or 0
// when `name` is not one.
pid_t temporary_owner(std::string_view name) {
  if (name.empty() || name[0] != '.') return 0;
  const auto mark = name.find(".tmp-");
  if (mark == std::string_view::npos || transcript_id_of(name.substr(1, mark - 1)).empty()) return 0;
  std::string_view rest = name.substr(mark + 5);
  const auto dash = rest.find('-');
  if (dash == 0 || dash == std::string_view::npos) return 0;
  long pid = 0;
  for (char c : rest.substr(0, dash)) {
    if (c < '0' || c > '9' || pid > 4'194'304) return 0;
    pid = pid * 10 + (c - '0');
  }
  return static_cast<pid_t>(pid);
}

}  // namespace

std::string detail::make_private_dirs(const fs::path& dir) {
  fs::path cur;
  for (const auto& part : dir) {
    cur /= part;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      int err = errno;
      return "cannot create directory " + cur.string() + ": " + errno_text(err);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return "cannot use directory " + dir.string() + ": " + errno_text(errno);
  if (!S_ISDIR(st.st_mode)) return dir.string() + " exists and is not a directory";
  return {};
}

namespace {
std::string cut_string(std::string_view s, std::size_t max) {
  auto c = protocol::cap_utf8(s, max);
  return c.text + "…[cut: " + std::to_string(c.original_bytes) + " bytes]";
}
}  // namespace

void detail::cap_json_strings(json& v, std::size_t max) {
  if (v.is_string()) {
    auto& s = v.get_ref<std::string&>();
    if (s.size() > max) s = cut_string(s, max);
  } else if (v.is_array() || v.is_object()) {
    for (auto& item : v) cap_json_strings(item, max);
  }
}

json detail::capped_copy(const json& v, std::size_t max) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return s.size() > max ? json(cut_string(s, max)) : v;
  }
  if (v.is_object()) {
    json out = json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = capped_copy(it.value(), max);
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& item : v) out.push_back(capped_copy(item, max));
    return out;
  }
  return v;
}

namespace {

bool write_all(int fd, std::string_view data, int& err) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      return false;
    }
    if (n == 0) {
      err = EIO;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::atomic<unsigned> g_tmp_counter{0};

// Puts `data` at dirfd/name atomically. `owned` is the file this process put there before (then only
// that file may be replaced; if it is gone it is created again), or empty (then the name must be free).
std::string atomic_replace(int dirfd, const fs::path& dir, const std::string& name, std::string_view data,
                           std::optional<std::pair<dev_t, ino_t>>& owned, bool sync) {
  const std::string where = (dir / name).string();
  bool create = !owned;
  if (owned) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (st.st_dev != owned->first || st.st_ino != owned->second)
        return where + " was replaced by another program; a transcript never overwrites a file it did not create";
    } else if (errno == ENOENT) {
      create = true;  // deleted meanwhile (e.g. another supervisor's retention): put it back
    } else {
      int err = errno;
      return "cannot check " + where + ": " + errno_text(err);
    }
  }

  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp = "." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_tmp_counter++);
    fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    int err = errno;
    return "cannot write transcript " + where + ": cannot create a temporary file in " + dir.string() + ": " +
           errno_text(err);
  }
  auto discard = [&](const std::string& what, int err) {
    ::unlinkat(dirfd, tmp.c_str(), 0);
    return "cannot write transcript " + where + ": " + what + ": " + errno_text(err);
  };
  int err = 0;
  if (!write_all(fd, data, err)) {
    ::close(fd);
    return discard("write failed", err);
  }
  if (sync && ::fsync(fd) != 0) {
    err = errno;
    ::close(fd);
    return discard("fsync failed", err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    err = errno;
    ::close(fd);
    return discard("fstat failed", err);
  }
  if (::close(fd) != 0) return discard("close failed", errno);  // never retried (EINTR leaves fd closed)

  if (create) {
    // RENAME_NOREPLACE: the name must still be free at the moment the file appears.
    if (::renameat2(dirfd, tmp.c_str(), dirfd, name.c_str(), RENAME_NOREPLACE) != 0) {
      err = errno;
      if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
        // A filesystem without RENAME_NOREPLACE: link(2) fails with EEXIST just as atomically.
        if (::linkat(dirfd, tmp.c_str(), dirfd, name.c_str(), 0) != 0)
          err = errno;
        else
          err = 0;
        ::unlinkat(dirfd, tmp.c_str(), 0);
      } else {
        ::unlinkat(dirfd, tmp.c_str(), 0);
      }
      if (err == EEXIST) return where + " already exists; a transcript never overwrites a file it did not create";
      if (err != 0) return "cannot write transcript " + where + ": rename failed: " + errno_text(err);
    }
  } else if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    return discard("rename failed", errno);
  }
  owned = std::make_pair(st.st_dev, st.st_ino);
  if (sync && ::fsync(dirfd) != 0) {
    err = errno;
    return "transcript " + where + " was written but the directory could not be synced: " + errno_text(err);
  }
  return {};
}

// One event as it stands inside the file's "events" array (the document is dumped with indent 1, so
// an element sits two spaces deep): a newline, the element, every line of it indented by two more.
// Strings never hold a raw newline (JSON escapes it), so only the dump's own line breaks are met.
void append_event_text(std::string& out, const json& e, bool first) {
  const std::string d = e.dump(1, ' ', false, json::error_handler_t::replace);
  if (!first) out += ',';
  out += "\n  ";
  for (char c : d) {
    out += c;
    if (c == '\n') out += "  ";
  }
}

// An upper bound of v.dump().size() found without printing: every character of a string (or key)
// as a six-byte \uXXXX escape, every number at most 32 bytes. Most events are far under the record
// cap by this bound alone, so they are never printed just to be measured.
std::size_t dump_bound(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return 6 * v.get_ref<const std::string&>().size() + 2;
    case json::value_t::object: {
      std::size_t n = 2;
      for (auto it = v.begin(); it != v.end(); ++it) n += 6 * it.key().size() + 4 + dump_bound(it.value());
      return n;
    }
    case json::value_t::array: {
      std::size_t n = 2;
      for (const auto& item : v) n += dump_bound(item) + 1;
      return n;
    }
    case json::value_t::binary:
      return std::numeric_limits<std::size_t>::max() / 2;  // never in an event: measured by printing
    default:
      return 32;
  }
}

bool is_checkpoint(std::optional<EventKind> kind, const json& event) {
  if (!kind) return false;
  switch (*kind) {
    case EventKind::started:
    case EventKind::approval:
    case EventKind::budget:
    case EventKind::cancel:
    case EventKind::kill:
    case EventKind::failure:
    case EventKind::exit:
      return true;
    // A child waiting for an approval may wait minutes: make the question visible now.
    case EventKind::tool_decision:
      return event.value("decision", "") == "ask";
    default:
      return false;
  }
}

}  // namespace

fs::path default_state_dir() {
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x == '/') return fs::path(x) / "subagent-supervisor";
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h == '/') home = h;
  if (home.empty()) {
    struct passwd pw, *res = nullptr;
    std::vector<char> buf(16384);
    if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &res) == 0 && res && res->pw_dir) home = res->pw_dir;
  }
  if (home.empty()) return fs::temp_directory_path() / ("subagent-supervisor-" + std::to_string(::getuid()));
  return fs::path(home) / ".local" / "state" / "subagent-supervisor";
}

fs::path default_transcript_dir() { return default_state_dir() / "transcripts"; }

std::string rfc3339_utc(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  int frac = static_cast<int>(ms % 1000);
  if (frac < 0) frac += 1000, --secs;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[96];  // room for any int, which keeps -Wformat-truncation quiet
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

// ---- the store -----------------------------------------------------------------------------------

struct TranscriptStore::Shared {
  TranscriptOptions options;
  std::shared_ptr<const Scrubber> scrubber;
  fs::path dir;
  std::mutex mu;  // guards everything below
  int dirfd = -1;
  std::string error;
  std::set<std::string> active;  // ids whose Transcript objects are alive

  // The writer thread of a background store (TranscriptOptions::background): one thread, so the
  // versions of one transcript reach the disk in order. Started at the first write.
  std::mutex wmu;
  std::condition_variable wcv;
  std::deque<std::function<void()>> wqueue;
  bool wstop = false;
  std::thread writer;

  void post_write(std::function<void()> job) {
    std::lock_guard lock(wmu);
    if (!writer.joinable()) {
      // Never takes SIGINT or SIGTERM (as the offload workers, offload/offload.cpp): the front
      // end's signal set takes them on the loop, and the default action must not reach a worker.
      sigset_t both, old;
      sigemptyset(&both);
      sigaddset(&both, SIGINT);
      sigaddset(&both, SIGTERM);
      ::pthread_sigmask(SIG_BLOCK, &both, &old);
      writer = std::thread([this] { run_writer(); });
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    wqueue.push_back(std::move(job));
    wcv.notify_one();
  }
  void run_writer() {
    // At the process's own priority: an ask's version is on disk before the parent is asked, so a
    // niced writer would make every approval wait behind whatever else the machine runs.
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(wmu);
        wcv.wait(lock, [&] { return wstop || !wqueue.empty(); });
        if (wqueue.empty()) return;  // stopping, and every queued write is done
        job = std::move(wqueue.front());
        wqueue.pop_front();
      }
      job();
    }
  }

  // Removes the oldest transcripts beyond options.keep (and dead supervisors' temporaries).
  std::size_t prune(std::string* error) noexcept;

  std::string ensure_dir() {
    if (dirfd >= 0) return {};
    error = detail::make_private_dirs(dir);
    if (!error.empty()) return error;
    dirfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) error = "cannot open transcript directory " + dir.string() + ": " + errno_text(errno);
    return error;
  }

  ~Shared() {
    {
      std::lock_guard lock(wmu);
      wstop = true;
    }
    wcv.notify_all();
    if (writer.joinable()) writer.join();
    if (dirfd >= 0) ::close(dirfd);
  }
};

TranscriptStore::TranscriptStore(TranscriptOptions options, std::shared_ptr<const Scrubber> scrubber)
    : shared_(std::make_shared<Shared>()) {
  shared_->options = std::move(options);
  shared_->scrubber = scrubber ? std::move(scrubber) : default_scrubber();
  std::error_code ec;
  fs::path dir = shared_->options.dir.empty() ? default_transcript_dir() : shared_->options.dir;
  fs::path abs = fs::absolute(dir, ec);
  shared_->dir = ec ? dir : abs.lexically_normal();
  shared_->options.dir = shared_->dir;
  std::lock_guard lock(shared_->mu);
  shared_->ensure_dir();
}

TranscriptStore::~TranscriptStore() = default;

const fs::path& TranscriptStore::dir() const noexcept { return shared_->dir; }
const TranscriptOptions& TranscriptStore::options() const noexcept { return shared_->options; }
const std::shared_ptr<const Scrubber>& TranscriptStore::scrubber() const noexcept { return shared_->scrubber; }

std::string TranscriptStore::error() const {
  std::lock_guard lock(shared_->mu);
  return shared_->error;
}

fs::path TranscriptStore::path_for(const std::string& id) const {
  return shared_->dir / (std::string(kPrefix) + id + std::string(kSuffix));
}

std::shared_ptr<Transcript> TranscriptStore::open(const TranscriptHeader& header, std::string& error) noexcept {
  try {
    if (!valid_id(header.id)) {
      error = "transcript id '" + shared_->scrubber->scrub(header.id) +
              "' is not usable in a file name (letters, digits, '-' and '_' only)";
      return nullptr;
    }
    const std::string name = std::string(kPrefix) + header.id + std::string(kSuffix);
    {
      std::lock_guard lock(shared_->mu);
      if (std::string e = shared_->ensure_dir(); !e.empty()) {
        error = "no transcript: " + e;
        return nullptr;
      }
      if (shared_->active.count(header.id)) {
        error = path_for(header.id).string() + " is already being written for another child with the same id";
        return nullptr;
      }
      struct stat st;
      if (::fstatat(shared_->dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        error =
            path_for(header.id).string() + " already exists; a transcript never overwrites a file it did not create";
        return nullptr;
      }
      shared_->active.insert(header.id);
    }
    std::shared_ptr<Transcript> t(new Transcript(shared_, header));
    if (shared_->options.background) {
      // The caller (the event loop) does no disk work here beyond the checks above: the first
      // version and the retention scan go to the writer thread, in that order. A failed first
      // write is the transcript's error() (SessionRecords reports it at the next event and names
      // no transcript in the envelope).
      t->write_version(true);
      Shared* shared = shared_.get();  // ~Shared runs every queued job before it returns
      shared_->post_write([shared] { shared->prune(nullptr); });
      return t;
    }
    if (!t->write()) {
      error = t->error();
      return nullptr;  // ~Transcript leaves the active set
    }
    std::string prune_error;
    prune(&prune_error);
    return t;
  } catch (const std::exception& e) {
    error = std::string("no transcript: ") + e.what();
  } catch (...) {
    error = "no transcript: unknown error";
  }
  return nullptr;
}

std::size_t TranscriptStore::Shared::prune(std::string* error) noexcept {
  const std::size_t keep = options.keep;  // 0: keep every transcript (temporaries still go)
  std::size_t removed = 0;
  try {
    std::lock_guard lock(mu);
    if (std::string e = ensure_dir(); !e.empty()) {
      if (error) *error = e;
      return 0;
    }
    int fd = ::dup(dirfd);
    if (fd < 0) {
      if (error) *error = "cannot list " + dir.string() + ": " + errno_text(errno);
      return 0;
    }
    DIR* d = ::fdopendir(fd);
    if (!d) {
      int err = errno;
      ::close(fd);
      if (error) *error = "cannot list " + dir.string() + ": " + errno_text(err);
      return 0;
    }
    ::rewinddir(d);
    struct Candidate {
      std::string name, id;
      struct timespec mtime;
    };
    std::vector<Candidate> found;
    while (dirent* ent = ::readdir(d)) {
      // A temporary left by a supervisor that was killed mid-write (its pid is gone) is never going
      // to be renamed into place: remove it, so no half-written file stays behind.
      if (const pid_t owner = temporary_owner(ent->d_name);
          owner > 0 && owner != ::getpid() && ::kill(owner, 0) != 0 && errno == ESRCH) {
        ::unlinkat(dirfd, ent->d_name, 0);
        continue;
      }
      std::string id = transcript_id_of(ent->d_name);
      if (id.empty()) continue;
      struct stat st;
      if (::fstatat(dirfd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      found.push_back({ent->d_name, std::move(id), st.st_mtim});
    }
    ::closedir(d);
    if (keep == 0 || found.size() <= keep) return 0;
    std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
      if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec > b.mtime.tv_sec;
      if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec > b.mtime.tv_nsec;
      return a.name > b.name;
    });
    for (std::size_t i = keep; i < found.size(); ++i) {
      if (active.count(found[i].id)) continue;
      if (::unlinkat(dirfd, found[i].name.c_str(), 0) == 0)
        ++removed;
      else if (errno != ENOENT && error)
        *error = "cannot delete old transcript " + (dir / found[i].name).string() + ": " + errno_text(errno);
    }
  } catch (const std::exception& e) {
    if (error) *error = std::string("retention failed: ") + e.what();
  }
  return removed;
}

std::size_t TranscriptStore::prune(std::string* error) noexcept { return shared_->prune(error); }

// ---- one transcript ------------------------------------------------------------------------------

Transcript::Transcript(std::shared_ptr<TranscriptStore::Shared> store, const TranscriptHeader& h)
    : store_(std::move(store)), id_(h.id) {
  path_ = store_->dir / (std::string(kPrefix) + h.id + std::string(kSuffix));
  const std::string now = rfc3339_utc();
  doc_ = json{{"format", kFormat},
              {"id", h.id},
              {"status", "running"},
              {"parent", h.parent},
              {"started_at", now},
              {"updated_at", now},
              {"preset", h.preset},
              {"policy_digest", h.policy_digest},
              {"description", h.description},
              {"workspace", h.workspace},
              {"model", h.model},
              {"brief", h.brief},
              {"sandbox", {{"applied", json::array()}, {"missing", json::array()}}},
              {"events", json::array()},
              {"events_dropped", 0},
              {"envelope", nullptr}};
  store_->scrubber->scrub_in_place(doc_);
}

Transcript::~Transcript() {
  wait_written();  // queued writes use this object
  std::lock_guard lock(store_->mu);
  store_->active.erase(id_);
}

void Transcript::record(const json& event, Scrubbed already) noexcept {
  try {
    const std::optional<EventKind> kind = event_kind(event);
    if (kind == EventKind::envelope && event.contains("envelope")) {
      record_envelope(event["envelope"]);
      return;
    }
    if (finished_) return;
    json e;
    if (already == Scrubbed::yes) {
      e = detail::capped_copy(event, store_->options.max_string_bytes);
    } else {
      e = store_->scrubber->scrub_json(event);
      detail::cap_json_strings(e, store_->options.max_string_bytes);
    }
    // One record (say a model turn that sends many long tool results) stays under its cap too:
    // every string is cut shorter until it fits, and the record says so.
    // Only the kinds that carry content can get that long; the others skip the size check.
    const bool content = kind == EventKind::model_request || kind == EventKind::model_response ||
                         kind == EventKind::tool_result || kind == EventKind::tool_decision ||
                         kind == EventKind::approval;
    const std::size_t max_record = content ? store_->options.max_record_bytes : 0;
    for (std::size_t cap = store_->options.max_string_bytes / 4;
         max_record && cap >= 64 && dump_bound(e) > max_record && e.dump().size() > max_record; cap /= 4) {
      detail::cap_json_strings(e, cap);
      e["record_cut"] = true;
    }
    e["time"] = rfc3339_utc();
    if (kind == EventKind::spawn) {
      if (doc_["model"].get_ref<const std::string&>().empty() && e.contains("model") && e["model"].is_string())
        doc_["model"] = e["model"];
      if (e.contains("policy_digest") && e["policy_digest"].is_string()) doc_["policy_digest"] = e["policy_digest"];
    } else if (kind == EventKind::started && e.contains("sandbox")) {
      doc_["sandbox"] = e["sandbox"];
    }
    if (events_ < store_->options.max_events) {
      // Serialised once, as it will stand in the file: a checkpoint copies the text instead of
      // serialising every event again (which made a long session's checkpoints quadratic).
      append_event(e);
      ++events_;
    } else {
      ++dropped_;
    }
    dirty_ = true;
    if (is_checkpoint(kind, event) ||
        std::chrono::steady_clock::now() - last_write_ >= store_->options.checkpoint_interval)
      // A background store writes behind: the session waits on a worker for the version that holds
      // a question to the parent, or its answer, before it asks or acts (SessionConfig::wait_recorded).
      write_version(true);
  } catch (const std::exception& ex) {
    set_error(std::string("transcript ") + path_.string() + ": " + ex.what());
  } catch (...) {
    set_error("transcript " + path_.string() + ": unknown error");
  }
}

bool Transcript::record_envelope(const json& envelope) noexcept {
  try {
    json env = store_->scrubber->scrub_json(envelope);
    if (env.is_object()) env["transcript"] = path_.string();
    doc_["envelope"] = std::move(env);
    doc_["status"] = "finished";
    finished_ = true;
    dirty_ = true;
    // Background: written behind; SessionRecords::finish waits for it (wait_written) before it
    // names the file in the envelope.
    return write_version(true);
  } catch (const std::exception& ex) {
    set_error(std::string("transcript ") + path_.string() + ": " + ex.what());
  } catch (...) {
    set_error("transcript " + path_.string() + ": unknown error");
  }
  return false;
}

bool Transcript::flush() noexcept { return write(); }

bool Transcript::write() noexcept { return write_version(false); }

std::string Transcript::error() const {
  std::lock_guard lock(disk_mu_);
  return error_;
}

std::size_t Transcript::writes() const noexcept {
  std::lock_guard lock(disk_mu_);
  return writes_;
}

void Transcript::set_error(std::string e) noexcept {
  std::lock_guard lock(disk_mu_);
  error_ = std::move(e);
}

void Transcript::wait_written() noexcept {
  std::unique_lock lock(disk_mu_);
  disk_idle_.wait(lock, [&] { return pending_ == 0; });
}

std::uint64_t Transcript::versions_queued() const noexcept {
  std::lock_guard lock(disk_mu_);
  return queued_;
}

void Transcript::wait_written(std::uint64_t upto) noexcept {
  std::unique_lock lock(disk_mu_);
  disk_idle_.wait(lock, [&] { return written_ >= upto || pending_ == 0; });
}

bool Transcript::write_version(bool behind) noexcept {
  try {
    if (!store_->options.background) return write_now(assemble(snapshot()));
    // The caller's thread (the event loop) takes a snapshot: the document's head and pointers to the
    // events' closed blocks, never a copy of the whole text; the writer thread puts the file together.
    auto version = std::make_shared<Version>(snapshot());
    last_write_ = std::chrono::steady_clock::now();
    std::uint64_t seq = 0;
    {
      std::lock_guard lock(disk_mu_);
      ++pending_;
      seq = ++queued_;
    }
    // ~Transcript waits for pending_ to reach 0, so `this` outlives the job.
    store_->post_write([this, version, seq] {
      try {
        write_now(assemble(*version));
      } catch (const std::exception& ex) {  // bad_alloc: the version is not written, the error kept
        set_error("cannot write transcript " + path_.string() + ": " + ex.what());
      } catch (...) {
        set_error("cannot write transcript " + path_.string() + ": unknown error");
      }
      std::lock_guard lock(disk_mu_);
      --pending_;
      written_ = seq;  // the writer runs its jobs in order
      disk_idle_.notify_all();
    });
    if (behind) return true;
    wait_written();
    return error().empty();
  } catch (const std::exception& ex) {
    set_error(std::string("cannot write transcript ") + path_.string() + ": " + ex.what());
  } catch (...) {
    set_error("cannot write transcript " + path_.string() + ": unknown error");
  }
  return false;
}

void Transcript::append_event(const json& e) {
  append_event_text(open_block_, e, events_ == 0);
  if (open_block_.size() >= kBlockBytes) {
    closed_blocks_.push_back(std::make_shared<const std::string>(std::move(open_block_)));
    open_block_ = std::string();
    open_block_.reserve(kBlockBytes + 4096);
  }
}

Transcript::Version Transcript::snapshot() {
  doc_["updated_at"] = rfc3339_utc();
  doc_["events_dropped"] = dropped_;
  Version v;
  // doc_ keeps "events" empty; the recorded events' text goes in its place (assemble). The file is
  // byte for byte what dumping the whole document would give.
  v.head = doc_.dump(1, ' ', false, json::error_handler_t::replace);
  v.has_events = events_ > 0;
  v.blocks = closed_blocks_;
  v.open = open_block_;
  return v;
}

std::string Transcript::assemble(const Version& v) {
  std::string data;
  if (!v.has_events) {
    data = v.head;
  } else {
    static constexpr std::string_view kEvents = "\n \"events\": []";
    const auto at = v.head.find(kEvents);
    if (at == std::string::npos) throw std::logic_error("the transcript document has no top-level events");
    const std::size_t cut = at + kEvents.size() - 2;  // at the "[]"
    std::size_t size = v.head.size() + v.open.size() + 8;
    for (const auto& b : v.blocks) size += b->size();
    data.reserve(size);
    data.append(v.head, 0, cut);
    data += '[';
    for (const auto& b : v.blocks) data += *b;
    data += v.open;
    data += "\n ]";
    data.append(v.head, cut + 2, std::string::npos);
  }
  data += '\n';
  return data;
}

// On the writer thread of a background store, else on the caller's: the only code that touches
// on_disk_. Never throws.
bool Transcript::write_now(const std::string& data) noexcept {
  try {
    int dirfd;
    {
      std::lock_guard lock(store_->mu);
      if (std::string e = store_->ensure_dir(); !e.empty()) {
        set_error("cannot write transcript " + path_.string() + ": " + e);
        return false;
      }
      dirfd = store_->dirfd;
    }
    const std::string name = path_.filename().string();
    std::string err = atomic_replace(dirfd, store_->dir, name, data, on_disk_, store_->options.sync);
    if (!store_->options.background)
      last_write_ = std::chrono::steady_clock::now();  // a failing disk is retried at the next checkpoint
    std::lock_guard lock(disk_mu_);
    if (!err.empty()) {
      error_ = std::move(err);
      return false;
    }
    error_.clear();
    ++writes_;
    return true;
  } catch (const std::exception& ex) {
    set_error(std::string("cannot write transcript ") + path_.string() + ": " + ex.what());
  } catch (...) {
    set_error("cannot write transcript " + path_.string() + ": unknown error");
  }
  return false;
}

}  // namespace supervisor
