#include "sandbox/policy.hpp"

#include <seccomp.h>

#include <algorithm>
#include <optional>
#include <set>

#include "layer_names.hpp"
#include "sandbox/layer.hpp"
#include "syscall_groups.hpp"

namespace sandbox {
namespace {

using nlohmann::json;

class Parser {
 public:
  explicit Parser(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw PolicyError("policy " + source_ + ": " + field + " " + what, field);
  }

  const json& object(const json& parent, const std::string& field, const char* key,
                     std::initializer_list<const char*> allowed) const {
    const json& value = parent.at(key);
    if (!value.is_object()) fail(field, "must be an object");
    check_keys(value, field, allowed);
    return value;
  }

  void check_keys(const json& obj, const std::string& field, std::initializer_list<const char*> allowed) const {
    for (const auto& [key, unused] : obj.items()) {
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }) == allowed.end()) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        fail(field + "." + key, "is not a known field (expected one of: " + list + ")");
      }
    }
  }

  std::vector<std::string> strings(const json& parent, const std::string& field, const char* key, bool required) const {
    std::vector<std::string> out;
    if (!parent.contains(key)) {
      if (required) fail(field + "." + key, "is missing");
      return out;
    }
    const json& value = parent.at(key);
    const std::string name = field + "." + key;
    if (!value.is_array()) fail(name, "must be an array of strings");
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string() || value[i].get_ref<const std::string&>().empty())
        fail(name + "[" + std::to_string(i) + "]", "must be a non-empty string");
      out.push_back(value[i].get<std::string>());
    }
    return out;
  }

  std::vector<std::string> paths(const json& parent, const std::string& field, const char* key,
                                 bool relative_ok) const {
    auto out = strings(parent, field, key, false);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::string& p = out[i];
      if (p == "${interpreter}") {  // the child script's interpreter(s), resolved at launch
        if (std::string(key) != "read" && std::string(key) != "execute")
          fail(field + "." + key + "[" + std::to_string(i) + "]",
               "may not be \"${interpreter}\": an interpreter may be read and executed, never written or protected");
        continue;
      }
      if (p == "${home}") {  // the child's private home (policy.hpp: kHomePath), made at launch
        if (std::string(key) != "read" && std::string(key) != "write")
          fail(field + "." + key + "[" + std::to_string(i) + "]",
               "may not be \"${home}\": the private home may be read or written, never executed or protected");
        continue;
      }
      if (p.rfind("${home}", 0) == 0)
        fail(field + "." + key + "[" + std::to_string(i) + "]",
             "must be exactly \"${home}\" ('" + p + "'): the private home is granted as a whole");
      if (p.rfind("${interpreter}", 0) == 0)
        fail(field + "." + key + "[" + std::to_string(i) + "]",
             "must be exactly \"${interpreter}\" ('" + p + "'): it stands for whole files");
      bool templated = p.rfind("${workspace}", 0) == 0 || p.rfind("${child}", 0) == 0;
      if (p.find("${") != std::string::npos && !templated)
        fail(field + "." + key + "[" + std::to_string(i) + "]",
             "uses an unknown template ('" + p + "'); only ${workspace}, ${child}, ${interpreter} and ${home} exist");
      if (p.find("${", templated ? 2 : 0) != std::string::npos)
        fail(field + "." + key + "[" + std::to_string(i) + "]", "may use a template only at its start ('" + p + "')");
      if (!templated && p.front() != '/' && !relative_ok)
        fail(field + "." + key + "[" + std::to_string(i) + "]",
             "must be an absolute path or start with ${workspace} or ${child} ('" + p + "')");
      // Rules are opened in the supervisor, where /proc/self is the supervisor's own entry: such a
      // rule would grant the child the supervisor's /proc/PID and never its own.
      for (const char* self : {"/proc/self", "/proc/thread-self"}) {
        const std::string prefix = self;
        if (p == prefix || p.rfind(prefix + "/", 0) == 0)
          fail(field + "." + key + "[" + std::to_string(i) + "]",
               "names " + prefix + " ('" + p +
                   "'), which would resolve to the supervisor's own /proc entry, never the "
                   "child's; it cannot be granted");
      }
      if (p.find("/../") != std::string::npos || p.ends_with("/..") || p.rfind("../", 0) == 0 || p == "..")
        fail(field + "." + key + "[" + std::to_string(i) + "]", "must not contain '..' ('" + p + "')");
    }
    return out;
  }

  std::uint64_t count(const json& parent, const std::string& field, const char* key) const {
    if (!parent.contains(key)) fail(field + "." + key, "is missing");
    const json& value = parent.at(key);
    if (!value.is_number_unsigned()) fail(field + "." + key, "must be a non-negative integer");
    return value.get<std::uint64_t>();
  }

 private:
  const std::string& source_;
};

constexpr std::uint64_t kMinTreeMemoryMb = 16;
constexpr std::uint64_t kMaxTreeMemoryMb = 1024 * 1024;
constexpr std::uint64_t kMaxCpuPercent = 1024 * 100;

