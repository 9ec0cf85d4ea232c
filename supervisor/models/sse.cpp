#include "models/sse.hpp"

namespace supervisor {

bool SseParser::feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event) {
  bool stop = false;
  std::size_t i = 0;
  if (first_ && !bytes.empty()) {
    // A UTF-8 byte order mark may open the stream (possibly split; rare enough to check whole only).
    if (bytes.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
    first_ = false;
  }
  while (i < bytes.size() && !stop) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes[i] == '\n') {
        ++i;
        continue;
      }
    }
    std::size_t end = bytes.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(i));
      if (line_.size() > max_event_bytes_) {
        error_ = "an event-stream line is longer than " + std::to_string(max_event_bytes_) + " bytes";
        return false;
      }
      break;
    }
    if (bytes[end] == '\r') after_cr_ = true;
    bool ok;
    if (line_.empty()) {
      ok = line(bytes.substr(i, end - i), on_event, stop);
    } else {
      line_.append(bytes.substr(i, end - i));
      std::string l = std::move(line_);
      line_.clear();
      ok = line(l, on_event, stop);
    }
    if (!ok) return false;
    i = end + 1;
  }
  return true;
}

bool SseParser::line(std::string_view l, const std::function<bool(const SseEvent&)>& on_event, bool& stop) {
  if (l.empty()) {
    if (has_data_) {
      if (!ev_.data.empty() && ev_.data.back() == '\n') ev_.data.pop_back();
      SseEvent ev = std::move(ev_);
      ev_ = SseEvent{};
      ev_.id = ev.id;  // the last event id persists
      has_data_ = false;
      if (!on_event(ev)) stop = true;
    } else {
      ev_.event.clear();
    }
    return true;
  }
  if (l.front() == ':') return true;  // comment (keep-alive)
  std::string_view field = l, value;
  if (auto colon = l.find(':'); colon != std::string_view::npos) {
    field = l.substr(0, colon);
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    ev_.data.append(value);
    ev_.data.push_back('\n');
    has_data_ = true;
    if (ev_.data.size() > max_event_bytes_) {
      error_ = "an event is longer than " + std::to_string(max_event_bytes_) + " bytes";
      return false;
    }
  } else if (field == "event") {
    ev_.event.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) ev_.id.assign(value);
  }
  return true;  // "retry" and unknown fields are ignored
}

}  // namespace supervisor
