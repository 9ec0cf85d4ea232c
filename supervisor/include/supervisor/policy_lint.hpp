// `policy check`: schema validation and widening lints for policy files.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace supervisor {

struct Finding {
  std::string severity;  // "error" | "warning"
  std::string message;
};

// Validates `doc` against a JSON Schema (the subset policies/schema.json uses: type, properties,
// required, additionalProperties, items, enum, minimum, $ref to #/$defs). Returns one message per
// violation, each naming the JSON pointer of the offending value.
std::vector<std::string> validate_schema(const nlohmann::json& doc, const nlohmann::json& schema);

// Every problem with one policy file: unreadable, invalid JSON, schema violations, parse errors,
// and the widening lints. Empty when clean.
std::vector<Finding> lint_policy_file(const std::filesystem::path& file, const std::filesystem::path& schema_file);

}  // namespace supervisor
