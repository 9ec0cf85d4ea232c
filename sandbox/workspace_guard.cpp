#include "sandbox/workspace_guard.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace sandbox {
namespace {

namespace fs = std::filesystem;

// The directory itself only: beneath them live ordinary project directories (/home/u/repo,
// /tmp/build-1, /opt/src/x), but the directory as a whole is everyone's.
// /dev too: its subdirectories (/dev/pts, /dev/shm, /dev/mqueue) are dedicated mounts a policy may
// grant on purpose (a terminal test, POSIX shared memory).
constexpr std::array<std::string_view, 14> kExactly = {"/",        "/home",      "/root",       "/var",   "/run",
                                                       "/srv",     "/opt",       "/mnt",        "/media", "/tmp",
                                                       "/var/tmp", "/usr/local", "/lost+found", "/dev"};

// The system: the directory and everything beneath it.
constexpr std::array<std::string_view, 17> kSubtrees = {
    "/etc",  "/usr", "/bin",     "/sbin",    "/lib",       "/lib32",     "/lib64",    "/libx32",     "/boot",
    "/proc", "/sys", "/var/lib", "/var/log", "/var/cache", "/var/spool", "/var/mail", "/var/backups"};

// A "." or ".." component: the string comparison below would read it as a name.
bool has_dot_component(std::string_view p) {
  for (std::size_t at = 0; at <= p.size();) {
    std::size_t end = p.find('/', at);
    if (end == std::string_view::npos) end = p.size();
    const std::string_view c = p.substr(at, end - at);
    if (c == "." || c == "..") return true;
    at = end + 1;
  }
  return false;
}

// `dir` is `top` or lies beneath it. Every caller passes lexically normal paths, where that is a
// prefix ending at a separator: a string comparison, not path::lexically_relative's per-component
// allocations (a launch checks each of its roots against every home's few dozen credential paths,
// and that comparison was most of sandbox::prepare's time). Paths with "." or ".." components still
// take the lexical route.
bool within(const fs::path& dir, const fs::path& top) {
  std::string_view d = dir.native(), t = top.native();
  if (t.empty() || d.empty() || has_dot_component(d) || has_dot_component(t) ||
      d.find("//") != std::string_view::npos || t.find("//") != std::string_view::npos) {
    auto rel = dir.lexically_relative(top);
    return !rel.empty() && *rel.begin() != "..";
  }
  if (d.size() > 1 && d.back() == '/') d.remove_suffix(1);  // "/a/b/" names the directory "/a/b"
  if (t.size() > 1 && t.back() == '/') t.remove_suffix(1);
  if (d.size() < t.size() || d.compare(0, t.size(), t) != 0) return false;
  return d.size() == t.size() || t.back() == '/' || d[t.size()] == '/';
}

// Strictly beneath (within() also holds for the directory itself: its relative path is ".").
bool below(const fs::path& dir, const fs::path& top) { return dir != top && within(dir, top); }

// The caller's home directory as /etc/passwd (or another NSS source) names it. getpwuid_r, not
// getpwuid: this runs on the loop (Hub::spawn) and on the offload pool (prepare) at once, and
// getpwuid's result lives in one static buffer.
std::string passwd_home() {
  struct passwd pw {};
  struct passwd* found = nullptr;
  const long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);  // glibc: 1024; -1 when it has no bound
  std::vector<char> buf(hint > 0 ? static_cast<std::size_t>(hint) : 1024);
  int rc;
  while ((rc = ::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found)) == ERANGE && buf.size() < (1u << 20))
    buf.resize(buf.size() * 2);
  return rc == 0 && found && pw.pw_dir ? std::string(pw.pw_dir) : std::string();
}

// The caller's home directories ($HOME and the passwd entry), symlinks resolved at each call (a
// home relinked elsewhere counts at once). Only the passwd lookup, which reads /etc/passwd, is
// kept for a second, as current_secrets() keeps its list: a launch checks each of its write roots.
std::vector<fs::path> home_directories() {
  static std::mutex mutex;
  static std::string cached;
  static uid_t cached_uid = static_cast<uid_t>(-1);
  static std::chrono::steady_clock::time_point made;
  const uid_t uid = ::getuid();
  const auto now = std::chrono::steady_clock::now();
  std::string from_passwd;
  {
    std::lock_guard lock(mutex);
    if (uid != cached_uid || now - made > std::chrono::seconds(1)) {
      cached = passwd_home();
      cached_uid = uid;
      made = now;
    }
    from_passwd = cached;
  }
  std::vector<fs::path> homes;
  auto add = [&](const char* h) {
    if (!h || h[0] != '/') return;
    std::error_code ec;
    fs::path p = fs::weakly_canonical(h, ec);
    if (!ec) homes.push_back(p);
  };
  add(std::getenv("HOME"));
  add(from_passwd.c_str());
  return homes;
}

