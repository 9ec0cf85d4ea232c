#include "workspace/git_step.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "process/output.hpp"
#include "process/runner.hpp"
#include "sandbox/launch.hpp"

namespace supervisor {
namespace fs = std::filesystem;

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(l);
  return v;
}

namespace {

constexpr std::size_t kMaxErr = 64u << 10;
constexpr const char* kGit = "/usr/bin/git";

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// "120 s", or "1500 ms" when not whole seconds.
std::string describe(std::chrono::milliseconds t) {
  if (t.count() % 1000 == 0) return std::to_string(t.count() / 1000) + " s";
  return std::to_string(t.count()) + " ms";
}

std::string read_first_line(const fs::path& f) {
  std::ifstream in(f);
  std::string line;
  std::getline(in, line);
  return line;
}

// What git must read for this step: the git dir, its common dir and their object alternates, the
// work tree, the working directory and the write roots.
std::vector<fs::path> repository_paths(const GitStep& s) {
  std::vector<fs::path> out = {s.git_dir};
  std::error_code ec;
  fs::path common = s.git_dir;
  if (std::string c = read_first_line(s.git_dir / "commondir"); !c.empty()) {
    common = fs::path(c).is_relative() ? s.git_dir / c : fs::path(c);
    out.push_back(fs::weakly_canonical(common, ec));
  }
  for (const auto& dir : {s.git_dir, common}) {
    std::ifstream alt(dir / "objects" / "info" / "alternates");
    for (std::string l; std::getline(alt, l);)
      if (!l.empty() && l[0] != '#') out.push_back(fs::path(l).is_relative() ? dir / "objects" / l : fs::path(l));
  }
  if (!s.work_tree.empty()) out.push_back(s.work_tree);
  if (!s.cwd.empty()) out.push_back(s.cwd);
  for (const auto& w : s.write) out.push_back(w);
  for (auto& p : out) p = p.lexically_normal();
  return out;
}

// The step's own sandbox: read the repository, write only where the step must, execute git alone.
sandbox::Policy git_policy(const GitStep& s) {
  sandbox::Policy p;
  p.source = "the sandbox of '" + s.what + "'";
  p.read_paths = {"/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/dev/null", "/dev/urandom"};
  for (const auto& r : repository_paths(s)) p.read_paths.push_back(r.string());
  for (const auto& r : s.read) p.read_paths.push_back(r.lexically_normal().string());
  p.write_paths = {"/dev/null"};
  for (const auto& w : s.write) p.write_paths.push_back(w.lexically_normal().string());
  // git-core holds git's helpers (git re-executes itself from there) and /usr/lib the dynamic
  // loader; no shell, no interpreter, nothing a child could have written.
  p.exec_paths = {kGit, "/usr/lib"};
  p.network = sandbox::Network::none;
  // git forks its helpers and writes the index, objects and work tree; it needs no sockets or IPC.
  p.syscall_groups = {"base", "process", "filesystem_write"};
  p.rlimits.cpu_seconds = 600;
  p.rlimits.open_files = 4096;
  p.rlimits.file_size_mb = 16384;
  p.rlimits.processes = 256;
  p.namespaces = {"user", "pid", "net", "ipc", "uts"};
  p.env_set = {
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/nonexistent"},
      {"XDG_CONFIG_HOME", "/nonexistent"},
      {"LC_ALL", "C"},
      {"GIT_DIR", s.git_dir.string()},
      {"GIT_CONFIG_NOSYSTEM", "1"},
      {"GIT_CONFIG_GLOBAL", "/dev/null"},
      {"GIT_ATTR_NOSYSTEM", "1"},
      {"GIT_CEILING_DIRECTORIES", "/"},
      {"GIT_TERMINAL_PROMPT", "0"},
      {"GIT_PAGER", "cat"},
      {"PAGER", "cat"},
      {"GIT_EDITOR", ":"},
      {"GIT_NO_REPLACE_OBJECTS", "1"},
      {"GIT_PROTOCOL_FROM_USER", "0"},
  };
  if (!s.work_tree.empty()) p.env_set["GIT_WORK_TREE"] = s.work_tree.string();
  using sandbox::Layer;
  p.required = {Layer::kNoNewPrivs, Layer::kCapabilities, Layer::kSeccomp, Layer::kLandlock, Layer::kNetNamespace};
  return p;
}

// Runs git (kGit) with `argv` under the step's sandbox.
GitResult launch_git(const GitStep& s, const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(s.what + ": pipe: " + std::strerror(errno));
  Fd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error(s.what + ": pipe: " + std::strerror(errno));
  Fd err_r(err[0]), err_w(err[1]);
  Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_in.fd < 0) throw std::runtime_error(s.what + ": /dev/null: " + std::strerror(errno));

