// Namespaces learnt from the launch's own clone (sandbox/namespaces.hpp): no probe child on the way
// to a launch, the same plan as probing gives, and a namespace the kernel refuses still reported
// as missing (and refused when required) after the one retry.
#include "namespaces.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "sandbox/launch.hpp"
#include "sandbox/policy.hpp"
#include "sandbox_test_util.hpp"

using namespace sandbox_test;

namespace {

std::string describe(const std::vector<sandbox::LayerStatus>& layers) {
  std::string out;
  for (const auto& l : layers) out += l.name + (l.applied ? " + " : " - ") + l.detail + "\n";
  return out;
}

// Runs prepare_and_launch and reaps the child: its exit code, and the plan's layers.
int launch_and_wait(const sandbox::Policy& policy, const sandbox::LaunchRequest& req,
                    std::vector<sandbox::LayerStatus>* layers) {
  sandbox::Launched launched = sandbox::prepare_and_launch(policy, req);
  int status = 0;
  ::waitpid(launched.child.pid, &status, 0);
  ::close(launched.child.pidfd);
  sandbox::release(launched.child);
  *layers = sandbox::layers(*launched.plan);
  return exit_code(status);
}

bool write_file(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// In a forked child, root of a user namespace of its own (its maps written from here, so that it
// may still call setgroups): `body` returns "" when every check held, else what failed. The
// answer comes back over a pipe (doctest's CHECK cannot report from another process).
std::string in_user_namespace_child(std::string (*body)()) {
  int answer[2], go[2];
  REQUIRE(::pipe2(answer, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(answer[0]);
    ::close(go[1]);
    std::string r;
    char byte = 0;
    if (::unshare(CLONE_NEWUSER) != 0) {
      r = std::string("unshare(CLONE_NEWUSER): ") + std::strerror(errno);
    } else {
      (void)!::write(answer[1], "u", 1);  // unshared: the parent writes the maps
      if (::read(go[0], &byte, 1) != 1 || byte != 'm') {
        r = "the parent could not write the id maps";
      } else {
        try {
          r = body();
        } catch (const std::exception& e) {
          r = std::string("threw: ") + e.what();
        }
      }
    }
    if (r.empty()) r = "ok";
    (void)!::write(answer[1], r.data(), r.size());
    ::_exit(0);
  }
  ::close(answer[1]);
  ::close(go[0]);
  char byte = 0;
  if (::read(answer[0], &byte, 1) == 1 && byte == 'u') {
    const std::string proc = "/proc/" + std::to_string(pid) + "/";
    const bool mapped = write_file((proc + "uid_map").c_str(), "0 " + std::to_string(::geteuid()) + " 1\n") &&
                        write_file((proc + "gid_map").c_str(), "0 " + std::to_string(::getegid()) + " 1\n");
    (void)!::write(go[1], mapped ? "m" : "x", 1);
  }
  ::close(go[1]);
  std::string r = drain(answer[0]);
  ::close(answer[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return r;
}

}  // namespace

TEST_CASE("the first launch in a fresh process clones no probe child, and plans what probing plans") {
  TempDir ws;
  const sandbox::Policy policy = explore_policy();
  sandbox::detail::forget_namespace_knowledge();  // as in a process that has probed nothing
  const std::size_t before = sandbox::detail::probes_cloned();
  std::vector<sandbox::LayerStatus> assumed;
  CHECK(launch_and_wait(policy, request_for(ws.path, {"true"}), &assumed) == 0);
  CHECK(sandbox::detail::probes_cloned() == before);

  // The twin: a process that learnt of a refusal probes every answer; on this kernel, which
  // refuses nothing, the plan and its report are the same.
  sandbox::namespace_refused_at_launch();
  sandbox::private_proc_refused_at_launch();
  std::vector<sandbox::LayerStatus> probed;
  CHECK(launch_and_wait(policy, request_for(ws.path, {"true"}), &probed) == 0);
  CHECK(sandbox::detail::probes_cloned() > before);
  CHECK(describe(assumed) == describe(probed));
  sandbox::detail::forget_namespace_knowledge();
}

// The kernel refuses CLONE_NEWIPC in a user namespace whose max_ipc_namespaces is 0 (a limit of
// that namespace alone: the host's is untouched). Needs root (the parent writes a map to uid 0).
std::string refused_ipc_namespace() {
  if (!write_file("/proc/sys/user/max_ipc_namespaces", "0\n"))
    return std::string("max_ipc_namespaces: ") + std::strerror(errno);
  if (::unshare(CLONE_NEWIPC) == 0 || errno != ENOSPC) return "CLONE_NEWIPC was not refused with ENOSPC";

  TempDir ws;
  sandbox::Policy policy = without_new_root(explore_policy());
  policy.tree_limits = {};  // no cgroups: the host's are not this namespace's to make
  std::erase_if(policy.required, [](sandbox::Layer l) {
    return l == sandbox::Layer::kMemoryCap || l == sandbox::Layer::kCpuCap || l == sandbox::Layer::kProcessCap;
  });
  sandbox::detail::forget_namespace_knowledge();
  const std::size_t before = sandbox::detail::probes_cloned();
  std::vector<sandbox::LayerStatus> layers;
  if (int code = launch_and_wait(policy, request_for(ws.path, {"true"}), &layers); code != 0)
    return "the launch after the refusal exited " + std::to_string(code);
  if (sandbox::detail::probes_cloned() == before) return "the plan after the refusal probed nothing";
  std::string report = describe(layers);
  if (report.find("ipc_namespace - the kernel refused it\n") == std::string::npos)
    return "ipc_namespace is not reported as refused:\n" + report;
  if (report.find("uts_namespace + ") == std::string::npos) return "uts_namespace is not applied:\n" + report;

  // Required: the launch is refused, as when a probe had found it missing before any launch.
  sandbox::detail::forget_namespace_knowledge();
  policy.required.push_back(sandbox::Layer::kIpcNamespace);
  try {
    (void)launch_and_wait(policy, request_for(ws.path, {"true"}), &layers);
    return "a required ipc_namespace the kernel refuses did not fail the launch";
  } catch (const sandbox::NamespaceRefusedError& e) {
    return std::string("the retry threw NamespaceRefusedError: ") + e.what();
  } catch (const sandbox::SandboxError& e) {
    const std::string want = "requires the 'ipc_namespace' layer, which is not available: the kernel refused it";
    if (std::string(e.what()).find(want) == std::string::npos) return std::string("wrong error: ") + e.what();
  }
  return "";
}

TEST_CASE("a namespace the kernel refuses at the launch is planned again: reported missing, refused if required") {
  if (::geteuid() != 0) return;  // an unprivileged test cannot map uid 0 for its namespace
  CHECK(in_user_namespace_child(refused_ipc_namespace) == "ok");
}
