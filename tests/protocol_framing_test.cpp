#include "protocol/framing.hpp"

#include <doctest/doctest.h>

using protocol::Frame;
using protocol::FrameError;
using protocol::LineReader;

namespace {
std::vector<Frame> feed_all(LineReader& r, std::initializer_list<std::string_view> chunks, bool finish = false) {
  std::vector<Frame> out;
  for (auto c : chunks) r.feed(c, out);
  if (finish) r.finish(out);
  return out;
}
}  // namespace

TEST_CASE("a line split across reads is reassembled") {
  LineReader r;
  auto f = feed_all(r, {"{\"a\":", "1", "}\n"});
  REQUIRE(f.size() == 1);
  CHECK(f[0].error == FrameError::none);
  CHECK(f[0].line == "{\"a\":1}");
}

TEST_CASE("many lines in one read come out in order; CRLF and blank lines") {
  LineReader r;
  auto f = feed_all(r, {"one\ntwo\r\n\nthree\nfour"});
  REQUIRE(f.size() == 4);
  CHECK(f[0].line == "one");
  CHECK(f[1].line == "two");
  CHECK(f[2].line.empty());
  CHECK(f[3].line == "three");
  CHECK(r.buffered() == 4);
  auto end = feed_all(r, {}, true);
  REQUIRE(end.size() == 1);
  CHECK(end[0].error == FrameError::truncated);
  CHECK(end[0].size == 4);
}

TEST_CASE("a line at the limit passes; one byte more is line_too_long, and reading goes on") {
  LineReader r(8);
  auto f = feed_all(r, {"12345678\n", "123456789\n", "ok\n"});
  REQUIRE(f.size() == 3);
  CHECK(f[0].line == "12345678");
  CHECK(f[1].error == FrameError::line_too_long);
  CHECK(f[1].size == 9);
  CHECK(f[2].line == "ok");
}

TEST_CASE("an oversize line never buffers more than the limit") {
  LineReader r(1024);
  std::vector<Frame> out;
  std::string chunk(4096, 'x');
  for (int i = 0; i < 1000; ++i) {
    r.feed(chunk, out);
    CHECK(r.buffered() <= 1024);
  }
  CHECK(out.empty());
  r.feed("\nnext\n", out);
  REQUIRE(out.size() == 2);
  CHECK(out[0].error == FrameError::line_too_long);
  CHECK(out[0].size == 4096u * 1000u);
  CHECK(out[1].line == "next");
}

TEST_CASE("stream ending inside an oversize line reports line_too_long") {
  LineReader r(4);
  auto f = feed_all(r, {"123456"}, true);
  REQUIRE(f.size() == 1);
  CHECK(f[0].error == FrameError::line_too_long);
}

TEST_CASE("invalid UTF-8 is a frame error; valid multi-byte text is not") {
  LineReader r;
  auto f = feed_all(r, {"caf\xC3\xA9 \xF0\x9F\x98\x80\n", "bad \xC3\x28\n", "overlong \xC0\xAF\n",
                        "surrogate \xED\xA0\x80\n", "toolarge \xF4\x90\x80\x80\n", "cut \xE2\x82\n"});
  REQUIRE(f.size() == 6);
  CHECK(f[0].error == FrameError::none);
  for (int i = 1; i < 6; ++i) CHECK(f[i].error == FrameError::invalid_utf8);
}

TEST_CASE("a bad byte anywhere in a long ASCII run is found, and a good one passes (the eight-byte fast path)") {
  for (std::size_t at = 0; at + 2 <= 40; ++at) {
    CAPTURE(at);
    std::string s(40, 'a');
    CHECK(protocol::is_valid_utf8(s));
    s[at] = '\x80';  // a lone continuation byte
    CHECK_FALSE(protocol::is_valid_utf8(s));
    s.replace(at, 2, "\xC3\xA9");  // é
    CHECK(protocol::is_valid_utf8(s));
    s.replace(at, 2, "\xC0\xAF");  // overlong
    CHECK_FALSE(protocol::is_valid_utf8(s));
  }
  CHECK_FALSE(protocol::is_valid_utf8(std::string(64, 'a') + "\xE2\x82"));  // cut at the end
  CHECK(protocol::is_valid_utf8(std::string(64, 'a') + "\xE2\x82\xAC"));
}

TEST_CASE("utf8_prefix_length never cuts inside a character") {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a é € 😀 : 1+2+3+4 bytes
  CHECK(protocol::utf8_prefix_length(s, 100) == s.size());
  CHECK(protocol::utf8_prefix_length(s, 1) == 1);
  CHECK(protocol::utf8_prefix_length(s, 2) == 1);
  CHECK(protocol::utf8_prefix_length(s, 3) == 3);
  CHECK(protocol::utf8_prefix_length(s, 5) == 3);
  CHECK(protocol::utf8_prefix_length(s, 6) == 6);
  CHECK(protocol::utf8_prefix_length(s, 9) == 6);
  CHECK(protocol::utf8_prefix_length(s, 10) == 10);
  CHECK(protocol::utf8_prefix_length(s, 0) == 0);
}
