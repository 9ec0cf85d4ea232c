// The namespace names a policy may list (sandbox.namespaces). Layer names: sandbox/layer.hpp.
#pragma once

#include <array>
#include <string_view>

namespace sandbox {

inline constexpr std::array<std::string_view, 6> kNamespaceNames = {"user", "pid", "net", "ipc", "uts", "mount"};

}  // namespace sandbox