  sandbox::LaunchRequest req;
  req.executable = kGit;
  req.argv = argv;
  req.workspace = !s.cwd.empty() ? s.cwd : !s.work_tree.empty() ? s.work_tree : s.git_dir;
  req.stdin_fd = null_in.fd;
  req.stdout_fd = out_w.fd;
  req.stderr_fd = err_w.fd;
  sandbox::Child child;
  try {
    child = sandbox::prepare_and_launch(git_policy(s), req).child;
  } catch (const std::exception& e) {
    throw std::runtime_error(s.what + ": could not start git in its sandbox: " + e.what());
  }
  out_w.reset();
  err_w.reset();
  null_in.reset();
  Fd pidfd(child.pidfd);

  GitResult r;
  process::CappedBuffer out_buf(s.max_out), err_buf(kMaxErr);
  process::Pipe pipes[2] = {{out_r.fd,
                             [&](std::string_view chunk) {
                               if (s.out_sink) {
                                 if (s.out_sink(chunk)) return true;
                                 r.stopped = true;
                                 return false;
                               }
                               if (out_buf.add(chunk)) return true;
                               r.truncated = true;
                               return false;
                             }},
                            {err_r.fd, [&](std::string_view chunk) {
                               err_buf.add(chunk);
                               return true;
                             }}};
  process::Limits limits;
  limits.deadline = process::Clock::now() + s.timeout;
  process::Outcome o = process::collect({child.pid, pidfd.fd, false}, pipes, limits);
  sandbox::release(child);
  if (o.timed_out)
    throw std::runtime_error(s.what + ": git did not finish within " + describe(s.timeout) + "; it was killed");
  r.out = out_buf.take();
  r.err = err_buf.take();
  r.code = o.term_signal != 0 ? 128 + o.term_signal : o.exit_code;
  return r;
}

// Options that hold for every repository, whatever its configuration says.
const std::vector<std::string> kFixed = {
    "core.fsmonitor=false", "core.hooksPath=/dev/null", "core.pager=cat",
    "core.editor=:", "sequence.editor=:", "core.askPass=", "core.sshCommand=false",
    "core.gitProxy=", "core.attributesFile=/dev/null", "core.excludesFile=/dev/null",
    "core.alternateRefsCommand=", "core.untrackedCache=false", "core.splitIndex=false",
    "credential.helper=", "diff.external=", "diff.submodule=short", "submodule.recurse=false", "protocol.allow=never",
    "gpg.program=false", "gpg.ssh.program=false", "gpg.x509.program=false", "commit.gpgSign=false", "tag.gpgSign=false",
    "uploadpack.packObjectsHook=", "merge.renormalize=false", "user.name=subagent-supervisor",
    "user.email=subagent-supervisor@localhost",
    // A root supervisor's git works on repositories its users own; with every program-running
    // setting above switched off, the ownership check has nothing left to protect (command-line
    // configuration is "protected", so git honours it there).
    "safe.directory=*"};

