// The "sandbox" section of a preset policy file (policies/*.json), parsed and validated.
// Knows nothing about agents: it describes what a process may touch.
// Errors: exceptions. parse_policy throws PolicyError naming the file and the field; nothing is
// returned half-valid.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/layer.hpp"

namespace sandbox {

// Thrown for an invalid policy; what() names the file and the field, e.g.
// "policy worker.json: sandbox.rlimits.open_files must be a positive integer"; field() is the field
// alone ("sandbox.rlimits.open_files"), empty when unknown.
class PolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  PolicyError(const std::string& what, std::string field) : std::runtime_error(what), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

struct Rlimits {
  std::uint64_t address_space_mb = 0;  // 0 = leave unlimited
  std::uint64_t cpu_seconds = 0;
  std::uint64_t open_files = 0;
  std::uint64_t file_size_mb = 0;  // 0 = no file may grow (read-only presets)
  std::uint64_t core_mb = 0;       // always 0 in shipped presets
  std::uint64_t processes = 0;
};

// Limits over the child's whole process tree (cgroups; see policies/README.md). 0 = not limited.
struct TreeLimits {
  std::uint64_t memory_mb = 0;    // memory of every process together; swap does not extend it
  std::uint64_t cpu_percent = 0;  // CFS quota in percent of one CPU: 100 = one CPU, 50 = half
};

// Where "${home}" puts the child's private home: an empty tmpfs of its own (policies/README.md).
inline constexpr const char* kHomePath = "/home/subagent";

// sandbox.network (policies/README.md): what the child's network is, from narrowest to widest.
enum class Network {
  none,      // its own empty network namespace; socket(2) refused for every family
  loopback,  // its own network namespace with lo up
  host,      // the host's network stack, unfiltered
};
// "none", "loopback", "host"
std::string_view to_string(Network n) noexcept;
// The mode a policy names, or nullopt.
std::optional<Network> parse_network(std::string_view text) noexcept;

struct Policy {
  std::string source;  // file name, for error messages
  // Path templates; ${workspace}, ${child} and ${home} are substituted at prepare() time.
  std::vector<std::string> read_paths;
  std::vector<std::string> write_paths;
  std::vector<std::string> exec_paths;
  std::vector<std::string> protected_paths;  // relative to each write root, or absolute
  Network network = Network::none;
  // seccomp allowlist: named groups (sandbox/syscall_groups.cpp), single syscalls on top, and
  // syscalls refused (EPERM) even when a group lists them.
  std::vector<std::string> syscall_groups;
  std::vector<std::string> extra_allowed_syscalls;
  std::vector<std::string> extra_denied_syscalls;
  Rlimits rlimits;
  TreeLimits tree_limits;
  std::vector<std::string> namespaces;         // user, pid, net, ipc, uts, mount
  std::vector<std::string> env_allow;          // names copied from the supervisor's environment
  std::map<std::string, std::string> env_set;  // fixed values (templates allowed)
  std::vector<Layer> required;                 // layers that must be in force, else launch fails (to_string names them)
};

// Parses the "sandbox" object of a policy file. `source` names the file in errors.
Policy parse_policy(const nlohmann::json& section, const std::string& source);

}  // namespace sandbox
