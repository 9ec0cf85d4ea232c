// JSON with comments, as policy files are written: positions of values and repeated keys in the
// text, so that an error can name its line and column. Pure: no I/O.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace supervisor {

struct JsonPosition {
  std::size_t line = 0, column = 0;  // 1-based; 0: unknown
  std::string text() const { return std::to_string(line) + ":" + std::to_string(column); }
};

// Where things are in a JSON-with-comments text: the position of every value by JSON pointer
// (a member's position is its key's), and every key an object repeats. nlohmann keeps the last of
// two equal keys without a word, so a reader of the file could believe the first; both are found here.
struct JsonSourceMap {
  std::map<std::string, JsonPosition> at;  // "/sandbox/filesystem/write/0" -> where it starts
  struct Duplicate {
    std::string pointer;  // of the repeated member
    JsonPosition first, again;
  };
  std::vector<Duplicate> duplicates;
  // The position of `pointer`, or of its nearest ancestor the text has; {} when none.
  JsonPosition find(std::string pointer) const;
};
// Reads `text` as far as it is well-formed JSON with // and /* */ comments.
JsonSourceMap map_json_source(const std::string& text);

// A field as the error messages name it ("sandbox.filesystem.write[0]") as a JSON pointer.
std::string field_pointer(const std::string& field);

}  // namespace supervisor
