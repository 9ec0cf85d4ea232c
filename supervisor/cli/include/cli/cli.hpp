// Command-line front ends. Each returns the process exit status.
//
// Errors: exceptions, caught once in main(): UsageError exits 64 (the command line was wrong),
// SetupError 125 (it could not be set up), anything else 125 with its message.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace supervisor {
struct Preset;
}

namespace supervisor::cli {

// One table of exit statuses for every command (kExitStatusTable; README.md, "Exit status").
// A command line that could not be understood, or names what does not exist (sysexits' EX_USAGE).
inline constexpr int kUsageError = 64;
// Nothing was started: the child or its sandbox could not be set up (as env(1) and docker use 125).
inline constexpr int kSetupError = 125;
// sandbox: the command was found but could not be executed in the sandbox / was not found.
inline constexpr int kCannotExecute = 126;
inline constexpr int kNotFound = 127;

// The table as --help prints it.
extern const char* const kExitStatusTable;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit status kSetupError: the command line was fine, but what it asked for could not be set up.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A small flag reader: "--name value" or "--name=value"; "--" ends the flags.
class Args {
 public:
  explicit Args(std::vector<std::string> args) : args_(std::move(args)) {}
  // Next token, or nullopt at the end. Flags are returned with their leading dashes.
  std::optional<std::string> next();
  // The value of the flag just returned by next(); throws UsageError naming the flag when missing.
  std::string value(const std::string& flag);
  std::uint64_t number(const std::string& flag);
  std::vector<std::string> rest();  // everything after the current position
  bool at_end() const { return pos_ >= args_.size(); }

 private:
  std::vector<std::string> args_;
  std::size_t pos_ = 0;
  std::optional<std::string> inline_value_;
};

// `load` (load_preset, or load_preset_undigested where no digest is shown) for a command line: a
// name that is no preset (or a path that is no file) is a UsageError listing the presets; a preset
// that exists but does not load is a SetupError. `load` is a parameter, not a flag, so that the lean
// program, which passes load_preset_undigested, does not link load_preset and its libcrypto.
using PresetLoader = Preset (*)(const std::string& name_or_path, const std::filesystem::path& policy_dir);
Preset load_preset_or_usage(const std::string& name_or_path, const std::filesystem::path& policy_dir,
                            PresetLoader load);

int cmd_run(Args args);
int cmd_sandbox(Args args);
int cmd_policy(Args args);
int cmd_serve(Args args);
int cmd_mcp(Args args);
int cmd_apply(Args args);
// `subagent-supervisor audit`: queries an audit log ("what did child X do", "which children ran commands").
int cmd_audit(Args args);
// `subagent-supervisor recover`: settles what dead supervisors left (scheduling/recovery.hpp).
int cmd_recover(Args args);
// What every command using the state directory does first: settles dead supervisors' leftovers,
// one stderr line per child settled (and per problem).
void recover_at_start(const std::filesystem::path& state_dir, const std::string& command);

}  // namespace supervisor::cli
