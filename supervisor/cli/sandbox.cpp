// `subagent-supervisor sandbox`: any command under exactly the sandbox a preset's child gets.
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "sandbox/launch.hpp"
#include "sandbox/workspace_guard.hpp"
#include "cli/cli.hpp"
#include "cli/install_layout.hpp"
#include "workspace/held.hpp"
#include "policy/preset.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSandboxHelp =
    R"(usage: subagent-supervisor sandbox --preset NAME [--workspace DIR] [--policy-dir DIR] [--verbose]
                                  [--as-pid-1] [--allow-unsafe-workspace] [--state-dir DIR] -- CMD [ARGS...]

Runs CMD under exactly the sandbox a child of preset NAME gets (seccomp, Landlock, namespaces,
rlimits, capabilities, environment allowlist), for security reviewers and for testing children.
stdin, stdout and stderr are passed through; no other file descriptor is. When stdout or stderr is
a regular file (`> out.txt`), CMD writes into a pipe and this command copies it into the file, so
that the preset's file-size limit (0 for the read-only presets) binds only files CMD opens itself.
In the policy's paths, ${workspace} is DIR (default: the current directory), ${child} is CMD's
executable, so CMD is the one program that may be executed, as the child program is for a real
child, and ${home} is a private, empty home (HOME) that ends with CMD.

A minimal init is PID 1 of the sandbox's PID namespace and CMD its child: it passes SIGTERM,
SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH on to CMD, reaps orphans, and ends with
CMD's status. Those signals sent to this command are passed on the same way; a second SIGINT,
SIGTERM or SIGHUP kills the whole sandbox. With --as-pid-1 CMD is PID 1 itself (it then ignores
every signal it has no handler for), and SIGINT, SIGTERM or SIGHUP kills the sandbox at once.

Under a writer preset (worker, implementation) the workspace's later-execution paths (nested .git,
hooks, CI, agent and editor configuration; docs/writers.md) are held as for a child: those that
exist are read-only for CMD, and what CMD created among them is moved, once CMD and everything it
started have ended, into STATE/held/ID/files (STATE: --state-dir, else $SUBAGENT_STATE_DIR, else
$XDG_STATE_HOME/subagent-supervisor). They are listed on stderr with the command that puts them back
(subagent-supervisor apply ID --allow-flagged); the exit status stays CMD's.

Layers the kernel lacks are listed on stderr; a layer the policy marks required makes the launch fail.
"/", the home directory itself, system directories (/etc, /usr, /var/lib, ...) and credential
directories (~/.ssh, ~/.aws, ~/.config, ... of every user; policies/README.md) are refused as DIR,
and credentials as a root of the policy (exit status 64), unless --allow-unsafe-workspace is given.

)";

volatile sig_atomic_t g_child = -1;   // the init (or CMD as PID 1); -1 before launch and once it has ended
bool g_init = true;                   // the sandbox has the minimal init (no --as-pid-1)
volatile sig_atomic_t g_signals = 0;  // SIGINT, SIGTERM and SIGHUP seen so far
volatile sig_atomic_t g_pending = 0;  // a signal that came before the launch returned

// SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH are passed on every time (to the init, which gives them to
// CMD, or to CMD as PID 1). With the init the first SIGINT, SIGTERM or SIGHUP is passed on too and
// a second one kills the sandbox. Without it CMD is PID 1 of its PID namespace, which ignores every
// signal it has no handler for except SIGKILL: interrupting the supervisor ends it for sure.
// Before the launch has returned a signal is kept for then; a second SIGINT, SIGTERM or SIGHUP in
// that time (a launch stuck in exec on a hung file system) ends this process, and the half-made
// sandbox dies with it (its parent-death signal).
void forward_signal(int sig) {
  const bool ending = sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
  const pid_t child = g_child;
  if (child <= 0) {
    if (ending && g_pending != 0) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    }
    g_pending = sig;
    return;
  }
  if (!ending) {
    ::kill(child, sig);
    return;
  }
  if (g_init && g_signals == 0) {
    g_signals = 1;
    ::kill(child, sig);
    return;
  }
  ::kill(-child, SIGKILL);
  ::kill(child, SIGKILL);
}

