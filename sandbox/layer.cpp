#include "sandbox/layer.hpp"

namespace sandbox {

std::string_view to_string(Layer layer) noexcept {
  switch (layer) {
    case Layer::kNoNewPrivs:
      return "no_new_privs";
    case Layer::kCapabilities:
      return "capabilities";
    case Layer::kSession:
      return "session";
    case Layer::kPdeathsig:
      return "pdeathsig";
    case Layer::kCloseFds:
      return "close_fds";
    case Layer::kCleanEnv:
      return "clean_env";
    case Layer::kRlimits:
      return "rlimits";
    case Layer::kLandlock:
      return "landlock";
    case Layer::kLandlockScopes:
      return "landlock_scopes";
    case Layer::kSeccomp:
      return "seccomp";
    case Layer::kUserNamespace:
      return "user_namespace";
    case Layer::kPidNamespace:
      return "pid_namespace";
    case Layer::kNetNamespace:
      return "net_namespace";
    case Layer::kIpcNamespace:
      return "ipc_namespace";
    case Layer::kUtsNamespace:
      return "uts_namespace";
    case Layer::kMountNamespace:
      return "mount_namespace";
    case Layer::kReadOnlyHost:
      return "read_only_host";
    case Layer::kIdentity:
      return "identity";
    case Layer::kIdmappedRoots:
      return "idmapped_roots";
    case Layer::kProcessCap:
      return "process_cap";
    case Layer::kMemoryCap:
      return "memory_cap";
    case Layer::kCpuCap:
      return "cpu_cap";
  }
  return "unknown";
}

std::optional<Layer> parse_layer(std::string_view name) noexcept {
  for (Layer layer : kLayers)
    if (to_string(layer) == name) return layer;
  return std::nullopt;
}

std::vector<std::string> layer_names(const std::vector<Layer>& layers) {
  std::vector<std::string> names;
  names.reserve(layers.size());
  for (Layer layer : layers) names.emplace_back(to_string(layer));
  return names;
}

}  // namespace sandbox