// Credentials and keys beneath a home directory (relative to it). A directory is refused when it is
// one of them, lies inside one, or holds one while itself lying below the home directory (~/.config
// holds ~/.config/gh; ~/.cargo holds ~/.cargo/credentials.toml).
constexpr std::array<std::string_view, 27> kSecrets = {
    ".ssh", ".aws", ".gnupg", ".config/gh", ".config/gcloud", ".docker", ".kube", ".azure", ".netrc",
    ".git-credentials", ".npmrc", ".pypirc", ".cargo/credentials.toml", ".cargo/credentials", ".pgpass", ".my.cnf",
    ".vault-token", ".password-store", ".local/share/keyrings", ".terraform.d", ".gem/credentials", ".s3cfg", ".boto",
    ".config/git/credentials", ".config/hub",
    // The supervisor's own model config (API key variables, endpoints) and state (below).
    ".config/subagent-supervisor", ".config/rclone"};

// The supervisor's state directory holds the transcripts (every child's conversation) and the
// supervisor registries (secret); worktrees/, where every implementation child's own workspace lies
// (and the sandboxed `git worktree add` writes), and patches/, which the sandboxed git of `apply`
// reads and writes, are not. The state directory itself is refused (and its ancestors below a home).
constexpr std::array<std::string_view, 2> kStateSecrets = {"transcripts", "supervisors"};

// A lexically normal path as a string without a trailing separator ("/" stays "/"): what the
// credential checks compare. Normal absolute paths have no "." or ".." components and no repeated
// separators, so "is or lies beneath" is a prefix ending at a separator.
std::string key_of(const fs::path& normal) {
  std::string s = normal.native();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool within_key(std::string_view d, std::string_view t) {
  if (t.empty() || d.size() < t.size() || d.compare(0, t.size(), t) != 0) return false;
  return d.size() == t.size() || t.back() == '/' || d[t.size()] == '/';
}

bool below_key(std::string_view d, std::string_view t) { return d.size() != t.size() && within_key(d, t); }

// One credential path, as key_of() strings: a launch checks each of its roots against every
// home's few dozen entries, and comparing std::filesystem paths component by component (and
// building a few of them per entry) was most of the `sandbox` command's own CPU (bench/README.md,
// "the whole command against bwrap").
struct Secret {
  std::string lexical;    // as named (home + entry), for the ancestor rule
  std::string canonical;  // symlinks resolved (the same when it does not exist)
  std::string home;       // the home it lies in ("" for one named by the environment outside every home)
  bool holder = false;    // refused itself and as an ancestor, not what lies inside (the state directory)
};

// Symlinks resolved. One lstat settles an entry that does not exist; secrets() calls this only for
// entries whose first component is present in their home (see present_in).
fs::path resolved(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return p.lexically_normal();
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c;
}

// Every user's home directory: each entry of /etc/passwd (fgetpwent_r: reentrant, this runs on the
// loop and the offload pool at once), $HOME and /root. "/" and homes that do not exist
// (/nonexistent) are left out: nothing of anyone's lies in them.
std::vector<fs::path> every_home() {
  std::vector<fs::path> homes;
  auto add = [&](const char* h) {
    if (!h || h[0] != '/') return;
    std::error_code ec;
    fs::path p = fs::canonical(h, ec);
    if (ec || p == fs::path("/")) return;
    for (const fs::path& q : homes)
      if (q == p) return;
    homes.push_back(p);
  };
  add(std::getenv("HOME"));
  add("/root");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen("/etc/passwd", "re"), &std::fclose);
  if (f) {
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::vector<char> buf(4096);
    while (::fgetpwent_r(f.get(), &pw, buf.data(), buf.size(), &found) == 0 && found) add(pw.pw_dir);
  }
  return homes;
}

