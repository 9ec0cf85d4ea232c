// Helpers shared by the local tools: argument parsing, workspace paths, UTF-8 and directory
// listing. Private to child/tools. Tool functions report failures by throwing ToolError; run_tool
// turns that (and anything else) into ToolOutput{ok=false}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "child/tools.hpp"

namespace child::tools_detail {

struct ToolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Typed access to a tool's JSON arguments. Integers and booleans given as strings ("10", "true")
// are accepted because models produce them; anything else is an error naming the argument.
class Args {
 public:
  explicit Args(const nlohmann::json& j);

  std::string str(const char* name) const;  // required
  std::optional<std::string> opt_str(const char* name) const;
  std::optional<std::int64_t> opt_int(const char* name, std::int64_t min, std::int64_t max) const;
  std::int64_t integer(const char* name, std::int64_t def, std::int64_t min, std::int64_t max) const;
  bool boolean(const char* name, bool def) const;

 private:
  const nlohmann::json* find(const char* name) const;
  const nlohmann::json& j_;
};

struct WsPath {
  std::filesystem::path abs;  // lexically normal, inside the workspace
  std::string rel;            // workspace-relative, "." for the root
};

// Resolves a path argument against the workspace. Rejects paths that leave the workspace
// lexically or through a symlink; the kernel (Landlock) is the real guard, this gives the model a
// clear message instead of EACCES.
WsPath resolve_path(const ToolContext& ctx, const std::string& arg, std::string_view argname);

// True when `p` equals `root` or lies below it (both lexically normal).
bool path_inside(const std::filesystem::path& root, const std::filesystem::path& p);

// Workspace-relative spelling of an absolute path known to be inside the workspace.
std::string relative_to_workspace(const ToolContext& ctx, const std::filesystem::path& abs);

// "'src/x.cpp' does not exist" and friends, from an errno value.
std::string describe_errno(int err, std::string_view rel);

// UTF-8.
bool utf8_valid(std::string_view s, std::size_t* bad_offset = nullptr, bool allow_cut_tail = false);
std::string utf8_sanitize(std::string_view s);              // invalid bytes become U+FFFD
std::size_t utf8_floor(std::string_view s, std::size_t n);  // largest cut <= n before a lead byte

// Caps `text` at `cap` bytes on a UTF-8 boundary (after sanitizing it), appending a note that says
// how much was kept. The note counts against the cap.
void cap_output(ToolOutput& out, std::size_t cap);

enum class EntryType { file, dir, symlink, other };

struct DirEntry {
  std::string name;
  EntryType type;
};

// Entries of an open directory (not "." or ".."), sorted by name. Returns errno or 0.
int read_dir_sorted(int dirfd, std::vector<DirEntry>& out);

// Opens a workspace directory for listing; throws ToolError naming the path.
int open_dir_or_throw(const WsPath& p);

bool has_nul(std::string_view s);

std::string format_size(std::uint64_t bytes);

// Tool entry points (one file each or grouped by concern).
ToolOutput read_file(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput list_dir(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput glob(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput grep(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput write_file(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput edit_file(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput run_command(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput git_status(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput git_log(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput git_show(const nlohmann::json& args, const ToolContext& ctx);
ToolOutput git_diff(const nlohmann::json& args, const ToolContext& ctx);

}  // namespace child::tools_detail
