// load_preset with the file's digest, and the catalog built on it: the preset code that needs
// libcrypto, kept out of preset.cpp so that a program that loads presets without a digest (the lean
// `subagent-supervisor`, which runs only `sandbox`) links none.
#include <openssl/evp.h>

#include "policy/preset.hpp"
#include "preset_names.hpp"

namespace supervisor {

namespace {

std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw PresetError("cannot compute the SHA-256 of a policy file (libcrypto failed)");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

}  // namespace

Preset load_preset(const std::string& name_or_path, const std::filesystem::path& policy_dir) {
  std::string raw;
  Preset p = load_preset_undigested(name_or_path, policy_dir, &raw);
  p.digest = sha256_hex(raw);
  return p;
}

PresetCatalog::PresetCatalog(std::filesystem::path policy_dir) : dir_(std::move(policy_dir)) {
  for (const auto& name : list_presets(dir_)) {
    Entry& e = by_name_[name];
    try {
      e.preset = load_preset(name, dir_);
    } catch (...) {
      e.error = std::current_exception();
    }
  }
}

std::vector<const Preset*> PresetCatalog::loaded() const {
  std::vector<const Preset*> out;
  for (const auto& [name, e] : by_name_)
    if (e.preset) out.push_back(&*e.preset);
  return out;
}

Preset PresetCatalog::get(const std::string& name_or_path) const {
  if (names_a_file(name_or_path)) return load_preset(name_or_path, dir_);
  check_preset_name(name_or_path);
  auto it = by_name_.find(name_or_path);
  if (it == by_name_.end()) {
    std::vector<std::string> known;
    for (const auto& [name, entry] : by_name_) known.push_back(name);
    throw_unknown_preset(name_or_path, dir_, known);
  }
  if (!it->second.preset) std::rethrow_exception(it->second.error);
  return *it->second.preset;
}

}  // namespace supervisor