// git_neutralising_options, its listing step bounded by `timeout`.
std::vector<std::string> neutralising_options(const fs::path& git_dir, const fs::path& work_tree,
                                              std::chrono::milliseconds timeout) {
  std::vector<std::string> opts = {"--no-pager"};  // also beats pager.<command>
  for (const auto& o : kFixed) {
    opts.push_back("-c");
    opts.push_back(o);
  }
  std::error_code ec;
  if (!fs::is_directory(git_dir, ec)) return opts;  // git init: no configuration yet
  // Every driver the configuration defines (also through includes and the worktree's config),
  // read by a git that runs nothing: `git config` only parses files.
  GitStep list;
  list.what = "git config (listing the repository's drivers)";
  list.git_dir = git_dir;
  list.work_tree = work_tree;
  list.timeout = timeout;
  std::vector<std::string> argv = {kGit};
  argv.insert(argv.end(), opts.begin(), opts.end());
  for (const char* a : {"config", "--name-only", "--get-regexp", "^(filter|diff|merge)\\..*\\."}) argv.push_back(a);
  GitResult r = launch_git(list, argv);
  if (r.code != 0 && r.code != 1)  // 1: no such keys
    throw std::runtime_error(list.what + ": " + r.err);
  std::set<std::pair<std::string, std::string>> drivers;  // (section, name)
  for (const std::string& key : split_lines(r.out)) {
    auto first = key.find('.');
    auto last = key.rfind('.');
    if (first == std::string::npos || last == first) continue;
    drivers.insert({key.substr(0, first), key.substr(first + 1, last - first - 1)});
  }
  for (const auto& [section, name] : drivers) {
    auto set = [&](const char* field, const char* value) {
      opts.push_back("-c");
      opts.push_back(section + "." + name + "." + field + "=" + value);
    };
    if (section == "filter") {
      set("clean", "");
      set("smudge", "");
      set("process", "");
      set("required", "false");
    } else if (section == "diff") {
      set("textconv", "");
      set("command", "");
    } else {
      set("driver", "");
    }
  }
  return opts;
}

}  // namespace

std::vector<std::string> git_neutralising_options(const fs::path& git_dir, const fs::path& work_tree) {
  return neutralising_options(git_dir, work_tree, GitStep{}.timeout);
}

GitResult run_git(const GitStep& step) {
  if (step.git_dir.empty()) throw std::runtime_error(step.what + ": no git directory given");
  std::vector<std::string> argv = {kGit};
  for (auto& o : neutralising_options(step.git_dir, step.work_tree, step.timeout)) argv.push_back(std::move(o));
  argv.insert(argv.end(), step.args.begin(), step.args.end());
  return launch_git(step, argv);
}

GitResult must_git(const GitStep& step) {
  GitResult r = run_git(step);
  if (r.code != 0) {
    std::string msg = r.err.empty() ? r.out : r.err;
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    throw std::runtime_error(step.what + ": " + (msg.empty() ? "exit status " + std::to_string(r.code) : msg));
  }
  return r;
}

fs::path find_git_dir(const fs::path& dir, fs::path* top) {
  std::error_code ec;
  for (fs::path d = fs::weakly_canonical(dir, ec);; d = d.parent_path()) {
    fs::path dot = d / ".git";
    auto st = fs::symlink_status(dot, ec);
    if (!ec && fs::is_directory(st)) {
      if (top) *top = d;
      return dot;
    }
    if (!ec && fs::is_regular_file(st)) {
      std::string line = read_first_line(dot);
      if (line.rfind("gitdir: ", 0) == 0) {
        fs::path g = line.substr(8);
        if (g.is_relative()) g = d / g;
        g = fs::weakly_canonical(g, ec);
        if (fs::is_directory(g, ec)) {
          // A linked worktree: its git dir names this .git file back.
          std::string back = read_first_line(g / "gitdir");
          bool vouched = !back.empty() && fs::weakly_canonical(back, ec) == fs::weakly_canonical(dot, ec);
          // A submodule: its git dir lies in an ancestor's .git/modules.
          for (fs::path a = d.parent_path(); !vouched && !a.empty(); a = a.parent_path()) {
            auto rel = g.lexically_relative(a / ".git" / "modules");
            if (!rel.empty() && *rel.begin() != ".." && fs::is_directory(a / ".git", ec)) vouched = true;
            if (a == a.root_path()) break;
          }
          if (!vouched)
            throw std::runtime_error("'" + dot.string() + "' names the git directory '" + g.string() +
                                     "', which neither names it back (a linked worktree) nor is a submodule's; "
                                     "refusing to use it (was it planted?)");
          if (top) *top = d;
          return g;
        }
      }
    }
    if (d == d.root_path() || d.empty()) break;
  }
  return {};
}

}  // namespace supervisor
