#include "workspace/held.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <system_error>

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

[[noreturn]] void fail_errno(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

std::vector<std::string> components(const std::string& rel) {
  std::vector<std::string> out;
  for (const auto& part : fs::path(rel)) {
    const std::string s = part.string();
    if (s.empty() || s == "/" || s == "." || s == "..")
      throw std::runtime_error("'" + rel + "' is not a plain relative path");
    out.push_back(s);
  }
  if (out.empty()) throw std::runtime_error("an empty path");
  return out;
}

std::string join(const std::vector<std::string>& parts, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += (i ? "/" : "") + parts[i];
  return s;
}

Fd open_dir(const fs::path& p) {
  Fd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) fail_errno("'" + p.string() + "'", errno);
  return fd;
}

// One directory below `dir`, never through a symlink. Creates it (with `mode`) when `create`.
Fd open_below(int dir, const std::string& name, bool create, const std::string& shown, mode_t mode = 0700) {
  if (create && ::mkdirat(dir, name.c_str(), mode) != 0 && errno != EEXIST) fail_errno("mkdir '" + shown + "'", errno);
  Fd fd(::openat(dir, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) fail_errno("'" + shown + "'", errno == ELOOP ? ENOTDIR : errno);
  return fd;
}

// Writes `data` to dir/name through a temporary name, fsyncs it and the directory.
void write_atomic(const fs::path& dir, const std::string& name, const std::string& data) {
  const fs::path tmp = dir / ("." + name + ".tmp");
  const fs::path dst = dir / name;
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) fail_errno("'" + tmp.string() + "'", errno);
  for (std::size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("writing '" + tmp.string() + "'", errno);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail_errno("fsync '" + tmp.string() + "'", errno);
  fd.reset();
  if (::rename(tmp.c_str(), dst.c_str()) != 0) fail_errno("rename to '" + dst.string() + "'", errno);
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d) (void)!::fsync(d.get());
}

json read_json(const fs::path& f) {
  std::ifstream in(f);
  if (!in) return json();
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("'" + f.string() + "' is damaged");
  return j;
}

bool exists_at(int dir, const std::string& name) {
  struct stat st {};
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

// Removes dir/name and everything beneath it, following no symlink.
void remove_at(int dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    fail_errno("'" + name + "'", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    if ((st.st_mode & 0700) != 0700) (void)!::fchmodat(dir, name.c_str(), st.st_mode | 0700, 0);
    Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) fail_errno("'" + name + "'", errno);
    DIR* d = ::fdopendir(::dup(fd.get()));
    if (!d) fail_errno("'" + name + "'", errno);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    ::closedir(d);
    for (const auto& n : names) remove_at(fd.get(), n);
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0) fail_errno("rmdir '" + name + "'", errno);
  } else if (::unlinkat(dir, name.c_str(), 0) != 0) {
    fail_errno("unlink '" + name + "'", errno);
  }
}

