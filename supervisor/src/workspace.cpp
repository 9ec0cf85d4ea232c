#include "supervisor/workspace.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string home() { return env_or("HOME", "/root"); }

// git with hooks, pagers and external diff/textconv programs switched off: the supervisor runs it
// on directories a child has written to.
std::vector<std::string> git(const fs::path& dir, std::initializer_list<std::string> args) {
  std::vector<std::string> v = {"git", "-C", dir.string(), "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat",
                                "-c", "diff.external=", "-c", "core.fsmonitor=false",
                                "-c", "user.name=subagent-supervisor", "-c", "user.email=subagent-supervisor@localhost"};
  v.insert(v.end(), args);
  return v;
}

ProcessResult must(const std::vector<std::string>& argv, const fs::path& cwd, const std::string& what) {
  ProcessResult r = run_process(argv, cwd);
  if (r.code != 0) {
    std::string msg = r.err.empty() ? r.out : r.err;
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    throw std::runtime_error(what + ": " + msg);
  }
  return r;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

}  // namespace

WorkspaceConfig default_workspace_config() {
  WorkspaceConfig c;
  if (::geteuid() == 0) {
    c.lock_dir = "/run/lock/subagent-supervisor";
  } else if (const char* rt = std::getenv("XDG_RUNTIME_DIR"); rt && *rt) {
    c.lock_dir = fs::path(rt) / "subagent-supervisor" / "locks";
  } else {
    c.lock_dir = "/tmp/subagent-supervisor-" + std::to_string(::geteuid()) + "/locks";
  }
  if (const char* s = std::getenv("SUBAGENT_STATE_DIR"); s && *s) c.state_dir = s;
  else c.state_dir = fs::path(env_or("XDG_STATE_HOME", home() + "/.local/state")) / "subagent-supervisor";
  return c;
}

std::string workspace_key(const fs::path& workspace) {
  struct stat st {};
  if (::stat(workspace.c_str(), &st) != 0)
    throw std::runtime_error("workspace '" + workspace.string() + "': " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error("workspace '" + workspace.string() + "' is not a directory");
  return std::to_string(major(st.st_dev)) + "." + std::to_string(minor(st.st_dev)) + "-" + std::to_string(st.st_ino);
}

std::optional<WorkspaceLock> WorkspaceLock::try_acquire(const fs::path& workspace, const fs::path& lock_dir) {
  const std::string key = workspace_key(workspace);
  std::error_code ec;
  fs::create_directories(lock_dir, ec);
  if (ec) throw std::runtime_error("lock directory '" + lock_dir.string() + "': " + ec.message());
  const fs::path file = lock_dir / ("ws-" + key + ".lock");
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(errno));
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return std::nullopt;
    throw std::runtime_error("lock file '" + file.string() + "': " + std::strerror(err));
  }
  // Record who holds it, for a person looking at the lock directory.
  std::string who = std::to_string(::getpid()) + " " + workspace.string() + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::write(fd, who.data(), who.size());
  return WorkspaceLock(fd, key);
}

WorkspaceLock::WorkspaceLock(WorkspaceLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)), key_(std::move(o.key_)) {}
WorkspaceLock& WorkspaceLock::operator=(WorkspaceLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    key_ = std::move(o.key_);
  }
  return *this;
}
WorkspaceLock::~WorkspaceLock() {
  if (fd_ >= 0) ::close(fd_);
}

