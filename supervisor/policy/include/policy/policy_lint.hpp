// `policy check`: schema validation, the file's own consistency, lints for what is dangerous in any
// preset, and widening against the shipped preset of the same name.
//
// Errors: none thrown; problems are Findings with a severity and a JSON pointer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/preset.hpp"

namespace supervisor {

// error: `run` refuses the file, or it contradicts itself; warning: legal but dangerous, or wider
// than the shipped preset of the same name; note: about this machine (a required layer the kernel
// lacks), never a fault of the file; skipped: the file is a JSON Schema.
enum class Severity { error, warning, note, skipped };
// "error", "warning", "note", "skipped": what `policy check` prints.
const char* to_string(Severity s) noexcept;

struct Finding {
  Severity severity = Severity::error;
  std::string message;
  std::string pointer;  // JSON pointer of the field concerned ("" for the whole file)
  JsonPosition at;      // where that field is in the file's text (0:0 when unknown)
};

// Validates `doc` against a JSON Schema (the subset policies/schema.json uses: type, properties,
// required, additionalProperties, items, enum, minimum, $ref to #/$defs). Returns one message per
// violation, each starting with the JSON pointer of the offending value and ": ".
std::vector<std::string> validate_schema(const nlohmann::json& doc, const nlohmann::json& schema);

// Every finding for one policy file: unreadable, invalid JSON, repeated keys, schema violations,
// parse errors, the lints, and — when `shipped_dir` is given and holds a preset of the file's name
// that is not this file — every way the file grants more than that preset. Empty when clean.
// A file with a top-level "$schema" key is a JSON Schema, not a preset: one "skipped", nothing else.
std::vector<Finding> lint_policy_file(const std::filesystem::path& file, const std::filesystem::path& schema_file,
                                      const std::filesystem::path& shipped_dir = {});

// Every way `p` grants more than `shipped` (tools, rules, paths, network, syscalls, namespaces,
// required layers, environment, limits, budgets, web, writes), as warnings naming the field.
std::vector<Finding> widening_against(const Preset& p, const Preset& shipped);

}  // namespace supervisor
