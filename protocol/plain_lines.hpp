// The broker's hot path, without a JSON tree: decoding the two lines a child sends for every tool
// call (tool_request, tool_done) and encoding the one answer (tool_decision).
//
// These are shortcuts, not a second protocol. Each one takes only a line of the plain shape that
// children write (a flat object of the message's own fields, ASCII strings without escapes, plain
// integers) and declines anything else, which then goes through the tree codec in messages.cpp. What a
// shortcut accepts it must decode exactly as the tree codec would: tests/protocol_messages_test.cpp
// and the child_protocol fuzz target compare the two on every line they try.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "protocol/messages.hpp"

namespace protocol::detail {

// The message in `line` when it is a tool_request or tool_done of the plain shape and decodes
// without error; nullopt for any other line (including every line the tree codec would refuse).
std::optional<ChildMessage> decode_plain_child_line(std::string_view line);

// Appends the wire line of `m` (with its '\n') to `out`, byte for byte what encode_line(to_json(m))
// gives, and returns true; returns false, appending nothing, when a string is not valid UTF-8 (the
// tree codec replaces such bytes; it is left to do that).
bool encode_plain_decision(const ToolDecision& m, std::string& out);

}  // namespace protocol::detail