// A regular file as stdout or stderr would be written by CMD itself, under RLIMIT_FSIZE; a pipe
// in its place is copied into the file here instead. `from` is the pipe's read end.
struct Relay {
  int from = -1;
  int to = -1;
  const char* name = "";
  bool failed = false;  // the file refused a write: the rest is read and dropped
};

void copy_available(Relay& r) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(r.from, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      ::close(r.from);
      r.from = -1;
      return;
    }
    for (ssize_t done = 0; done < n && !r.failed;) {
      ssize_t w = ::write(r.to, buf + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        std::fprintf(stderr,
                     "subagent-supervisor sandbox: writing CMD's %s into its file failed: %s; "
                     "the rest is dropped\n",
                     r.name, std::strerror(errno));
        r.failed = true;
        break;
      }
      done += w;
    }
  }
}

// Copies until CMD has ended and the pipes are drained, and reaps it: its wait status, or -1 when
// waiting failed. When it ends the rest of its tree is killed (before the reap, while the process
// group's number is still its own); a pipe something outside the PID namespace still holds open is
// given up a second later.
int relay_and_wait(const sandbox::Child& child, std::vector<Relay>& relays) {
  using clock = std::chrono::steady_clock;
  int status = 0;
  bool reaped = false;
  clock::time_point give_up{};
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({reaped ? -1 : child.pidfd, POLLIN, 0});
    for (const Relay& r : relays) fds.push_back({r.from, POLLIN, 0});
    bool open = false;
    for (const Relay& r : relays) open |= r.from >= 0;
    if (reaped && !open) return status;
    int timeout = -1;
    if (reaped) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - clock::now()).count();
      if (left <= 0) return status;
      timeout = static_cast<int>(left);
    }
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    for (std::size_t i = 0; i < relays.size(); ++i)
      if (relays[i].from >= 0 && fds[i + 1].revents != 0) copy_available(relays[i]);
    if (!reaped && fds[0].revents != 0) {
      g_child = -1;                 // no signal goes to this pid number once it may be reused
      ::kill(-child.pid, SIGKILL);  // nothing the command left behind outlives it
      int rc;
      while ((rc = ::waitpid(child.pid, &status, 0)) < 0 && errno == EINTR) {
      }
      if (rc < 0) {
        std::fprintf(stderr, "subagent-supervisor sandbox: waiting for the command failed: %s\n", std::strerror(errno));
        status = -1;
      }
      reaped = true;
      give_up = clock::now() + std::chrono::seconds(1);
    }
  }
}

struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// CMD's tree has ended: what it left among the later-execution paths is held, and said so.
void settle_and_report(const fs::path& state_dir, const std::string& id, bool state_dir_given) {
  HeldReport r;
  try {
    r = settle_later_execution(state_dir, id);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "subagent-supervisor sandbox: could not hold the later-execution paths CMD may have created "
                 "(%s); review .git, hooks, agent and editor configuration before running anything in the "
                 "workspace\n",
                 e.what());
    return;
  }
  for (const auto& f : r.failed)
    std::fprintf(stderr, "subagent-supervisor sandbox: LIVE, could not be held: %s\n", f.c_str());
  if (r.held.empty()) return;
  std::fprintf(stderr,
               "subagent-supervisor sandbox: CMD created %zu later-execution path%s (run by the next git, editor "
               "or agent command); held in %s, not in the workspace:\n",
               r.held.size(), r.held.size() == 1 ? "" : "s", (held_dir(state_dir, id) / "files").c_str());
  for (const auto& p : r.held) std::fprintf(stderr, "  %s\n", p.c_str());
  std::string release = release_command(id);
  if (state_dir_given) release += " --state-dir " + state_dir.string();
  std::fprintf(stderr, "  review them there (without running git in them), then release them with: %s\n",
               release.c_str());
}

std::string resolve(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return fs::absolute(cmd).lexically_normal().string();
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t end = p.find(':', start);
    std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) {
      fs::path cand = fs::path(dir) / cmd;
      if (::access(cand.c_str(), X_OK) == 0 && fs::is_regular_file(cand)) return fs::absolute(cand).string();
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  throw NotFound("command '" + cmd + "' was not found in PATH");
}

}  // namespace

