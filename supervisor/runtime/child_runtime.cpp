// The runtime seam's shared parts (child_runtime.hpp).
#include "runtime/child_runtime.hpp"

#include <unistd.h>

namespace supervisor {

const char* to_string(RuntimeState s) noexcept {
  switch (s) {
    case RuntimeState::queued:
      return "queued";
    case RuntimeState::starting:
      return "starting";
    case RuntimeState::running:
      return "running";
    case RuntimeState::exited:
      return "exited";
    case RuntimeState::lost:
      return "lost";
  }
  return "lost";
}

void RunningChild::close_untaken() noexcept {
  for (int* fd : {&stdin_, &stdout_, &stderr_})
    if (*fd >= 0) ::close(std::exchange(*fd, -1));
  for (auto& h : handed_)
    if (h.fd >= 0) ::close(std::exchange(h.fd, -1));
}

}  // namespace supervisor
