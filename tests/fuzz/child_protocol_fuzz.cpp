// The child <-> supervisor wire as a hostile child (or supervisor) writes it: bytes in any split go
// through protocol::LineReader, and every complete line through both decoders.
//
// Properties: feeding in pieces yields the same frames as feeding at once; a good frame is valid
// UTF-8 without '\n' and within max_line; decoding never throws; a decoded message re-encodes to one
// line that decodes to the same message. The broker's tree-free shortcuts agree with the tree codec:
// decode_child_message gives what decode_child_message_via_tree gives for every frame, and a
// tool_decision's line is byte for byte the tree encoder's, for any id and reason bytes.
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "protocol/framing.hpp"
#include "protocol/messages.hpp"

namespace {

template <class Decoded>
void round_trip(const Decoded& d, Decoded (*decode)(std::string_view)) {
  if (!d) {
    FUZZ_CHECK(!d.error.empty());
    return;
  }
  const std::string line = protocol::encode_line(*d.message);
  FUZZ_CHECK(!line.empty() && line.back() == '\n');
  FUZZ_CHECK(line.find('\n') == line.size() - 1);
  FUZZ_CHECK(protocol::is_valid_utf8(line));
  auto again = decode(std::string_view(line).substr(0, line.size() - 1));
  FUZZ_CHECK(again);
  FUZZ_CHECK(protocol::to_json(*again.message) == protocol::to_json(*d.message));
}

// The shortcut and the tree decoder: the same success, the same error text, the same message.
void same_as_tree(std::string_view line) {
  const auto fast = protocol::decode_child_message(line);
  const auto tree = protocol::decode_child_message_via_tree(line);
  FUZZ_CHECK(bool(fast) == bool(tree));
  FUZZ_CHECK(fast.error == tree.error);
  if (fast) FUZZ_CHECK(protocol::to_json(*fast.message) == protocol::to_json(*tree.message));
}

// A tool_decision made of raw input bytes (invalid UTF-8 and control bytes included).
void decision_encodes_as_tree(std::string_view bytes, bool allow) {
  const std::size_t cut = bytes.empty() ? 0 : static_cast<unsigned char>(bytes.front()) % (bytes.size() + 1);
  const protocol::SupervisorMessage m{
      protocol::ToolDecision{std::string(bytes.substr(0, cut)), allow, std::string(bytes.substr(cut))}};
  FUZZ_CHECK(protocol::encode_line(m) == protocol::encode_line(protocol::to_json(m)));
}

std::vector<protocol::Frame> frames_of(std::string_view data, std::size_t max_line, std::size_t piece) {
  protocol::LineReader reader(max_line);
  std::vector<protocol::Frame> out;
  while (!data.empty()) {
    std::size_t n = piece ? std::min(piece, data.size()) : data.size();
    reader.feed(data.substr(0, n), out);
    FUZZ_CHECK(reader.buffered() <= max_line);
    data.remove_prefix(n);
  }
  reader.finish(out);
  FUZZ_CHECK(reader.buffered() == 0);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  // A small bound now and then, so oversize lines and their discarding get exercised.
  const std::size_t max_line = (in.byte() & 1) ? 1 + in.byte() : protocol::kDefaultMaxLine;
  const std::uint8_t choice = in.byte();
  const std::size_t piece = choice % 17;  // 0: all at once
  const bool allow = choice & 0x80;       // for the tool_decision made of the payload
  const std::string_view payload = in.rest();

  same_as_tree(payload);  // raw bytes too, before framing: a NUL, a stray '\n', invalid UTF-8
  decision_encodes_as_tree(payload.substr(0, 4096), allow);

  auto whole = frames_of(payload, max_line, 0);
  auto pieces = frames_of(payload, max_line, piece);
  FUZZ_CHECK(whole.size() == pieces.size());
  for (std::size_t i = 0; i < whole.size(); ++i) {
    FUZZ_CHECK(whole[i].error == pieces[i].error);
    FUZZ_CHECK(whole[i].line == pieces[i].line);
    FUZZ_CHECK(whole[i].size == pieces[i].size);
  }

  for (const auto& f : whole) {
    if (f.error != protocol::FrameError::none) {
      FUZZ_CHECK(f.line.empty());
      continue;
    }
    FUZZ_CHECK(f.line.size() <= max_line);
    FUZZ_CHECK(f.line.find('\n') == std::string::npos);
    FUZZ_CHECK(protocol::is_valid_utf8(f.line));
    same_as_tree(f.line);
    round_trip(protocol::decode_child_message(f.line), &protocol::decode_child_message);
    round_trip(protocol::decode_supervisor_message(f.line), &protocol::decode_supervisor_message);
  }
  return 0;
}
