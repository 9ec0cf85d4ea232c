#include "models/sse.hpp"

#include <doctest/doctest.h>

#include <vector>

using supervisor::SseEvent;
using supervisor::SseParser;

namespace {

std::vector<SseEvent> parse_in_pieces(const std::string& s, std::size_t piece) {
  SseParser p;
  std::vector<SseEvent> out;
  for (std::size_t i = 0; i < s.size(); i += piece)
    REQUIRE(p.feed(std::string_view(s).substr(i, piece), [&](const SseEvent& e) {
      out.push_back(e);
      return true;
    }));
  return out;
}

}  // namespace

TEST_CASE("events are the same however the bytes are split, with \\n, \\r\\n or \\r line ends") {
  const std::string stream =
      ": keep-alive comment\n"
      "event: message_start\r\n"
      "data: {\"a\":1}\r\n"
      "\r\n"
      "data: line one\r"
      "data:line two\r"
      "\r"
      "id: 7\n"
      "retry: 1000\n"
      "data: [DONE]\n"
      "\n";
  for (std::size_t piece : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(7), stream.size()}) {
    CAPTURE(piece);
    auto ev = parse_in_pieces(stream, piece);
    REQUIRE(ev.size() == 3);
    CHECK(ev[0].event == "message_start");
    CHECK(ev[0].data == "{\"a\":1}");
    CHECK(ev[1].event.empty());
    CHECK(ev[1].data == "line one\nline two");
    CHECK(ev[2].data == "[DONE]");
    CHECK(ev[2].id == "7");
  }
}

TEST_CASE("an event without its blank line is not dispatched, and partial() says so") {
  SseParser p;
  int n = 0;
  REQUIRE(p.feed("data: {\"x\":1}\n\ndata: {\"cut", [&](const SseEvent&) { return ++n, true; }));
  CHECK(n == 1);
  CHECK(p.partial());
  SseParser q;
  REQUIRE(q.feed("data: a\n\n", [&](const SseEvent&) { return true; }));
  CHECK_FALSE(q.partial());
}

TEST_CASE("events without data are dropped; the event type does not leak into the next event") {
  auto ev = parse_in_pieces("event: ping\n\ndata: x\n\n", 4);
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].event.empty());
  CHECK(ev[0].data == "x");
}

TEST_CASE("a line past the cap is an error, not unbounded memory") {
  SseParser p(1024);
  std::string big = "data: " + std::string(5000, 'x');
  CHECK_FALSE(p.feed(big, [](const SseEvent&) { return true; }));
  CHECK(p.error().find("1024") != std::string::npos);
}

TEST_CASE("returning false from the handler stops parsing") {
  SseParser p;
  int n = 0;
  CHECK(p.feed("data: 1\n\ndata: 2\n\n", [&](const SseEvent&) { return ++n, false; }));
  CHECK(n == 1);
}