bool valid_env_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// sandbox.syscalls: {"groups": [...], "allow": [...], "deny": [...]}. Groups are names from
// syscall_groups.cpp; allow and deny take syscall names libseccomp knows for this architecture.
void parse_syscalls(const Parser& p, const json& section, const std::string& root, Policy& policy) {
  const std::string field = root + ".syscalls";
  const json& sc = p.object(section, field, "syscalls", {"groups", "allow", "deny"});
  policy.syscall_groups = p.strings(sc, field, "groups", true);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < policy.syscall_groups.size(); ++i) {
    const std::string& name = policy.syscall_groups[i];
    const std::string at = field + ".groups[" + std::to_string(i) + "]";
    if (find_syscall_group(name) == nullptr) {
      std::string known;
      for (const SyscallGroupDef& g : syscall_group_defs()) known += (known.empty() ? "" : ", ") + std::string(g.name);
      p.fail(at, "names an unknown syscall group '" + name + "' (expected one of: " + known + ")");
    }
    if (!seen.insert(name).second) p.fail(at, "repeats '" + name + "'");
  }
  if (seen.count("base") == 0)
    p.fail(field + ".groups", "must list \"base\" (execve and what every process needs to start at all)");

  auto syscall_names = [&](const char* key) {
    auto names = p.strings(sc, field, key, false);
    for (std::size_t i = 0; i < names.size(); ++i)
      if (seccomp_syscall_resolve_name(names[i].c_str()) == __NR_SCMP_ERROR)
        p.fail(field + "." + key + "[" + std::to_string(i) + "]", "names an unknown syscall '" + names[i] + "'");
    return names;
  };
  policy.extra_allowed_syscalls = syscall_names("allow");
  policy.extra_denied_syscalls = syscall_names("deny");
  const auto denied_always = always_denied_syscalls();
  for (std::size_t i = 0; i < policy.extra_allowed_syscalls.size(); ++i) {
    const std::string& name = policy.extra_allowed_syscalls[i];
    const std::string at = field + ".allow[" + std::to_string(i) + "]";
    if (std::find(denied_always.begin(), denied_always.end(), name) != denied_always.end())
      p.fail(at, "names '" + name + "', which every preset refuses; it cannot be allowed");
    if (name == "clone3")
      p.fail(at,
             "names 'clone3', whose flags the filter cannot inspect; it always fails with "
             "ENOSYS so that libc falls back to clone");
    if (std::find(policy.extra_denied_syscalls.begin(), policy.extra_denied_syscalls.end(), name) !=
        policy.extra_denied_syscalls.end())
      p.fail(at, "names '" + name + "', which " + field + ".deny also lists");
  }
}
}  // namespace

std::string_view to_string(Network n) noexcept {
  switch (n) {
    case Network::none:
      return "none";
    case Network::loopback:
      return "loopback";
    case Network::host:
      return "host";
  }
  return "none";
}

std::optional<Network> parse_network(std::string_view text) noexcept {
  for (Network n : {Network::none, Network::loopback, Network::host})
    if (text == to_string(n)) return n;
  return std::nullopt;
}