int cmd_sandbox(Args args) {
  std::string preset_name, workspace = ".", policy_dir, state_dir_arg;
  bool verbose = false, allow_unsafe_workspace = false, as_pid_1 = false;
  std::vector<std::string> command;
  while (auto a = args.next()) {
    if (*a == "-h" || *a == "--help") {
      std::fputs(kSandboxHelp, stdout);
      std::fputs("\n", stdout);
      std::fputs(kExitStatusTable, stdout);
      return 0;
    } else if (*a == "--preset")
      preset_name = args.value(*a);
    else if (*a == "--workspace")
      workspace = args.value(*a);
    else if (*a == "--policy-dir")
      policy_dir = args.value(*a);
    else if (*a == "--verbose" || *a == "-v")
      verbose = true;
    else if (*a == "--allow-unsafe-workspace")
      allow_unsafe_workspace = true;
    else if (*a == "--as-pid-1")
      as_pid_1 = true;
    else if (*a == "--state-dir")
      state_dir_arg = args.value(*a);
    else if (*a == "--") {
      command = args.rest();
      break;
    } else
      throw UsageError("unknown option '" + *a + "' (the command goes after --; see sandbox --help)");
  }
  if (preset_name.empty()) throw UsageError("--preset is required");
  if (command.empty()) throw UsageError("no command: put it after --, e.g. sandbox --preset explore -- /bin/ls");

  // The sandbox command shows no digest (policy explain does), so it computes none.
  Preset preset = load_preset_or_usage(
      preset_name, policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir),
      [](const std::string& name, const fs::path& dir) { return load_preset_undigested(name, dir); });
  std::error_code ec;
  fs::path ws = fs::canonical(workspace, ec);
  if (ec || !fs::is_directory(ws)) throw UsageError("workspace '" + workspace + "' is not an existing directory");
  if (!allow_unsafe_workspace) {
    try {
      sandbox::check_workspace(workspace, "workspace");
    } catch (const sandbox::UnsafeWorkspaceError& e) {
      throw UsageError(e.what());
    }
  }

  // A writer's later-execution paths, as the hub watches a worker's (docs/writers.md, section 3).
  const fs::path state_dir = state_dir_arg.empty() ? default_workspace_state_dir() : fs::absolute(state_dir_arg);
  std::string held_id;
  // Not on a workspace the user had to allow (/, a home directory, /tmp): its walk would reach
  // everyone's files, and what others create there meanwhile would be held too.
  const bool unsafe = !sandbox::unsafe_workspace_reason(ws).empty();
  if (preset.workspace_mode != WorkspaceMode::read && unsafe)
    std::fprintf(stderr,
                 "subagent-supervisor sandbox: later-execution paths are not held on a workspace allowed with "
                 "--allow-unsafe-workspace\n");
  if (preset.workspace_mode != WorkspaceMode::read && !unsafe) {
    try {
      LaterExecutionWatch w = watch_later_execution(ws, preset.writes.later_execution);
      for (const auto& rel : w.protected_paths) preset.sandbox.protected_paths.push_back((ws / rel).string());
      held_id = new_child_id();  // named as a child is
      record_spawn(state_dir, held_id, w);
    } catch (const std::exception& e) {
      // The sandbox itself does not depend on it (a user without a writable state directory, e.g.
      // `sudo -u` with root's HOME, still gets CMD run): said plainly, and nothing is held.
      held_id.clear();
      std::fprintf(stderr,
                   "subagent-supervisor sandbox: could not record the workspace's later-execution paths (%s); "
                   "what CMD creates among them will NOT be held (--state-dir DIR names a writable one)\n",
                   e.what());
    }
  }
  // CMD never ran: its spawn record has nothing to settle.
  auto forget_held = [&] {
    std::error_code ignored;
    if (!held_id.empty()) fs::remove_all(held_dir(state_dir, held_id), ignored);
  };

  sandbox::LaunchRequest req;
  try {
    req.executable = resolve(command[0]);
  } catch (const NotFound& e) {
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    forget_held();
    return kNotFound;
  }
  req.argv = command;
  req.workspace = ws;
  req.allow_unsafe_workspace = allow_unsafe_workspace;
  req.child_dir = req.executable;
  req.init = !as_pid_1;
  g_init = req.init;
  req.stdin_fd = STDIN_FILENO;
  req.stdout_fd = STDOUT_FILENO;
  req.stderr_fd = STDERR_FILENO;

  // RLIMIT_FSIZE binds writes to any regular file, an inherited stdout or stderr included: such a
  // file gets a pipe in its place, copied here (outside the sandbox, by the user who redirected).
  std::vector<Relay> relays;
  std::vector<int> write_ends;
  struct stat out_st {
  }, err_st{};
  const bool out_file = ::fstat(STDOUT_FILENO, &out_st) == 0 && S_ISREG(out_st.st_mode);
  const bool err_file = ::fstat(STDERR_FILENO, &err_st) == 0 && S_ISREG(err_st.st_mode);
  // `> f 2>&1`: one pipe for both, so that their lines keep the order CMD wrote them in.
  const bool same_file = out_file && err_file && out_st.st_dev == err_st.st_dev && out_st.st_ino == err_st.st_ino;
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    if (!(fd == STDOUT_FILENO ? out_file : err_file)) continue;
    if (fd == STDERR_FILENO && same_file) {
      req.stderr_fd = req.stdout_fd;
      continue;
    }
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "subagent-supervisor sandbox: pipe2: %s\n", std::strerror(errno));
      forget_held();
      return kSetupError;
    }
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    relays.push_back({p[0], fd, same_file ? "output" : fd == STDOUT_FILENO ? "stdout" : "stderr"});
    write_ends.push_back(p[1]);
    (fd == STDOUT_FILENO ? req.stdout_fd : req.stderr_fd) = p[1];
  }
  auto close_write_ends = [&] {
    for (int& w : write_ends) ::close(w);
    write_ends.clear();
  };

  sandbox::Child child;
  try {
    // Each plan's layers, before its launch; a plan made again after the kernel refused a namespace
    // it was assumed to grant (sandbox::NamespaceRefusedError) adds only what changed.
    std::vector<std::string> reported;
    auto report = [&](const sandbox::Plan& plan) {
      for (const auto& l : sandbox::layers(plan)) {
        if (l.applied && !verbose) continue;
        std::string line =
            "subagent-supervisor sandbox: layer " + l.name + (l.applied ? ": " : " is not applied: ") + l.detail + "\n";
        if (std::find(reported.begin(), reported.end(), line) != reported.end()) continue;
        std::fputs(line.c_str(), stderr);
        reported.push_back(std::move(line));
      }
    };
    // Once, before the first launch: a signal that comes before launch returns is kept for then.
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    ::sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH}) ::sigaction(sig, &sa, nullptr);
    sandbox::Launched launched = sandbox::prepare_and_launch(preset.sandbox, req, report);
    child = std::move(launched.child);
    // CMD may run, and be signalled, before launch returns: a signal kept meanwhile is passed on
    // now (one that comes after g_child is set is passed on by the handler itself).
    g_child = child.pid;
    if (const int sig = g_pending; sig != 0) {
      g_pending = 0;
      forward_signal(sig);
    }
  } catch (const sandbox::ExecError& e) {
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    forget_held();
    return e.error == ENOENT ? kNotFound : kCannotExecute;
  } catch (const sandbox::UnsafeWorkspaceError& e) {  // a root of the policy: refused as the workspace is
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    return kUsageError;
  } catch (const sandbox::SandboxError& e) {
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    forget_held();
    return kSetupError;
  }
  close_write_ends();  // the command holds them now: EOF once it and its tree are gone
  int status = 0;
  bool lost = false;
  try {
    status = relay_and_wait(child, relays);
    lost = status == -1;
  } catch (const std::exception& e) {
    lost = true;
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    g_child = -1;
    ::kill(-child.pid, SIGKILL);
    ::kill(child.pid, SIGKILL);
    while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(child.pidfd);
  sandbox::release(child);
  // CMD and its tree are gone (the PID namespace ends with its PID 1; the process group was killed
  // before the reap).
  if (!held_id.empty()) settle_and_report(state_dir, held_id, !state_dir_arg.empty());
  if (lost) return kSetupError;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSetupError;
}

}  // namespace supervisor::cli
