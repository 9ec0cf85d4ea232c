// `subagent-supervisor sandbox`: any command under exactly the sandbox a preset's child gets.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "sandbox/launch.hpp"
#include "sandbox/workspace_guard.hpp"
#include "supervisor/cli.hpp"
#include "supervisor/preset.hpp"

namespace supervisor::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSandboxHelp = R"(usage: subagent-supervisor sandbox --preset NAME [--workspace DIR] [--policy-dir DIR] [--verbose]
                                  [--allow-unsafe-workspace] -- CMD [ARGS...]

Runs CMD under exactly the sandbox a child of preset NAME gets (seccomp, Landlock, namespaces,
rlimits, capabilities, environment allowlist), for security reviewers and for testing children.
stdin, stdout and stderr are passed through; no other file descriptor is. In the policy's paths,
${workspace} is DIR (default: the current directory) and ${child} is CMD's executable, so CMD is the
one program that may be executed, as the child program is for a real child.

Layers the kernel lacks are listed on stderr; a layer the policy marks required makes the launch fail.
"/", the home directory itself and system directories (/etc, /usr, /var/lib, ...) are refused as DIR
(exit status 64) unless --allow-unsafe-workspace is given.

)";

pid_t g_child = -1;

struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The command may be PID 1 of its own PID namespace, which ignores every signal it has no handler
// for except SIGKILL: interrupting the supervisor ends the sandboxed command for sure.
void forward_signal(int) {
  if (g_child > 0) {
    ::kill(-g_child, SIGKILL);
    ::kill(g_child, SIGKILL);
  }
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
  std::string preset_name, workspace = ".", policy_dir;
  bool verbose = false, allow_unsafe_workspace = false;
  std::vector<std::string> command;
  while (auto a = args.next()) {
    if (*a == "-h" || *a == "--help") {
      std::fputs(kSandboxHelp, stdout);
      std::fputs("\n", stdout);
      std::fputs(kExitStatusTable, stdout);
      return 0;
    } else if (*a == "--preset") preset_name = args.value(*a);
    else if (*a == "--workspace") workspace = args.value(*a);
    else if (*a == "--policy-dir") policy_dir = args.value(*a);
    else if (*a == "--verbose" || *a == "-v") verbose = true;
    else if (*a == "--allow-unsafe-workspace") allow_unsafe_workspace = true;
    else if (*a == "--") {
      command = args.rest();
      break;
    } else throw UsageError("unknown option '" + *a + "' (the command goes after --; see sandbox --help)");
  }
  if (preset_name.empty()) throw UsageError("--preset is required");
  if (command.empty()) throw UsageError("no command: put it after --, e.g. sandbox --preset explore -- /bin/ls");

  Preset preset = load_preset_or_usage(preset_name, policy_dir.empty() ? default_policy_dir() : fs::path(policy_dir));
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

  sandbox::LaunchRequest req;
  try {
    req.executable = resolve(command[0]);
  } catch (const NotFound& e) {
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    return kNotFound;
  }
  req.argv = command;
  req.workspace = ws;
  req.allow_unsafe_workspace = allow_unsafe_workspace;
  req.child_dir = req.executable;
  req.stdin_fd = STDIN_FILENO;
  req.stdout_fd = STDOUT_FILENO;
  req.stderr_fd = STDERR_FILENO;

  // RLIMIT_FSIZE binds writes to any regular file, the inherited stdout/stderr included.
  if (preset.sandbox.rlimits.file_size_mb == 0) {
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        std::fprintf(stderr,
                     "subagent-supervisor sandbox: %s is a regular file, and preset %s lets no file grow "
                     "(sandbox.rlimits.file_size_mb is 0): the command's writes to it fail with EFBIG. "
                     "Pipe it instead, e.g. '| cat > FILE'.\n",
                     fd == STDOUT_FILENO ? "stdout" : "stderr", preset_name.c_str());
    }
  }

  sandbox::Child child;
  try {
    sandbox::PlanPtr plan = sandbox::prepare(preset.sandbox, req);
    for (const auto& l : sandbox::layers(*plan)) {
      if (!l.applied)
        std::fprintf(stderr, "subagent-supervisor sandbox: layer %s is not applied: %s\n", l.name.c_str(), l.detail.c_str());
      else if (verbose)
        std::fprintf(stderr, "subagent-supervisor sandbox: layer %s: %s\n", l.name.c_str(), l.detail.c_str());
    }
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGHUP, &sa, nullptr);
    child = sandbox::launch(*plan);
    g_child = child.pid;
  } catch (const sandbox::ExecError& e) {
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    return e.error == ENOENT ? kNotFound : kCannotExecute;
  } catch (const sandbox::SandboxError& e) {
    std::fprintf(stderr, "subagent-supervisor sandbox: %s\n", e.what());
    return kSetupError;
  }
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::perror("subagent-supervisor sandbox: waitpid");
      return kSetupError;
    }
  }
  ::kill(-child.pid, SIGKILL);  // nothing the command left behind outlives it
  ::close(child.pidfd);
  sandbox::release(child);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSetupError;
}

}  // namespace supervisor::cli
