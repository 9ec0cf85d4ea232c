#include "sandbox/workspace_guard.hpp"

#include <pwd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
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

bool within(const fs::path& dir, const fs::path& top) {
  auto rel = dir.lexically_relative(top);
  return !rel.empty() && *rel.begin() != "..";
}

std::vector<fs::path> home_directories() {
  std::vector<fs::path> homes;
  auto add = [&](const char* h) {
    if (!h || h[0] != '/') return;
    std::error_code ec;
    fs::path p = fs::weakly_canonical(h, ec);
    if (!ec) homes.push_back(p);
  };
  add(std::getenv("HOME"));
  // getpwuid_r, not getpwuid: this runs on the loop (Hub::spawn) and on the offload pool (prepare)
  // at once, and getpwuid's result lives in one static buffer.
  struct passwd pw {};
  struct passwd* found = nullptr;
  const long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);  // glibc: 1024; -1 when it has no bound
  std::vector<char> buf(hint > 0 ? static_cast<std::size_t>(hint) : 1024);
  int rc;
  while ((rc = ::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found)) == ERANGE && buf.size() < (1u << 20))
    buf.resize(buf.size() * 2);
  if (rc == 0 && found) add(pw.pw_dir);
  return homes;
}

}  // namespace

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
  return {};
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
  return {};
}

void check_workspace(const fs::path& path, const std::string& what) {
  std::error_code ec;
  fs::path canonical = fs::canonical(path, ec);
  if (ec) canonical = path.lexically_normal();  // the caller reports a missing path its own way
  std::string why = unsafe_workspace_reason(canonical);
  if (why.empty()) return;
  std::string shown = "'" + path.string() + "'";
  if (canonical != path) shown += " (resolved: '" + canonical.string() + "')";
  throw UnsafeWorkspaceError(what + " " + shown + " is refused: " + why +
                             ". A child's grants on it would reach far beyond one project; pass " +
                             kAllowUnsafeWorkspaceFlag + " to allow it anyway");
}

}  // namespace sandbox