Policy parse_policy(const nlohmann::json& section, const std::string& source) {
  Parser p(source);
  const std::string root = "sandbox";
  if (!section.is_object()) p.fail(root, "must be an object");
  p.check_keys(
      section, root,
      {"filesystem", "network", "syscalls", "rlimits", "tree_limits", "namespaces", "environment", "required"});
  for (const char* key : {"filesystem", "network", "syscalls", "rlimits", "namespaces", "environment"})
    if (!section.contains(key)) p.fail(root + "." + key, "is missing");

  Policy policy;
  policy.source = source;

  const json& fs = p.object(section, root + ".filesystem", "filesystem", {"read", "write", "execute", "protected"});
  policy.read_paths = p.paths(fs, root + ".filesystem", "read", false);
  policy.write_paths = p.paths(fs, root + ".filesystem", "write", false);
  policy.exec_paths = p.paths(fs, root + ".filesystem", "execute", false);
  policy.protected_paths = p.paths(fs, root + ".filesystem", "protected", true);
  if (!policy.protected_paths.empty() && policy.write_paths.empty())
    p.fail(root + ".filesystem.protected", "lists paths but there is no write root to protect");

  const json& network = section.at("network");
  if (!network.is_string()) p.fail(root + ".network", "must be a string");
  const std::string& mode = network.get_ref<const std::string&>();
  const std::optional<Network> parsed = parse_network(mode);
  if (!parsed) p.fail(root + ".network", "must be \"none\", \"loopback\" or \"host\" (got \"" + mode + "\")");
  policy.network = *parsed;

  parse_syscalls(p, section, root, policy);

  const std::string rl = root + ".rlimits";
  const json& rlimits =
      p.object(section, rl, "rlimits",
               {"address_space_mb", "cpu_seconds", "open_files", "file_size_mb", "core_mb", "processes"});
  policy.rlimits.address_space_mb = p.count(rlimits, rl, "address_space_mb");
  policy.rlimits.cpu_seconds = p.count(rlimits, rl, "cpu_seconds");
  policy.rlimits.open_files = p.count(rlimits, rl, "open_files");
  policy.rlimits.file_size_mb = p.count(rlimits, rl, "file_size_mb");
  policy.rlimits.core_mb = p.count(rlimits, rl, "core_mb");
  policy.rlimits.processes = p.count(rlimits, rl, "processes");
  if (policy.rlimits.open_files != 0 && policy.rlimits.open_files < 4)
    p.fail(rl + ".open_files", "must be 0 (unlimited) or at least 4 (stdin, stdout, stderr, exec)");

  if (section.contains("tree_limits")) {
    const std::string tl = root + ".tree_limits";
    const json& tree = p.object(section, tl, "tree_limits", {"memory_mb", "cpu_percent"});
    policy.tree_limits.memory_mb = p.count(tree, tl, "memory_mb");
    policy.tree_limits.cpu_percent = p.count(tree, tl, "cpu_percent");
    if (policy.tree_limits.memory_mb != 0 && policy.tree_limits.memory_mb < kMinTreeMemoryMb)
      p.fail(tl + ".memory_mb", "must be 0 (no cap) or at least " + std::to_string(kMinTreeMemoryMb) +
                                    " (a smaller cap kills the command while it starts)");
    if (policy.tree_limits.memory_mb > kMaxTreeMemoryMb)
      p.fail(tl + ".memory_mb", "must be at most " + std::to_string(kMaxTreeMemoryMb) + " (1 TiB)");
    if (policy.tree_limits.cpu_percent > kMaxCpuPercent)
      p.fail(tl + ".cpu_percent", "must be at most " + std::to_string(kMaxCpuPercent) + " (1024 CPUs)");
  }

  policy.namespaces = p.strings(section, root, "namespaces", true);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < policy.namespaces.size(); ++i) {
    const std::string& ns = policy.namespaces[i];
    if (std::find(kNamespaceNames.begin(), kNamespaceNames.end(), ns) == kNamespaceNames.end())
      p.fail(root + ".namespaces[" + std::to_string(i) + "]",
             "names an unknown namespace '" + ns + "' (expected user, pid, net, ipc, uts, mount)");
    if (!seen.insert(ns).second) p.fail(root + ".namespaces[" + std::to_string(i) + "]", "repeats '" + ns + "'");
  }
  bool has_net = seen.count("net") != 0;
  if (policy.network == Network::host && has_net)
    p.fail(root + ".network", "is \"host\" but sandbox.namespaces lists \"net\", which hides it");
  if (policy.network == Network::loopback && !has_net)
    p.fail(root + ".network", "is \"loopback\", which needs \"net\" in sandbox.namespaces");

  const std::string env = root + ".environment";
  const json& environment = p.object(section, env, "environment", {"allow", "set"});
  policy.env_allow = p.strings(environment, env, "allow", false);
  for (std::size_t i = 0; i < policy.env_allow.size(); ++i)
    if (!valid_env_name(policy.env_allow[i]))
      p.fail(env + ".allow[" + std::to_string(i) + "]", "is not a valid variable name ('" + policy.env_allow[i] + "')");
  if (environment.contains("set")) {
    const json& set = environment.at("set");
    if (!set.is_object()) p.fail(env + ".set", "must be an object of strings");
    for (const auto& [name, value] : set.items()) {
      if (!valid_env_name(name)) p.fail(env + ".set." + name, "is not a valid variable name");
      if (!value.is_string()) p.fail(env + ".set." + name, "must be a string");
      policy.env_set[name] = value.get<std::string>();
    }
  }

  const std::vector<std::string> required_names = p.strings(section, root, "required", false);
  std::vector<Layer>& required = policy.required;
  for (std::size_t i = 0; i < required_names.size(); ++i) {
    const std::optional<Layer> layer = parse_layer(required_names[i]);
    if (!layer)
      p.fail(root + ".required[" + std::to_string(i) + "]", "names an unknown layer '" + required_names[i] + "'");
    required.push_back(*layer);
  }
  for (std::size_t i = 0; i < required.size(); ++i) {
    if (required[i] == Layer::kMemoryCap && policy.tree_limits.memory_mb == 0)
      p.fail(root + ".required[" + std::to_string(i) + "]",
             "requires 'memory_cap', but sandbox.tree_limits.memory_mb sets no cap");
    if (required[i] == Layer::kCpuCap && policy.tree_limits.cpu_percent == 0)
      p.fail(root + ".required[" + std::to_string(i) + "]",
             "requires 'cpu_cap', but sandbox.tree_limits.cpu_percent sets no quota");
  }
  return policy;
}

}  // namespace sandbox
