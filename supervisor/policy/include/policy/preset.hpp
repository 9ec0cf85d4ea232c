// A preset: one policy file from policies/ (JSON with comments), parsed and validated.
// The file is the single source of what a child of that preset may do; nothing in code widens it.
//
// Errors: exceptions (PresetError naming the file and the field); decide() and the other queries never
// throw.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/budget_rules.hpp"
#include "policy/jsonc.hpp"
#include "protocol/messages.hpp"
#include "sandbox/policy.hpp"

namespace supervisor {

enum class Decision { allow, ask, deny };
const char* to_string(Decision d) noexcept;

// How a child uses its workspace (a policy's "workspace_mode").
enum class WorkspaceMode {
  read,          // never writes it
  write_locked,  // edits it in place and holds the workspace's exclusive lock
  worktree,      // works in an isolated git worktree (or copy) and returns a patch
};
// "read", "write_locked", "worktree"
const char* to_string(WorkspaceMode m) noexcept;
// The mode a policy names, or nullopt for any other text.
std::optional<WorkspaceMode> parse_workspace_mode(std::string_view text) noexcept;

// An argument rule: when `tool` is called with arguments matching `when`, the decision is `decision`.
// Supported matchers (see policies/README.md): {"command_prefix": [..]}, {"path_under": [..]}.
struct ToolRule {
  std::string tool;
  nlohmann::json when = nlohmann::json::object();
  Decision decision = Decision::deny;
};

// Brokered web access (research): which hosts web_fetch may reach, and how much it may read.
struct WebPolicy {
  std::vector<std::string> allow_domains;  // empty: every public host not denied
  std::vector<std::string> deny_domains;
  std::uint64_t max_fetch_bytes = 2'000'000;
  std::uint64_t fetch_timeout_ms = 20'000;
};

// Writers (worker, implementation): the "writes" section. Paths whose contents run when the user
// next types an ordinary command (git hooks and config, CI, agent and IDE configuration), relative
// to the workspace, "**/NAME" for a path component NAME at any depth: a worker child cannot write
// the existing ones (read-only binds), what it creates is flagged in its envelope, and a patch that
// touches them is flagged for review. Caps on an implementation child's patch.
struct WritePolicy {
  std::vector<std::string> later_execution;  // default: default_later_execution()
  std::uint64_t max_patch_bytes = 16u << 20;
  std::uint64_t max_patch_files = 2000;
  // The bytes a writer may add to disk (docs/writers.md, "Disk"): an implementation child's worktree
  // is a tmpfs of its checkout plus this much where the supervisor can mount; a worker is wrapped up
  // once its workspace's filesystem has this much less free space than at its start.
  std::uint64_t max_disk_bytes = 1ull << 30;
};

struct Preset {
  std::string name;
  std::string description;
  std::filesystem::path source;  // the policy file it came from
  std::string digest;            // hex digest of the file's bytes
  bool unattended = true;        // may run with nobody to answer approvals
  WorkspaceMode workspace_mode = WorkspaceMode::read;
  std::vector<std::string> allow, ask, deny;  // tool decisions
  std::vector<std::string> blocked;           // parent-only capabilities, never granted
  std::vector<ToolRule> rules;
  Budgets budgets;
  WebPolicy web;
  WritePolicy writes;
  sandbox::Policy sandbox;
  nlohmann::json raw;  // the parsed file, for `policy explain`
};

// what() names the file and the field; pointer() is that field as a JSON pointer ("/sandbox/network",
// "" for the whole file), for `policy check` to find its line and column.
class PresetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  PresetError(const std::string& what, std::string pointer, JsonPosition at = {})
      : std::runtime_error(what), pointer_(std::move(pointer)), at_(at) {}
  const std::string& pointer() const noexcept { return pointer_; }
  // Where the text itself is wrong (a syntax error, a repeated key); 0:0 otherwise.
  const JsonPosition& at() const noexcept { return at_; }

 private:
  std::string pointer_;
  JsonPosition at_;
};

// writes.later_execution when a policy names none: the shipped defaults (policies/README.md explains
// each entry).
const std::vector<std::string>& default_later_execution();

// `name_or_path` is a preset name ("explore") or a path to a policy file. Throws PresetError naming
// the file and field on any problem. Preset::digest is the SHA-256 of the bytes parsed
// (preset_load.cpp, the library's only use of libcrypto).
Preset load_preset(const std::string& name_or_path, const std::filesystem::path& policy_dir);
// load_preset without the digest: Preset::digest is empty, and `raw` (when given) receives the
// bytes parsed. For the `sandbox` command, which shows no digest: the lean program that runs it
// then links no libcrypto and spends none of its start-up initialising it.
Preset load_preset_undigested(const std::string& name_or_path, const std::filesystem::path& policy_dir,
                              std::string* raw = nullptr);
Preset parse_preset(const nlohmann::json& doc, const std::filesystem::path& source, const std::string& digest);

// Names of the presets in `policy_dir` (files *.json other than schema.json), sorted.
std::vector<std::string> list_presets(const std::filesystem::path& policy_dir);

// Every preset of one policy directory, read and parsed once, when the catalog is made (the hub
// makes its own before the event loop serves a spawn), so that a spawn looks its preset up instead
// of reading and parsing a file on the loop. The presets in force are therefore the files as they
// stood at start-up: an edit takes effect at the next start, like `policy explain`'s digest.
// A file that did not load keeps its PresetError, thrown again by get(); a path (a name with '/'
// or ending in .json, as `run --preset ./mine.json` gives) is not catalogued and is read by get().
class PresetCatalog {
 public:
  explicit PresetCatalog(std::filesystem::path policy_dir);
  // The preset `name_or_path` names; throws PresetError as load_preset does.
  Preset get(const std::string& name_or_path) const;
  const std::filesystem::path& dir() const noexcept { return dir_; }
  // Every catalogued preset that loaded, in name order (one that did not is left out).
  std::vector<const Preset*> loaded() const;

 private:
  struct Entry {
    std::optional<Preset> preset;
    std::exception_ptr error;  // when preset is empty
  };
  std::filesystem::path dir_;
  std::map<std::string, Entry> by_name_;
};

// Reads a JSON-with-comments file; throws PresetError naming the file and the position of a parse
// error or of a key an object repeats (refused: which of the two counts is invisible in the text).
nlohmann::json read_jsonc_file(const std::filesystem::path& file, std::string* raw_bytes = nullptr);

}  // namespace supervisor
