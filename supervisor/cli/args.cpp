#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "cli/cli.hpp"
#include "policy/preset.hpp"

namespace supervisor::cli {

const char* const kExitStatusTable = R"(Exit status (the same for every command):
  0    success; for run: the child completed
  1    the command ran and reports a problem: policy check found an error, apply refused the
       patch, audit matched nothing or has no log yet
  2    run: budget_exhausted     3  run: timeout     4  run: cancelled (SIGINT, SIGTERM)
  5    run: failed (the child crashed, or could not be launched: the envelope says why)
  6    run: protocol_error (the child broke the protocol)
  64   bad command line: an unknown option, a bad value, a budget of 0 or above the preset's,
       an unknown preset, a workspace that does not exist or is refused as unsafe
  125  nothing was started: the child program or the sandbox could not be set up (a policy
       file that does not load, a required layer this kernel lacks, no child or presets
       installed with this binary; stderr names the step)
  126  sandbox: CMD was found but cannot be executed in the sandbox
  127  sandbox: CMD was not found
  128+N sandbox: CMD was killed by signal N; otherwise sandbox exits with CMD's own status
)";

Preset load_preset_or_usage(const std::string& name_or_path, const std::filesystem::path& policy_dir,
                            PresetLoader load) {
  const bool path =
      name_or_path.find('/') != std::string::npos || std::filesystem::path(name_or_path).extension() == ".json";
  if (path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(name_or_path, ec))
      throw UsageError("preset file '" + name_or_path + "' does not exist");
  } else {
    std::vector<std::string> names;
    try {
      names = list_presets(policy_dir);
    } catch (const std::exception& e) {
      throw SetupError(e.what());
    }
    if (std::find(names.begin(), names.end(), name_or_path) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError("unknown preset '" + name_or_path + "' (the presets in " + policy_dir.string() +
                       " are: " + (known.empty() ? "none" : known) + ")");
    }
  }
  try {
    return load(name_or_path, policy_dir);
  } catch (const std::exception& e) {
    throw SetupError(e.what());
  }
}

std::optional<std::string> Args::next() {
  inline_value_.reset();
  if (pos_ >= args_.size()) return std::nullopt;
  std::string a = args_[pos_++];
  if (a.size() > 2 && a.rfind("--", 0) == 0) {
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      inline_value_ = a.substr(eq + 1);
      a.resize(eq);
    }
  }
  return a;
}

std::string Args::value(const std::string& flag) {
  if (inline_value_) return *std::exchange(inline_value_, std::nullopt);
  if (pos_ >= args_.size()) throw UsageError(flag + " needs a value");
  return args_[pos_++];
}

std::uint64_t Args::number(const std::string& flag) {
  std::string v = value(flag);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18)
    throw UsageError(flag + " takes a whole number, not '" + v + "'");
  return std::stoull(v);
}

std::vector<std::string> Args::rest() {
  std::vector<std::string> out(args_.begin() + static_cast<std::ptrdiff_t>(pos_), args_.end());
  pos_ = args_.size();
  return out;
}

}  // namespace supervisor::cli
