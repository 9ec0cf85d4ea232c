// Server-sent events (the WHATWG event-stream format) parsed incrementally, as bytes arrive.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace supervisor {

struct SseEvent {
  std::string event;  // the `event:` field ("" when absent; the spec's default type is "message")
  std::string data;   // `data:` lines joined with '\n'
  std::string id;
};

// Not thread-safe; one per stream.
class SseParser {
 public:
  explicit SseParser(std::size_t max_event_bytes = 1u << 20) : max_event_bytes_(max_event_bytes) {}

  // Feeds bytes in any split (lines may end in \n, \r\n or \r, even across calls). Calls `on_event`
  // for each complete event; when it returns false, parsing stops and feed returns true. Returns false
  // (and sets error()) when one line or event passes max_event_bytes.
  bool feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event);

  // True when bytes of an unfinished event are buffered (the stream was cut inside an event).
  bool partial() const noexcept { return !line_.empty() || has_data_; }
  const std::string& error() const noexcept { return error_; }

 private:
  bool line(std::string_view l, const std::function<bool(const SseEvent&)>& on_event, bool& stop);

  std::size_t max_event_bytes_;
  std::string line_;
  SseEvent ev_;
  bool has_data_ = false;
  bool after_cr_ = false;
  bool first_ = true;
  std::string error_;
};

}  // namespace supervisor