// The first components of kSecrets' entries and of the state directory's path ("/.local/...").
// One fstatat of each in a home (a lookup of one name, where the lstat of a whole path walks it
// again from /) tells which entries can exist there at all; system accounts' homes (/usr/sbin,
// /bin, /var/mail) have none of them. Listing a home instead cost more: ext4 sorts a large
// directory's entries to list them.
std::vector<std::string_view> first_components() {
  std::vector<std::string_view> out;
  auto add = [&](std::string_view entry) {
    entry = entry.substr(0, entry.find('/'));
    if (std::find(out.begin(), out.end(), entry) == out.end()) out.push_back(entry);
  };
  for (std::string_view s : kSecrets) add(s);
  add(".local");
  return out;
}

// The first components present in `home`, or nothing when it cannot be opened (then every entry
// is looked up whole, as resolved() does).
std::optional<std::vector<std::string_view>> present_in(const fs::path& home) {
  static const std::vector<std::string_view> firsts = first_components();
  const int dirfd = ::open(home.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) return std::nullopt;
  std::vector<std::string_view> present;
  for (std::string_view name : firsts) {
    struct stat st {};
    const std::string z(name);
    if (::fstatat(dirfd, z.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) present.push_back(name);
  }
  ::close(dirfd);
  return present;
}

std::vector<Secret> secrets() {
  std::vector<Secret> out;
  // `absent`: the entry's first component is not in its home, so it does not exist and its
  // resolved form is its lexical one (what resolved() returns after a failed lstat); a home is
  // canonical and the entries normal relative paths, so their join is normal already.
  auto add = [&](const fs::path& lexical, const fs::path& home, bool holder, bool absent = false) {
    Secret s;
    s.lexical = key_of(absent ? lexical : lexical.lexically_normal());
    s.canonical = absent ? s.lexical : key_of(resolved(lexical));
    s.home = home.empty() ? std::string() : key_of(home.lexically_normal());
    s.holder = holder;
    out.push_back(std::move(s));
  };
  auto add_state = [&](const fs::path& state, const fs::path& home, bool absent = false) {
    add(state, home, true, absent);
    for (std::string_view s : kStateSecrets) add(state / s, home, false, absent);
  };
  const std::vector<fs::path> homes = every_home();
  for (const fs::path& home : homes) {
    const auto present = present_in(home);
    auto absent = [&](std::string_view entry) {
      return present && std::find(present->begin(), present->end(), entry.substr(0, entry.find('/'))) == present->end();
    };
    for (std::string_view s : kSecrets) add(home / s, home, false, absent(s));
    add_state(home / ".local/state/subagent-supervisor", home, absent(".local"));
  }
  // What the environment points the supervisor at instead (models.json, state_dir).
  auto home_of = [&](const fs::path& p) {
    for (const fs::path& h : homes)
      if (below(p, h)) return h;
    return fs::path();
  };
  auto env_path = [](const char* name) -> fs::path {
    const char* v = std::getenv(name);
    return v && v[0] == '/' ? fs::path(v) : fs::path();
  };
  if (fs::path m = env_path("SUBAGENT_MODEL_CONFIG"); !m.empty()) add(m, home_of(resolved(m)), false);
  if (fs::path x = env_path("XDG_CONFIG_HOME"); !x.empty()) add(x / "subagent-supervisor", home_of(resolved(x)), false);
  if (fs::path x = env_path("XDG_STATE_HOME"); !x.empty()) add_state(x / "subagent-supervisor", home_of(resolved(x)));
  if (fs::path s = env_path("SUBAGENT_STATE_DIR"); !s.empty()) add_state(s, home_of(resolved(s)));
  return out;
}

}  // namespace

// secrets() reads /etc/passwd and resolves every home's entries: a few hundred syscalls. A launch
// checks each of its roots, and git steps launch in parallel, so the list is kept for a second
// (a credential directory made or linked later is seen within that second) and for as long as the
// variables it depends on stay the same.
static std::shared_ptr<const std::vector<Secret>> current_secrets() {
  static std::mutex mutex;
  static std::shared_ptr<const std::vector<Secret>> cached;
  static std::string cached_key;
  static std::chrono::steady_clock::time_point made;
  std::string key;
  for (const char* v : {"HOME", "SUBAGENT_MODEL_CONFIG", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "SUBAGENT_STATE_DIR"}) {
    const char* x = std::getenv(v);
    key += x ? x : "";
    key.push_back('\0');
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex);
  if (!cached || key != cached_key || now - made > std::chrono::seconds(1)) {
    cached = std::make_shared<const std::vector<Secret>>(secrets());
    cached_key = std::move(key);
    made = now;
  }
  return cached;
}

