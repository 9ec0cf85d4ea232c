// A model server's event stream (or something pretending to be one) as it arrives off the network: in
// pieces of any size, through supervisor::SseParser.
//
// Properties: the events and the error state do not depend on how the bytes were split (after the
// first three bytes: a byte order mark split across reads is a documented limitation); an event's
// type and id never hold a line break; an event's data stays within the bound.
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "models/sse.hpp"

namespace {

struct Run {
  std::vector<supervisor::SseEvent> events;
  bool ok = true;
  bool partial = false;
};

Run parse(std::string_view bytes, std::size_t max_event, std::size_t piece, std::size_t stop_after) {
  supervisor::SseParser parser(max_event);
  Run run;
  auto on_event = [&](const supervisor::SseEvent& ev) {
    run.events.push_back(ev);
    return stop_after == 0 || run.events.size() < stop_after;
  };
  // The first piece keeps any byte order mark whole.
  std::size_t first = piece ? std::min(bytes.size(), std::max<std::size_t>(piece, 3)) : bytes.size();
  std::size_t n = first;
  while (run.ok && (stop_after == 0 || run.events.size() < stop_after)) {
    run.ok = parser.feed(bytes.substr(0, n), on_event);
    bytes.remove_prefix(n);
    if (bytes.empty()) break;
    n = std::min(piece, bytes.size());
  }
  run.partial = parser.partial();
  if (!run.ok) FUZZ_CHECK(!parser.error().empty());
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::size_t max_event = (in.byte() & 1) ? 1 + in.byte() : std::size_t{1} << 20;
  const std::size_t piece = in.byte() % 13;
  const std::size_t stop_after = in.byte() % 4;  // 0: never stop early
  const std::string_view bytes = in.rest();

  Run whole = parse(bytes, max_event, 0, stop_after);
  Run pieces = parse(bytes, max_event, piece, stop_after);
  for (const Run* r : {&whole, &pieces}) {
    for (const auto& ev : r->events) {
      FUZZ_CHECK(ev.event.find_first_of("\r\n") == std::string::npos);
      FUZZ_CHECK(ev.id.find_first_of("\r\n") == std::string::npos);
      FUZZ_CHECK(ev.data.find('\r') == std::string::npos);
      FUZZ_CHECK(ev.data.size() <= max_event);
    }
  }
  if (whole.ok && pieces.ok) {
    FUZZ_CHECK(whole.events.size() == pieces.events.size());
    for (std::size_t i = 0; i < whole.events.size(); ++i) {
      FUZZ_CHECK(whole.events[i].event == pieces.events[i].event);
      FUZZ_CHECK(whole.events[i].data == pieces.events[i].data);
      FUZZ_CHECK(whole.events[i].id == pieces.events[i].id);
    }
  }
  return 0;
}
