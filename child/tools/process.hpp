// Runs one program with stdout and stderr merged into a pipe, in its own process group, with a
// deadline and an output cap (collected by process::collect, process/). Used by run_command and the
// git views. Single-threaded: the caller blocks until the program (and anything left in its process
// group) is gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace child::tools_detail {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::vector<std::string> env;   // complete environment, "NAME=value"
  std::string cwd;
  std::chrono::milliseconds timeout{120000};
  std::size_t max_output = 16000;  // kept as head and tail halves
};

struct ProcessResult {
  std::string output;            // head + "[... N bytes omitted ...]" + tail when over max_output
  std::size_t output_bytes = 0;  // everything the program wrote
  bool output_cut = false;
  bool timed_out = false;
  int exit_code = -1;   // when it exited
  int term_signal = 0;  // when a signal killed it
  std::chrono::milliseconds elapsed{0};
};

// Throws ToolError when the program cannot be started (fork, pipe or exec failure).
ProcessResult run_process(const ProcessSpec& spec);

// The current environment minus variables whose names start with any of `drop_prefixes`.
std::vector<std::string> current_environment(const std::vector<std::string>& drop_prefixes = {});

// Finds an executable on PATH (or /usr/bin:/bin); empty when not found.
std::string find_executable(const std::string& name);

}  // namespace child::tools_detail
