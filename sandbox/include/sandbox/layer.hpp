// The sandbox layers: one enum, spelled once (to_string) for reports, policy files and envelopes.
// Errors: none; parse_layer returns nullopt for a name that is no layer.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandbox {

enum class Layer : unsigned char {
  kNoNewPrivs,
  kCapabilities,
  kSession,
  kPdeathsig,
  kCloseFds,
  kCleanEnv,
  kRlimits,
  kLandlock,
  kLandlockScopes,
  kSeccomp,
  kUserNamespace,
  kPidNamespace,
  kNetNamespace,
  kIpcNamespace,
  kUtsNamespace,
  kMountNamespace,
  kReadOnlyHost,   // rootfs.hpp
  kIdentity,       // rootfs.hpp
  kIdmappedRoots,  // rootfs.hpp
  kProcessCap,     // cgroup.hpp
  kMemoryCap,      // cgroup.hpp
  kCpuCap,         // cgroup.hpp
};

// Every layer, in the order layers() and kernel_support() report them.
inline constexpr std::array<Layer, 22> kLayers = {
    Layer::kNoNewPrivs,     Layer::kCapabilities, Layer::kSession,      Layer::kPdeathsig,      Layer::kCloseFds,
    Layer::kCleanEnv,       Layer::kRlimits,      Layer::kLandlock,     Layer::kLandlockScopes, Layer::kSeccomp,
    Layer::kUserNamespace,  Layer::kPidNamespace, Layer::kNetNamespace, Layer::kIpcNamespace,   Layer::kUtsNamespace,
    Layer::kMountNamespace, Layer::kReadOnlyHost, Layer::kIdentity,     Layer::kIdmappedRoots,  Layer::kProcessCap,
    Layer::kMemoryCap,      Layer::kCpuCap};

// "no_new_privs", "capabilities", ..., "cpu_cap": the names policies (sandbox.required), `policy
// explain` and envelopes use.
std::string_view to_string(Layer layer) noexcept;
// The layer named `name` (to_string's spelling), or nullopt.
std::optional<Layer> parse_layer(std::string_view name) noexcept;
// to_string of each, in order.
std::vector<std::string> layer_names(const std::vector<Layer>& layers);

}  // namespace sandbox
