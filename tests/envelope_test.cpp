#include "protocol/envelope.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <set>

#include "protocol/framing.hpp"

using namespace protocol;

TEST_CASE("cap_utf8 at and around the boundary") {
  CHECK(cap_utf8("hello", 5).text == "hello");
  CHECK_FALSE(cap_utf8("hello", 5).truncated);
  auto c = cap_utf8("hello!", 5);
  CHECK(c.text == "hello");
  CHECK(c.truncated);
  CHECK(c.original_bytes == 6);
  CHECK(cap_utf8("", 0).text.empty());
  CHECK_FALSE(cap_utf8("", 0).truncated);
}

TEST_CASE("cap_utf8 never splits a multi-byte character") {
  // 1000 euro signs (3 bytes each) = 3000 bytes; cap 2000 must keep 666 whole signs (1998 bytes).
  std::string euros;
  for (int i = 0; i < 1000; ++i) euros += "\xE2\x82\xAC";
  for (std::size_t cap : {1997u, 1998u, 1999u, 2000u, 2001u}) {
    auto c = cap_utf8(euros, cap);
    CHECK(c.truncated);
    CHECK(c.text.size() <= cap);
    CHECK(c.text.size() % 3 == 0);
    CHECK(cap - c.text.size() < 3);
    CHECK(is_valid_utf8(c.text));
    CHECK(c.original_bytes == 3000);
  }
  std::string emoji = "ab\xF0\x9F\x98\x80";  // 6 bytes
  CHECK(cap_utf8(emoji, 5).text == "ab");
  CHECK(cap_utf8(emoji, 6).text == emoji);
}

TEST_CASE("envelope JSON carries every documented field") {
  Envelope e;
  e.id = "0123456789ab";
  e.preset = "explore";
  e.status = Status::budget_exhausted;
  e.budget = "steps";
  e.summary = cap_utf8("s", 10);
  e.answer = cap_utf8("answer", 3);
  e.tools_used = {{"grep", 2}};
  e.exit.signal = SIGKILL;
  auto j = to_json(e);
  for (const char* k : {"id",
                        "preset",
                        "description",
                        "status",
                        "budget",
                        "reason",
                        "summary",
                        "summary_truncated",
                        "summary_bytes",
                        "answer",
                        "answer_truncated",
                        "answer_bytes",
                        "tools_used",
                        "tools_denied",
                        "denials",
                        "denials_omitted",
                        "usage",
                        "steps",
                        "tool_calls",
                        "duration_ms",
                        "exit",
                        "transcript",
                        "sandbox"})
    CHECK_MESSAGE(j.contains(k), k);
  CHECK(j["status"] == "budget_exhausted");
  CHECK(j["budget"] == "steps");
  CHECK(j["answer"] == "ans");
  CHECK(j["answer_truncated"] == true);
  CHECK(j["answer_bytes"] == 6);
  CHECK(j["exit"]["signal"] == "SIGKILL");
  CHECK(j["exit"]["code"].is_null());
  CHECK(j["transcript"].is_null());
  CHECK(j["denials"] == nlohmann::json::array());
  CHECK(j["denials_omitted"] == 0);
}

TEST_CASE("statuses map to distinct exit codes and names round-trip") {
  std::set<int> codes;
  for (Status s : {Status::completed, Status::budget_exhausted, Status::timeout, Status::cancelled, Status::failed,
                   Status::protocol_error}) {
    codes.insert(exit_code_for(s));
    CHECK(status_from_string(to_string(s)) == s);
  }
  CHECK(codes.size() == 6);
  CHECK(exit_code_for(Status::completed) == 0);
  CHECK_FALSE(status_from_string("nope").has_value());
}
