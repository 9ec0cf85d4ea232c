// Command-line front ends. Each returns the process exit status.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace supervisor::cli {

// Exit status for a command line that could not be understood (sysexits' EX_USAGE).
inline constexpr int kUsageError = 64;

class UsageError : public std::runtime_error {
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

int cmd_run(Args args);
int cmd_sandbox(Args args);
int cmd_policy(Args args);
int cmd_serve(Args args);
int cmd_mcp(Args args);
int cmd_apply(Args args);

std::string executable_dir();

}  // namespace supervisor::cli