std::string credential_reason(const fs::path& dir) {
  // Every secret is absolute and normal; a relative `dir` matches none of them, as before.
  const std::string d = key_of(dir.lexically_normal());
  const auto list = current_secrets();
  for (const Secret& s : *list) {
    for (const std::string* p : {&s.canonical, &s.lexical}) {
      if (d == *p) return "it is " + *p + ", where credentials or the supervisor's own state are kept";
      if (!s.holder && below_key(d, *p))
        return "it lies inside " + *p + ", where credentials or the supervisor's own state are kept";
    }
    // Ancestors below the home directory (the home itself and above are the rules above).
    if (!s.home.empty() && below_key(d, s.home) && (below_key(s.lexical, d) || below_key(s.canonical, d)))
      return "it holds " + s.lexical + ", where credentials or the supervisor's own state are kept";
  }
  return {};
}

std::string unsafe_workspace_reason(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (!d.has_filename() && d != d.root_path()) d = d.parent_path();  // "/tmp/" is "/tmp"
  if (d == fs::path("/")) return "it is the root directory: every file on the host lies beneath it";
  for (const fs::path& home : home_directories()) {
    if (d == home) return "it is the home directory of uid " + std::to_string(::getuid()) + " itself";
    if (within(home, d)) return "the home directory " + home.string() + " lies beneath it";
  }
  for (std::string_view top : kSubtrees)
    if (d == fs::path(top) || within(d, fs::path(top)))
      return "it is a system directory (" + std::string(top) + (d == fs::path(top) ? "" : "/...") + ")";
  for (std::string_view top : kExactly)
    if (d == fs::path(top)) return "it is a shared system directory (" + std::string(top) + ")";
  return credential_reason(d);
}

std::string unsafe_root_reason(const fs::path& dir, RootKind kind) {
  if (kind == RootKind::write) return unsafe_workspace_reason(dir);
  // Reading or running what lies beneath these reaches every user's or the host's state.
  static constexpr std::array<std::string_view, 13> kWholeTrees = {
      "/etc", "/proc", "/sys", "/dev", "/var", "/run", "/boot", "/root", "/home", "/tmp", "/srv", "/mnt", "/media"};
  fs::path d = dir.lexically_normal();
  if (!d.has_filename() && d != d.root_path()) d = d.parent_path();
  if (d == fs::path("/")) return "it is the root directory: every file on the host lies beneath it";
  for (const fs::path& home : home_directories()) {  // a project directory inside it is fine
    if (d == home) return "it is the home directory of uid " + std::to_string(::getuid()) + " itself";
    if (within(home, d)) return "the home directory " + home.string() + " lies beneath it";
  }
  for (std::string_view top : kWholeTrees)
    if (d == fs::path(top)) return "it is the whole of " + std::string(top) + ", shared by every user and the host";
  return credential_reason(d);
}

namespace {

void refuse(const fs::path& path, const std::string& what, std::string (*reason)(const fs::path&)) {
  std::error_code ec;
  fs::path canonical = fs::canonical(path, ec);
  if (ec) canonical = path.lexically_normal();  // the caller reports a missing path its own way
  std::string why = reason(canonical);
  if (why.empty()) return;
  std::string shown = "'" + path.string() + "'";
  if (canonical != path) shown += " (resolved: '" + canonical.string() + "')";
  throw UnsafeWorkspaceError(what + " " + shown + " is refused: " + why +
                             ". A child's grants on it would reach far beyond one project; pass " +
                             kAllowUnsafeWorkspaceFlag + " to allow it anyway");
}

}  // namespace

void check_workspace(const fs::path& path, const std::string& what) { refuse(path, what, &unsafe_workspace_reason); }

void check_read_root(const fs::path& path, const std::string& what) { refuse(path, what, &credential_reason); }

}  // namespace sandbox
