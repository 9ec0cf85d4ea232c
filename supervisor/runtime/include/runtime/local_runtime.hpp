// The local runtime: a child is a process of this host, started under its preset's sandbox
// (sandbox/launch.hpp) with its stdio on pipes.
//
// A start prepares the plan (seccomp, Landlock ruleset, paths: sandbox::prepare reads the file
// system) and clones the child (new namespaces, its cgroups) on a worker of the offload pool, whose
// threads live as long as the supervisor (PR_SET_PDEATHSIG fires when the forking *thread* exits),
// then waits for the exec on the loop without blocking. A NamespaceRefusedError prepares once more (that plan probes,
// sandbox/launch.hpp). The end comes from the child's pidfd, reaped with waitid(P_PIDFD, WNOHANG) so a spurious wake-up
// never blocks the loop (Boost.Process 1.81's async_wait calls a blocking waitpid on readiness; seen
// to hang the supervisor with two children alive). This runtime alone reaps its children.
#pragma once

#include "runtime/child_runtime.hpp"

namespace supervisor {

class LocalRuntime final : public ChildRuntime {
 public:
  std::string_view name() const noexcept override { return "local"; }
  RuntimeAbilities abilities() const override;
  std::unique_ptr<PendingStart> start(boost::asio::io_context& io, LaunchSpec spec, StartHandlers handlers) override;
};

// The process-wide local runtime (stateless; shared by every session that is given none).
std::shared_ptr<ChildRuntime> local_runtime();

}  // namespace supervisor