ProcessResult run_process(const std::vector<std::string>& argv, const fs::path& cwd) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ProcessResult r;
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Worktree create_worktree(const fs::path& workspace, const fs::path& state_dir, const std::string& id) {
  Worktree wt;
  wt.source = workspace;
  wt.path = state_dir / "worktrees" / id;
  fs::create_directories(wt.path.parent_path());
  ProcessResult top = run_process(git(workspace, {"rev-parse", "--show-toplevel"}), workspace);
  ProcessResult head = run_process(git(workspace, {"rev-parse", "--verify", "HEAD"}), workspace);
  if (top.code == 0 && head.code == 0) {
    wt.git = true;
    wt.base = lines(head.out).at(0);
    wt.git_common_dir = fs::canonical(workspace / lines(must(git(workspace, {"rev-parse", "--git-common-dir"}), workspace, "git rev-parse").out).at(0));
    must(git(workspace, {"worktree", "add", "--detach", "--quiet", wt.path.string(), wt.base}), workspace,
         "could not create a git worktree for " + workspace.string());
    // The child's workspace is the worktree's copy of the directory it was given.
    fs::path rel = fs::relative(workspace, fs::canonical(lines(top.out).at(0)));
    if (!rel.empty() && rel != ".") {
      wt.path /= rel;
    }
    return wt;
  }
  // Not a git repository (or one without commits): a copy with a baseline commit of its own.
  fs::copy(workspace, wt.path, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  must(git(wt.path, {"init", "--quiet"}), wt.path, "git init in the copy");
  must(git(wt.path, {"add", "-A"}), wt.path, "git add in the copy");
  must(git(wt.path, {"commit", "--quiet", "--allow-empty", "--no-verify", "-m", "baseline"}), wt.path, "baseline commit");
  wt.base = lines(must(git(wt.path, {"rev-parse", "HEAD"}), wt.path, "git rev-parse").out).at(0);
  return wt;
}

Patch collect_patch(const Worktree& wt, const fs::path& state_dir, const std::string& id) {
  Patch p;
  must(git(wt.path, {"add", "-A", "."}), wt.path, "git add in the worktree");
  p.diff = must(git(wt.path, {"diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--relative", wt.base}),
                wt.path, "git diff in the worktree").out;
  p.files = lines(must(git(wt.path, {"diff", "--cached", "--name-only", "--relative", wt.base}), wt.path, "git diff").out);
  p.bytes = p.diff.size();
  fs::path dir = state_dir / "patches";
  fs::create_directories(dir);
  p.file = dir / (id + ".patch");
  std::ofstream(p.file, std::ios::binary) << p.diff;
  json meta = {{"id", id}, {"workspace", wt.source.string()}, {"base", wt.base}, {"git", wt.git}, {"files", p.files},
               {"patch", p.file.string()}};
  std::ofstream(dir / (id + ".json")) << meta.dump(2) << "\n";
  return p;
}

void remove_worktree(const Worktree& wt) noexcept {
  try {
    if (wt.git) {
      run_process(git(wt.source, {"worktree", "remove", "--force", wt.path.string()}), wt.source);
      run_process(git(wt.source, {"worktree", "prune"}), wt.source);
    }
    std::error_code ec;
    fs::remove_all(wt.path, ec);
  } catch (...) {
  }
}

ApplyResult apply_patch(const fs::path& state_dir, const std::string& id) {
  ApplyResult r;
  if (id.empty() || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    r.message = "'" + id + "' is not a child id";
    return r;
  }
  fs::path meta_file = state_dir / "patches" / (id + ".json");
  std::ifstream in(meta_file);
  if (!in) {
    r.message = "no patch for child " + id + " (looked for " + meta_file.string() + ")";
    return r;
  }
  json meta = json::parse(in, nullptr, false);
  if (meta.is_discarded() || !meta.contains("workspace") || !meta.contains("patch")) {
    r.message = "patch record " + meta_file.string() + " is damaged";
    return r;
  }
  fs::path ws = meta["workspace"].get<std::string>();
  fs::path patch = meta["patch"].get<std::string>();
  r.files = meta.value("files", std::vector<std::string>{});
  if (fs::file_size(patch) == 0) {
    r.ok = true;
    r.message = "child " + id + " changed nothing; nothing to apply";
    return r;
  }
  ProcessResult check = run_process(git(ws, {"apply", "--check", "--binary", patch.string()}), ws);
  if (check.code != 0) {
    r.message = "the patch of child " + id + " no longer applies to " + ws.string() + "; nothing was changed:\n" + check.err;
    return r;
  }
  ProcessResult apply = run_process(git(ws, {"apply", "--binary", patch.string()}), ws);
  if (apply.code != 0) {
    r.message = "git apply failed for child " + id + ": " + apply.err;
    return r;
  }
  r.ok = true;
  r.message = "applied the patch of child " + id + " to " + ws.string() + " (" + std::to_string(r.files.size()) + " files)";
  return r;
}

}  // namespace supervisor
