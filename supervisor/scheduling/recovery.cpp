// Crash recovery (recovery.hpp): the registry a live supervisor keeps, and the settling of a dead one's.
#include "scheduling/recovery.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "workspace/held.hpp"
#include "session/session.hpp"
#include "workspace/worktree.hpp"
#include "records/audit.hpp"
#include "records/events.hpp"
#include "records/transcript.hpp"
#include "sandbox/cgroup_leftovers.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSupervisors = "supervisors";
constexpr const char* kNewPrefix = ".new-";

std::string errno_text(int err) { return std::strerror(err); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const fs::path& p) {
  json j = json::parse(slurp(p), nullptr, false);
  return j.is_object() ? j : json::object();
}

// Writes `data` to `file` through a temporary file in the same directory renamed over it, so a
// reader (or a process killed meanwhile) sees the old version or the new one. `sync`: fsync the file
// before the rename and the directory after it.
std::string write_atomically(const fs::path& file, const std::string& data, bool sync) {
  static std::atomic<unsigned long> counter{0};
  const fs::path tmp = file.parent_path() / ("." + file.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                                             "-" + std::to_string(++counter));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return "cannot create " + tmp.string() + ": " + errno_text(errno);
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      return "cannot write " + tmp.string() + ": " + errno_text(err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return "cannot fsync " + tmp.string() + ": " + errno_text(err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp.string() + " to " + file.string() + ": " + errno_text(err);
  }
  if (sync) {
    int dfd = ::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return {};
}

// Child ids are 12 hex digits (new_child_id); a record names nothing else.
bool safe_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool within(const fs::path& p, const fs::path& dir) {
  const fs::path rel = p.lexically_normal().lexically_relative(dir.lexically_normal());
  return !rel.empty() && rel != "." && *rel.begin() != "..";
}

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// ---- the settle steps ----------------------------------------------------------------------------

// The worktree of an implementation child, registered in the user's repository.
std::string settle_worktree(json& r, std::vector<std::string>& note) {
  if (!r.contains("worktree") || !r["worktree"].is_object()) return {};
  const json& sup = r["supervisor"];
  const fs::path state = text(sup, "state_dir"), top = text(r["worktree"], "top");
  const fs::path workspace = text(r["worktree"], "workspace");
  if (state.empty() || top.empty() || !within(top, state / "worktrees"))
    return "the record names the worktree '" + top.string() + "' outside " + (state / "worktrees").string() +
           "; left alone";
  std::string problem = forget_worktree(top, workspace, text(sup, "lock_dir"));
  if (!problem.empty()) return problem;
  note.push_back("removed and unregistered the worktree " + top.string());
  r.erase("worktree");
  return {};
}

// A worker's later-execution paths: what it planted is quarantined from the record its spawn left
// (held/<id>/spawn.json); nothing when it was no worker or was settled already. Its tree is dead:
// its children died with the supervisor (their parent-death signal).
std::string settle_held(json& r, std::vector<std::string>& note) {
  const std::string id = text(r, "child"), state = text(r["supervisor"], "state_dir");
  if (state.empty() || id.empty()) return {};
  const HeldReport held = settle_later_execution(state, id);
  if (!held.recorded) return {};
  if (!held.failed.empty()) {
    std::string what = "could not hold what it planted (still live in " + held.workspace.string() + "):";
    for (const auto& f : held.failed) what += " " + f + ";";
    return what;
  }
  if (held.held.empty())
    note.push_back("its workspace's later-execution paths hold nothing new");
  else
    note.push_back("held " + std::to_string(held.held.size()) +
                   " later-execution path(s) it planted; release: " + release_command(id));
  return {};
}

// A patch cut off while it was written (the .json beside it comes last).
std::string settle_patch(json& r, std::vector<std::string>& note) {
  const std::string id = text(r, "child"), state = text(r["supervisor"], "state_dir");
  if (state.empty() || text(r, "phase") != "finishing") return {};
  const fs::path patch = fs::path(state) / "patches" / (id + ".patch");
  std::error_code ec;
  if (fs::exists(patch, ec) && !fs::exists(fs::path(state) / "patches" / (id + ".json"), ec)) {
    fs::remove(patch, ec);
    if (ec) return "could not remove the partial patch " + patch.string() + ": " + ec.message();
    note.push_back("removed the partial patch " + patch.string());
  }
  return {};
}

std::string settle_transcript(json& r, std::vector<std::string>& note) {
  const fs::path file = text(r, "transcript");
  if (file.empty()) return {};
  if (file.filename() != "subagent-" + text(r, "child") + ".json")
    return "the record names the transcript " + file.string() + "; left alone";
  std::error_code ec;
  if (!fs::exists(file, ec)) return {};  // never started (queued), or already pruned
  json doc = json::parse(slurp(file), nullptr, false);
  if (!doc.is_object()) return "the transcript " + file.string() + " is not a JSON object; left as it is";
  // A child that ended but whose patch was being collected has its envelope in the file already
  // ("finished"), yet its parent never got it, nor the patch: abandoned too.
  const std::string status = doc.value("status", "");
  if (status != "running" && !(status == "finished" && text(r, "phase") == "finishing")) return {};
  const std::string now = rfc3339_utc();
  doc["status"] = "abandoned";
  doc["abandoned"] = {{"reason", text(r, "reason")}, {"phase", text(r, "phase")}, {"at", now}};
  doc["updated_at"] = now;
  if (std::string e = write_atomically(file, doc.dump(2) + "\n", true); !e.empty()) return e;
  note.push_back("marked the transcript " + file.string() + " abandoned");
  return {};
}

std::string settle_audit(json& r, std::vector<std::string>& note) {
  const std::string file = text(r["supervisor"], "audit_file");
  if (file.empty() || r.value("audited", false)) return {};
  AuditLog audit(AuditOptions{file}, std::make_shared<const Scrubber>(ScrubOptions{}));
  json fields = {
      {"child", text(r, "child")}, {"reason", text(r, "reason")}, {"phase", text(r, "phase")}, {"status", "abandoned"}};
  std::error_code ec;
  if (!text(r, "transcript").empty() && fs::exists(text(r, "transcript"), ec))  // a queued child has none
    fields["transcript"] = text(r, "transcript");
  std::string e =
      audit.record(make_event(EventKind::abandoned, fields), {text(r, "child"), text(r, "preset"), text(r, "parent")});
  if (!e.empty()) return e;
  note.push_back("wrote an \"abandoned\" line to the audit log " + file);
  r["audited"] = true;
  return {};
}

}  // namespace

const std::vector<SettleStep>& settle_steps() {
  // In order: a worker's planted files first (they run on the user's next command), then the
  // worktree (a disk-capped one is unmounted too), the records last.
  static const std::vector<SettleStep> steps = {
      {"later_execution", &settle_held},  {"worktree", &settle_worktree}, {"patch", &settle_patch},
      {"transcript", &settle_transcript}, {"audit", &settle_audit},
  };
  return steps;
}

// ---- the registry of a live supervisor -----------------------------------------------------------

std::shared_ptr<SupervisorRegistry> SupervisorRegistry::open(const RegistryInfo& info, std::string* error) noexcept {
  try {
    const fs::path root = info.state_dir / kSupervisors;
    if (std::string e = detail::make_private_dirs(root); !e.empty()) {
      if (error) *error = e;
      return nullptr;
    }
    const std::string id = new_child_id();
    const fs::path fresh = root / (kNewPrefix + id), final_dir = root / id;
    if (::mkdir(fresh.c_str(), 0700) != 0 || ::mkdir((fresh / "children").c_str(), 0700) != 0) {
      if (error) *error = "cannot create " + fresh.string() + ": " + errno_text(errno);
      return nullptr;
    }
    // Close-on-exec: no child (nor git step) inherits it, so the lock dies with this process alone.
    int fd = ::open((fresh / "lock").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (error) *error = "cannot lock " + (fresh / "lock").string() + ": " + errno_text(errno);
      if (fd >= 0) ::close(fd);
      std::error_code ec;
      fs::remove_all(fresh, ec);
      return nullptr;
    }
    json sup = {{"format", 1},
                {"pid", ::getpid()},
                {"started_at", rfc3339_utc()},
                {"command", info.command},
                {"state_dir", info.state_dir.string()},
                {"lock_dir", info.lock_dir.string()},
                {"transcript_dir", info.transcript_dir.string()},
                {"audit_file", info.audit_file.string()}};
    std::string e = write_atomically(fresh / "supervisor.json", sup.dump(2) + "\n", false);
    // Under its final name only with the lock held: a registry there is dead when its lock is free.
    if (e.empty() && ::rename(fresh.c_str(), final_dir.c_str()) != 0)
      e = "cannot rename " + fresh.string() + ": " + errno_text(errno);
    if (!e.empty()) {
      if (error) *error = e;
      std::error_code ec;
      fs::remove_all(fresh, ec);
      ::close(fd);
      return nullptr;
    }
    return std::shared_ptr<SupervisorRegistry>(new SupervisorRegistry(final_dir, fd, info));
  } catch (const std::exception& ex) {
    if (error) *error = ex.what();
    return nullptr;
  }
}

SupervisorRegistry::~SupervisorRegistry() {
  std::error_code ec;
  fs::remove_all(dir_, ec);  // with the lock still held
  ::close(lock_fd_);
}

void SupervisorRegistry::update(const std::string& child, const json& fields, bool sync) noexcept {
  try {
    std::lock_guard lock(mu_);
    json& r = records_[child];
    if (r.is_null()) r = {{"format", 1}, {"child", child}};
    r.update(fields);
    (void)write_atomically(dir_ / "children" / (child + ".json"), r.dump(2) + "\n", sync);
  } catch (...) {
  }
}

void SupervisorRegistry::settled(const std::string& child) noexcept {
  try {
    std::lock_guard lock(mu_);
    records_.erase(child);
    ::unlink((dir_ / "children" / (child + ".json")).c_str());
  } catch (...) {
  }
}

// ---- recovery ------------------------------------------------------------------------------------

namespace {

// Settles one dead registry (its lock held by the caller, or gone). True when nothing is left.
bool settle_registry(const fs::path& dir, const std::string& by, RecoveryReport& report) {
  json sup = read_json(dir / "supervisor.json");
  // The directories of this registry's own state dir, whatever the record says of the others.
  if (text(sup, "state_dir").empty()) sup["state_dir"] = dir.parent_path().parent_path().string();
  const std::string who = "the supervisor (" + (text(sup, "command").empty() ? "" : text(sup, "command") + ", ") +
                          "pid " + (sup.contains("pid") ? sup["pid"].dump() : std::string("?")) + ", started " +
                          (text(sup, "started_at").empty() ? "?" : text(sup, "started_at")) + ")";
  bool clean = true;
  std::error_code ec;
  std::vector<fs::path> records;
  for (const auto& entry : fs::directory_iterator(dir / "children", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 && name[0] != '.')
      records.push_back(entry.path());
    else if (name[0] == '.')  // a temporary of the dead writer
      fs::remove(entry.path(), ec);
  }
  for (const fs::path& file : records) {
    json r = read_json(file);
    const std::string id = file.stem().string();
    if (!safe_id(id) || text(r, "child") != id) {
      report.problems.push_back("the record " + file.string() + " is not one this program writes; left alone");
      clean = false;
      continue;
    }
    const std::string phase = text(r, "phase").empty() ? "queued" : text(r, "phase");
    r["supervisor"] = sup;
    r["reason"] = who +
                  " ended without settling this child (killed by SIGKILL or the OOM killer, or the host "
                  "stopped) while it was " +
                  phase + "; settled by `subagent-supervisor " + by + "` (pid " + std::to_string(::getpid()) + ")";
    bool done = true;
    for (const SettleStep& step : settle_steps()) {
      std::vector<std::string> note;
      std::string problem;
      try {
        problem = step.run(r, note);
      } catch (const std::exception& e) {
        problem = e.what();
      }
      for (auto& n : note) report.lines.push_back("child " + id + ": " + n);
      if (!problem.empty()) {
        report.problems.push_back("child " + id + ": " + step.name + ": " + problem);
        done = false;
      }
    }
    if (done) {
      fs::remove(file, ec);
      ++report.children;
      report.lines.push_back("child " + id + " (" + text(r, "preset") + ", " + phase +
                             ") abandoned: " + text(r, "reason"));
    } else {
      r.erase("supervisor");
      r.erase("reason");
      (void)write_atomically(file, r.dump(2) + "\n", true);  // what is done stays done
      clean = false;
    }
  }
  // Its cgroups: the children died with it (their parent-death signal); empty cgroups stay behind.
  if (sup.contains("pid") && sup["pid"].is_number_integer()) {
    const auto left = sandbox::remove_dead_supervisor_cgroups(sup["pid"].get<pid_t>(), std::chrono::seconds(2));
    for (const auto& d : left.removed) report.lines.push_back("removed the cgroup " + d);
    for (const auto& d : left.busy) {
      report.problems.push_back("the cgroup " + d + " still holds processes");
      clean = false;
    }
  }
  return clean;
}

// Whether process `pid` is gone (no such process, or a zombie not yet reaped).
bool gone(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

// Takes the registry's lock without waiting, except when its supervisor is already gone: then a
// process it forked before that (a sandbox's init, dying of its parent-death signal this moment)
// may still share the locked file description, and the lock is tried again for up to 2 s.
bool take_lock(int fd, const fs::path& dir) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  const json sup = read_json(dir / "supervisor.json");
  if (!sup.contains("pid") || !sup["pid"].is_number_integer() || !gone(sup["pid"].get<pid_t>())) return false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    ::usleep(20'000);
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  }
  return false;
}

}  // namespace

RecoveryReport recover_dead_supervisors(const fs::path& state_dir, const std::string& by) noexcept {
  RecoveryReport report;
  try {
    const fs::path root = state_dir / kSupervisors;
    std::error_code ec;
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(root, ec))
      if (entry.is_directory(ec) && !entry.is_symlink(ec)) dirs.push_back(entry.path());
    for (const fs::path& dir : dirs) {
      const std::string name = dir.filename().string();
      const bool fresh = name.rfind(kNewPrefix, 0) == 0;
      int fd = ::open((dir / "lock").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0 && errno != ENOENT) continue;
      if (fd >= 0 && !take_lock(fd, dir)) {  // a live supervisor's: never touched
        ::close(fd);
        continue;
      }
      if (fresh) {
        // One being made: its lock may not be taken yet. A minute old and free: the maker died.
        struct stat st {};
        const bool old = ::stat(dir.c_str(), &st) == 0 && st.st_mtim.tv_sec + 60 < std::time(nullptr);
        if (old) fs::remove_all(dir, ec);
        if (fd >= 0) ::close(fd);
        continue;
      }
      ++report.supervisors;
      if (settle_registry(dir, by, report)) {
        fs::remove_all(dir, ec);  // with its lock held
        if (ec) report.problems.push_back("could not remove " + dir.string() + ": " + ec.message());
      }
      if (fd >= 0) ::close(fd);
    }
  } catch (const std::exception& e) {
    report.problems.push_back(std::string("recovery: ") + e.what());
  }
  return report;
}

}  // namespace supervisor