// Copies from/name to to/dst, following no symlink (links are copied as links). Sockets are left
// out (nothing can be copied of one, and nothing runs it).
void copy_at(int from, const std::string& name, int to, const std::string& dst) {
  struct stat st {};
  if (::fstatat(from, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) fail_errno("'" + name + "'", errno);
  if (S_ISDIR(st.st_mode)) {
    if ((st.st_mode & 0500) != 0500) (void)!::fchmodat(from, name.c_str(), st.st_mode | 0500, 0);
    Fd s(::openat(from, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!s) fail_errno("'" + name + "'", errno);
    if (::mkdirat(to, dst.c_str(), 0700) != 0) fail_errno("mkdir '" + dst + "'", errno);
    Fd d(::openat(to, dst.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) fail_errno("'" + dst + "'", errno);
    DIR* dir = ::fdopendir(::dup(s.get()));
    if (!dir) fail_errno("'" + name + "'", errno);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(dir))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    ::closedir(dir);
    for (const auto& n : names) copy_at(s.get(), n, d.get(), n);
    (void)!::fchmod(d.get(), st.st_mode & 07777);
  } else if (S_ISREG(st.st_mode)) {
    if ((st.st_mode & 0400) == 0) (void)!::fchmodat(from, name.c_str(), st.st_mode | 0400, 0);
    Fd s(::openat(from, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
    if (!s) fail_errno("'" + name + "'", errno);
    Fd d(::openat(to, dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!d) fail_errno("'" + dst + "'", errno);
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(s.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_errno("reading '" + name + "'", errno);
      if (n == 0) break;
      for (ssize_t done = 0; done < n;) {
        ssize_t w = ::write(d.get(), buf + done, static_cast<std::size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) fail_errno("writing '" + dst + "'", errno);
        done += w;
      }
    }
    (void)!::fchmod(d.get(), st.st_mode & 07777);
  } else if (S_ISLNK(st.st_mode)) {
    std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
    ssize_t n = ::readlinkat(from, name.c_str(), target.data(), target.size());
    if (n < 0) fail_errno("readlink '" + name + "'", errno);
    target.resize(static_cast<std::size_t>(n));
    if (::symlinkat(target.c_str(), to, dst.c_str()) != 0) fail_errno("symlink '" + dst + "'", errno);
  } else if (S_ISFIFO(st.st_mode)) {
    if (::mkfifoat(to, dst.c_str(), st.st_mode & 0777) != 0) fail_errno("mkfifo '" + dst + "'", errno);
  }
}

// Moves from/name to to/dst, which must not exist. A directory without write permission for its
// owner cannot be renamed into another directory (its ".." changes): given it for the move. Across
// filesystems: a copy under a temporary name in `to`, renamed into place, then the source removed.
void move_at(int from, const std::string& name, int to, const std::string& dst) {
  struct stat st {};
  if (::fstatat(from, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) fail_errno("'" + name + "'", errno);
  const bool dir_unwritable = S_ISDIR(st.st_mode) && (st.st_mode & 0200) == 0;
  if (dir_unwritable) (void)!::fchmodat(from, name.c_str(), st.st_mode | 0200, 0);
  if (::renameat2(from, name.c_str(), to, dst.c_str(), RENAME_NOREPLACE) == 0) {
    if (dir_unwritable) (void)!::fchmodat(to, dst.c_str(), st.st_mode & 07777, 0);
    return;
  }
  const int err = errno;
  if (dir_unwritable) (void)!::fchmodat(from, name.c_str(), st.st_mode & 07777, 0);  // the copy keeps it
  if (err != EXDEV) fail_errno("rename '" + name + "' to '" + dst + "'", err);
  const std::string tmp = "." + dst + ".partial";
  remove_at(to, tmp);
  copy_at(from, name, to, tmp);
  if (::renameat2(to, tmp.c_str(), to, dst.c_str(), RENAME_NOREPLACE) != 0) {
    const int e = errno;
    remove_at(to, tmp);
    fail_errno("rename '" + tmp + "' to '" + dst + "'", e);
  }
  remove_at(from, name);
}

// The directory holding the last component of `parts` under `root`, following no symlink; missing
// ones created (with `mode`, less the umask) when `create`. When a component on the way is a symlink (or missing
// without `create`), returns an invalid Fd and sets `*stop` to how many components lead to it.
Fd walk_parent(int root, const std::vector<std::string>& parts, bool create, std::size_t* stop, mode_t mode = 0700) {
  Fd cur(::dup(root));
  if (!cur) fail_errno("dup", errno);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    struct stat st {};
    if (::fstatat(cur.get(), parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT && create) {
        cur = open_below(cur.get(), parts[i], true, join(parts, i + 1), mode);
        continue;
      }
      *stop = i + 1;
      return Fd();
    }
    if (!S_ISDIR(st.st_mode)) {
      *stop = i + 1;
      return Fd();
    }
    cur = open_below(cur.get(), parts[i], false, join(parts, i + 1));
  }
  *stop = parts.size();
  return cur;
}

const char* kind(int dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return "missing";
  if (S_ISDIR(st.st_mode)) return "directory";
  if (S_ISLNK(st.st_mode)) return "symlink";
  if (S_ISREG(st.st_mode)) return "file";
  return "other";
}

// Moves workspace/rel into files/rel. When a directory on the way to it is a symlink, that symlink
// is what lets rel reach anything: the link itself is moved. Returns the relative path moved
// ("" when rel has gone meanwhile).
std::string quarantine(int ws, int files, const std::string& rel) {
  std::vector<std::string> parts = components(rel);
  std::size_t stop = 0;
  Fd parent = walk_parent(ws, parts, false, &stop);
  if (!parent) {
    parts.resize(stop);
    if (std::string(kind(ws, join(parts, stop))) == "missing") return "";
    parent = walk_parent(ws, parts, false, &stop);
    if (!parent) throw std::runtime_error("'" + join(parts, stop) + "' changed while it was being held");
  }
  const std::string moved = join(parts, parts.size());
  if (!exists_at(parent.get(), parts.back())) return "";
  Fd dst = walk_parent(files, parts, true, &stop);
  if (!dst) throw std::runtime_error("the quarantine directory of '" + moved + "' is not a plain directory");
  // A copy left by an interrupted settle (the source is still in the workspace): made again.
  remove_at(dst.get(), parts.back());
  move_at(parent.get(), parts.back(), dst.get(), parts.back());
  return moved;
}

std::vector<std::string> nested_of(const std::vector<std::string>& changed) {
  std::vector<std::string> nested;
  for (const auto& p : changed) {
    fs::path rel(p);
    if (rel.filename() == ".git") nested.push_back(rel.parent_path().empty() ? "." : rel.parent_path().string());
  }
  return nested;
}

// Entries a walk visits at the end: past it the scan is incomplete (and says so). Far above the spawn
// scan's 200,000: a child that makes files to hide a listed path must make millions.
constexpr std::size_t kMaxSettleEntries = 4'000'000;

// Nanoseconds since the epoch.
long long now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<long long>(t.tv_sec) * 1'000'000'000LL + t.tv_nsec;
}

// Whether workspace/rel was born at or after `since_ns` (statx birth time, which nobody can set);
// false when the filesystem keeps no birth time.
bool born_since(const fs::path& workspace, const std::string& rel, long long since_ns) {
  struct statx sx {};
  if (::statx(AT_FDCWD, (workspace / rel).c_str(), AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) != 0) return false;
  if (!(sx.stx_mask & STATX_BTIME)) return false;
  return static_cast<long long>(sx.stx_btime.tv_sec) * 1'000'000'000LL + sx.stx_btime.tv_nsec >= since_ns;
}

json report_json(const HeldReport& r) {
  return {{"id", r.id},
          {"workspace", r.workspace.string()},
          {"held", r.held},
          {"failed", r.failed},
          {"changed", r.changed},
          {"changed_outside", r.changed_outside},
          {"new_repositories", r.new_repositories},
          {"protected", r.protected_paths},
          {"scan_complete", r.scan_complete},
          {"released", r.released}};
}

HeldReport report_from(const json& j) {
  HeldReport r;
  r.id = j.value("id", "");
  r.workspace = j.value("workspace", "");
  r.held = j.value("held", std::vector<std::string>{});
  r.failed = j.value("failed", std::vector<std::string>{});
  r.changed = j.value("changed", std::vector<std::string>{});
  r.changed_outside = j.value("changed_outside", std::vector<std::string>{});
  r.new_repositories = j.value("new_repositories", std::vector<std::string>{});
  r.protected_paths = j.value("protected", std::vector<std::string>{});
  r.scan_complete = j.value("scan_complete", false);
  r.released = j.value("released", false);
  return r;
}

}  // namespace

LaterExecutionWatch watch_later_execution(const fs::path& workspace, std::vector<std::string> list) {
  LaterExecutionWatch w;
  w.workspace = workspace;
  w.list = std::move(list);
  w.list.push_back("**/.git");  // nested repositories, whatever the list says
  const std::string hooks = hooks_path_inside(workspace);
  if (!hooks.empty()) w.list.push_back(hooks);
  w.protected_paths = find_later_execution(workspace, w.list);
  // What exists is read-only in the child: its own identity is enough to compare.
  w.before = snapshot_later_execution(workspace, w.list, w.protected_paths);
  return w;
}

bool is_child_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

fs::path held_dir(const fs::path& state_dir, const std::string& id) { return state_dir / "held" / id; }

std::string release_command(const std::string& id) { return "subagent-supervisor apply " + id + " --allow-flagged"; }

void record_spawn(const fs::path& state_dir, const std::string& id, const LaterExecutionWatch& w) {
  if (!is_child_id(id)) throw std::runtime_error("'" + id + "' is not a child id");
  const fs::path dir = held_dir(state_dir, id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("'" + dir.string() + "': " + ec.message());
  fs::permissions(dir, fs::perms::owner_all, ec);
  json j = {{"id", id},
            {"workspace", w.workspace.string()},
            {"list", w.list},
            {"protected", w.protected_paths},
            {"before", w.before.entries},
            {"complete", w.before.complete},
            // Before the child can run: a birth time at or after it is the child's (or came meanwhile).
            {"spawned_at_ns", now_ns() - 1'000'000'000LL}};
  write_atomic(dir, "spawn.json", j.dump() + "\n");
}

HeldReport settle_later_execution(const fs::path& state_dir, const std::string& id) {
  if (!is_child_id(id)) throw std::runtime_error("'" + id + "' is not a child id");
  const fs::path dir = held_dir(state_dir, id);
  json spawn = read_json(dir / "spawn.json");
  if (spawn.is_null()) {
    json done = read_json(dir / "held.json");
    if (done.is_null()) {  // never recorded, or settled with nothing to hold
      HeldReport none;
      none.id = id;
      none.recorded = false;
      return none;
    }
    return report_from(done);
  }
  HeldReport r;
  r.id = id;
  LaterExecutionSnapshot before;
  std::vector<std::string> list;
  long long spawned_at = 0;
  try {
    spawned_at = spawn.value("spawned_at_ns", 0LL);
    r.workspace = spawn.at("workspace").get<std::string>();
    list = spawn.at("list").get<std::vector<std::string>>();
    r.protected_paths = spawn.at("protected").get<std::vector<std::string>>();
    before.entries = spawn.at("before").get<std::map<std::string, std::string>>();
    before.complete = spawn.at("complete").get<bool>();
  } catch (const json::exception& e) {
    throw std::runtime_error("'" + (dir / "spawn.json").string() + "' is damaged: " + e.what());
  }
  bool complete = true;
  const std::vector<std::string> found = find_later_execution(r.workspace, list, kMaxSettleEntries, &complete);
  LaterExecutionSnapshot after = snapshot_later_execution(r.workspace, list, r.protected_paths);
  r.scan_complete = before.complete && complete;
  r.changed = later_execution_changes(before, after);
  r.new_repositories = nested_of(r.changed);
  const std::set<std::string> prot(r.protected_paths.begin(), r.protected_paths.end());
  for (const auto& p : r.changed)
    if (prot.count(p)) r.changed_outside.push_back(p);
  // Held: every listed path that was not read-only in the child and exists now; one beneath
  // another goes with it. When the spawn scan stopped early, what lay beyond it was the user's and
  // not read-only either: only what was born since the spawn is held then.
  std::vector<std::string> hold;
  for (const auto& p : found) {
    if (prot.count(p)) continue;
    if (!before.complete && !born_since(r.workspace, p, spawned_at)) continue;
    bool under = false;
    for (const auto& h : hold) under |= p.size() > h.size() && p.compare(0, h.size(), h) == 0 && p[h.size()] == '/';
    if (!under) hold.push_back(p);
  }
  if (!hold.empty()) {
    Fd ws = open_dir(r.workspace);
    Fd files = open_below(open_dir(dir).get(), "files", true, (dir / "files").string());
    for (const auto& p : hold) {
      try {
        const std::string moved = quarantine(ws.get(), files.get(), p);
        if (!moved.empty() && std::find(r.held.begin(), r.held.end(), moved) == r.held.end()) r.held.push_back(moved);
      } catch (const std::exception& e) {
        r.failed.push_back(p + ": " + e.what());
      }
    }
  }
  if (r.held.empty() && r.failed.empty()) {
    // Nothing to release: no record is kept (`apply ID` then finds nothing either).
    std::error_code ec;
    fs::remove_all(dir, ec);
    return r;
  }
  write_atomic(dir, "held.json", report_json(r).dump(2) + "\n");
  ::unlink((dir / "spawn.json").c_str());
  return r;
}

json held_to_json(const HeldReport& r, const fs::path& state_dir) {
  json j = {{"changed", r.changed},
            {"new_repositories", r.new_repositories},
            {"protected", json::array()},
            {"scan_complete", r.scan_complete},
            {"held", r.held}};
  for (const auto& p : r.protected_paths) j["protected"].push_back((r.workspace / p).string());
  if (!r.changed_outside.empty()) j["changed_outside"] = r.changed_outside;
  if (!r.held.empty()) {
    j["held_dir"] = (held_dir(state_dir, r.id) / "files").string();
    j["release"] = release_command(r.id);
    j["warning"] =
        "the child created paths whose contents run on the user's next ordinary command (git, an editor, an "
        "agent, CI); they are held in held_dir, not in the workspace: review them there (without running git "
        "in them), then release them with the release command";
  }
  if (!r.scan_complete)
    j["scan_warning"] =
        "the workspace has too many entries for a complete scan: later-execution paths beyond it that existed at "
        "spawn were neither read-only nor held (only those born since the spawn were held)";
  if (!r.failed.empty()) {
    j["not_held"] = r.failed;
    j["warning"] =
        "paths the child created that run on the user's next ordinary command could not be moved aside and are "
        "LIVE in the workspace (not_held): remove or review them before running anything there";
  }
  return j;
}

ReleaseResult release_held(const fs::path& state_dir, const std::string& id, bool allow_flagged) {
  ReleaseResult r;
  if (!is_child_id(id)) {
    r.message = "'" + id + "' is not a child id";
    return r;
  }
  const fs::path dir = held_dir(state_dir, id);
  json j;
  try {
    j = read_json(dir / "held.json");
  } catch (const std::exception& e) {
    r.found = true;
    r.message = e.what();
    return r;
  }
  if (j.is_null()) return r;
  r.found = true;
  HeldReport h = report_from(j);
  r.files = h.held;
  if (h.released) {
    r.ok = true;
    r.message = "the held files of child " + id + " were released already; nothing to do";
    r.files.clear();
    return r;
  }
  if (h.held.empty()) {
    r.ok = true;
    r.message = "child " + id + " left nothing among the later-execution paths; nothing to release";
    return r;
  }
  const fs::path files_dir = dir / "files";
  if (!allow_flagged) {
    std::string what;
    for (const auto& p : h.held) what += "\n  later-execution path " + p;
    r.message = "refused: child " + id + " left paths whose contents run on the next ordinary command; they are " +
                "held in " + files_dir.string() + " and nothing was changed (review them, then release with " +
                "--allow-flagged, or allow_flagged: true):" + what;
    return r;
  }
  try {
    Fd ws = open_dir(h.workspace);
    Fd files = open_dir(files_dir);
    // Everything is checked before anything moves.
    for (const auto& p : h.held) {
      std::vector<std::string> parts = components(p);
      std::size_t stop = 0;
      Fd parent = walk_parent(ws.get(), parts, false, &stop);
      if (!parent) {
        const std::string on_way = join(parts, stop);
        if (std::string(kind(ws.get(), on_way)) != "missing") {
          r.message = "refused: '" + on_way + "' in " + h.workspace.string() + " is not a plain directory now; " +
                      "nothing was released";
          return r;
        }
      } else if (exists_at(parent.get(), parts.back())) {
        r.message = "refused: '" + p + "' exists in " + h.workspace.string() +
                    " now; nothing was released (move it away first)";
        return r;
      }
      Fd src = walk_parent(files.get(), parts, false, &stop);
      if (!src || !exists_at(src.get(), parts.back())) {
        r.message = "the held copy of '" + p + "' is missing from " + files_dir.string() + "; nothing was released";
        return r;
      }
    }
    for (const auto& p : h.held) {
      std::vector<std::string> parts = components(p);
      std::size_t stop = 0;
      Fd src = walk_parent(files.get(), parts, false, &stop);
      Fd dst = walk_parent(ws.get(), parts, true, &stop, 0777);  // the workspace's own: as mkdir makes them
      if (!src || !dst) throw std::runtime_error("'" + p + "' changed during the release");
      move_at(src.get(), parts.back(), dst.get(), parts.back());
    }
  } catch (const std::exception& e) {
    r.message = "could not release the held files of child " + id + ": " + e.what();
    return r;
  }
  h.released = true;
  try {
    write_atomic(dir, "held.json", report_json(h).dump(2) + "\n");
    std::error_code ec;
    fs::remove_all(files_dir, ec);
  } catch (const std::exception&) {
  }
  r.ok = true;
  r.message = "released the held later-execution files of child " + id + " into " + h.workspace.string() + " (" +
              std::to_string(h.held.size()) + " paths)";
  return r;
}

std::string new_child_id() {
  unsigned char bytes[6];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<std::size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id.push_back(hex[b >> 4]);
    id.push_back(hex[b & 15]);
  }
  return id;
}

}  // namespace supervisor
