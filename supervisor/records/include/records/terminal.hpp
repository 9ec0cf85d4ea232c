// Text a child or a model produced, made safe to show on a terminal.
//
// A terminal acts on what it is sent: escape sequences clear the screen, set the window title, write
// the clipboard (OSC 52) or move the cursor, and a carriage return lets a line overwrite its own
// "[subagent:ID]" prefix with a forged one. So before such text reaches a terminal every character a
// terminal could act on is written as a visible escape instead:
//   - C0 controls (U+0000-U+001F) but tab and, where the caller keeps lines, newline; DEL (U+007F);
//     C1 controls (U+0080-U+009F, which some terminals take as 8-bit CSI/OSC): "\u001b", "\u009b";
//   - bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what is
//     shown (the "Trojan Source" trick): "\u202e";
//   - bytes that are not UTF-8: "\xff".
// Inside a JSON string "\u001b" means the same character, so escaped JSON stays the same JSON.
// Everything else, other languages' letters included, is kept as it is.
//
// The escaping applies when the stream is a terminal (isatty); a pipe or a file gets the bytes as they
// were (a program reading them, or `cat` of a transcript, is the reader's choice). One exception: the
// child's stderr and log lines that `run` and `mcp` print as "[subagent:ID] ..." are escaped wherever
// they go, since a harness that captures stderr shows it to a person, and the prefix must hold there.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace supervisor {

// `text` with every character listed above escaped; '\n' is kept when keep_newlines is true.
std::string escape_for_terminal(std::string_view text, bool keep_newlines);

// Whether `stream` is a terminal (looked up on each call: a test may point it elsewhere).
bool is_terminal(std::FILE* stream);

// Writes `text` to `stream`, escaped (newlines kept) when the stream is a terminal.
void write_for_terminal(std::FILE* stream, std::string_view text);

// printf into a string, then write_for_terminal: for output whose fields hold child or model text.
void print_for_terminal(std::FILE* stream, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace supervisor
