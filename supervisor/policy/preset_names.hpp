// Preset names and where they lead, shared by preset.cpp and preset_load.cpp (internal to the policy
// library).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace supervisor {

// A name with a '/' or ending in ".json" is a path to a policy file, not a preset name.
bool names_a_file(const std::string& name_or_path);
// Throws PresetError unless `name` is a valid preset name ([a-z0-9_-]+).
void check_preset_name(const std::string& name);
// Throws PresetError: `name` is none of `known`, the presets of `policy_dir`.
[[noreturn]] void throw_unknown_preset(const std::string& name, const std::filesystem::path& policy_dir,
                                       const std::vector<std::string>& known);

}  // namespace supervisor
