// Regressions for what the fuzz targets in tests/fuzz/ found (see tests/fuzz/README.md). Each case
// names the target that found it; its reproducer is in tests/fuzz/corpus/<target>/.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/messages.hpp"
#include "session/budgets.hpp"
#include "frontends/control.hpp"
#include "frontends/parent_io.hpp"
#include "policy/preset.hpp"
#include "test_util.hpp"
// A private header of the providers: the model's tool-call argument text is parsed there.
#include "../supervisor/models/provider_stream.hpp"

using nlohmann::json;

namespace {

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

// child_protocol: nlohmann::json copies, compares and prints recursively, so a child that sent one
// line of ~1 MiB of '[' crashed the supervisor with a stack overflow when the decoder copied it.
TEST_CASE("a message nested deeper than kMaxDepth is refused before it is parsed") {
  const std::string deep = R"({"type":"model_request","id":"m","messages":)" + nested(500'000) + "}";
  auto d = protocol::decode_child_message(deep);
  REQUIRE_FALSE(d);
  CHECK(d.error.find("nested deeper than 128") != std::string::npos);
  auto s = protocol::decode_supervisor_message(R"({"type":"tool_result","id":"t","ok":true,"content":"x","z":)" +
                                               nested(129) + "}");
  CHECK_FALSE(s);
  // The twin: the same message within the bound decodes.
  // (object, messages array, message object: 3 levels, then 125 more make 128)
  auto ok = protocol::decode_child_message(
      R"({"type":"model_request","id":"m","messages":[{"role":"user","content":"x","deep":)" + nested(125) + "}]}");
  CHECK_MESSAGE(ok, ok.error);
}

TEST_CASE("nesting_within counts brackets outside strings only") {
  CHECK(protocol::nesting_within("[[]]", 2));
  CHECK_FALSE(protocol::nesting_within("[[[]]]", 2));
  CHECK(protocol::nesting_within(R"(["[[[[", "\"[[[[", {"a":"{{{{"}])", 2));
  CHECK_FALSE(protocol::nesting_within(R"(["\\", [[]]])", 2));  // the escape ends before the quote
  CHECK(protocol::nesting_within("]]]][[", 2));                 // not JSON: no underflow, no crash
  CHECK(protocol::nesting_within("", 0));
}

// control: the same stack overflow through `serve` (and `mcp`): ParentIo parsed every line as JSON.
TEST_CASE("ParentIo reports a too-deep line as a bad line and keeps reading") {
  test::TempDir dir;
  const auto file = dir.path() / "in.jsonl";
  {
    std::ofstream out(file);
    out << nested(200'000) << "\n"
        << R"({"type":"list"})"
        << "\n";
  }
  int in = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  int out = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  REQUIRE(in >= 0);
  REQUIRE(out >= 0);
  boost::asio::io_context io;
  std::vector<json> messages;
  std::vector<std::string> bad;
  bool eof = false;
  auto pio = supervisor::ParentIo::create(io, in, out, 1u << 20,
                                          {[&](const json& j) { messages.push_back(j); },
                                           [&](const std::string& e) { bad.push_back(e); }, [&] { eof = true; }});
  pio->start();
  io.run();
  CHECK(eof);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].find("nested deeper than") != std::string::npos);
  REQUIRE(messages.size() == 1);
  CHECK(messages[0]["type"] == "list");
  ::close(in);
  ::close(out);
}

// The same overflow from a model server: tool-call arguments arrive as text and are parsed.
TEST_CASE("a model's tool-call arguments nested too deep are an error, not a crash") {
  std::string err;
  json j = supervisor::detail::parse_arguments(R"({"a":)" + nested(300'000) + "}", "grep", err);
  CHECK(j == json::object());
  CHECK(err.find("not a JSON object") != std::string::npos);
  err.clear();
  CHECK(supervisor::detail::parse_arguments(R"({"a":[1]})", "grep", err) == json{{"a", {1}}});
  CHECK(err.empty());
}

// control: "timeout" in seconds was multiplied by 1000 without a check, so 18446744073709552 s
// became 384 ms; a duration's parts were summed without one, so two huge parts wrapped around.
TEST_CASE("a timeout too large for the clock is refused, never wrapped") {
  CHECK_THROWS_WITH_AS(supervisor::parse_limits(json{{"timeout", 18446744073709552ull}}, "limits"),
                       "limits.timeout: is too large", supervisor::BadRequest);
  CHECK(*supervisor::parse_limits(json{{"timeout", 9223372036854775ull}}, "limits").timeout_ms ==
        9223372036854775000ull);
  CHECK_THROWS_AS(supervisor::parse_duration("18446744073709551s18446744073709551s"), std::invalid_argument);
  CHECK_THROWS_AS(supervisor::parse_duration("9223372036854775808ms"), std::invalid_argument);
  CHECK_THROWS_AS(supervisor::parse_limits(json{{"timeout", "5000000000000000h"}}, "limits"), supervisor::BadRequest);
  CHECK(supervisor::parse_duration("9223372036854775807ms").count() == INT64_MAX);
  CHECK(supervisor::parse_duration("1h30m").count() == 5'400'000);
}

// policy: the same wrap-around for the policy file's "..._seconds" budgets.
TEST_CASE("a policy's seconds too large for the clock are refused, never wrapped") {
  json doc = supervisor::read_jsonc_file(test::policy_dir() / "explore.json");
  doc["budgets"]["timeout_seconds"] = 18446744073709552ull;
  CHECK_THROWS_WITH_AS(supervisor::parse_preset(doc, "/p/explore.json", "d"),
                       "policy explore.json: budgets.timeout_seconds is too large", supervisor::PresetError);
  doc["budgets"]["timeout_seconds"] = 60;
  doc["budgets"]["wrap_up_grace_seconds"] = 18446744073709551615ull;
  CHECK_THROWS_AS(supervisor::parse_preset(doc, "/p/explore.json", "d"), supervisor::PresetError);
  doc["budgets"].erase("wrap_up_grace_seconds");
  CHECK(supervisor::parse_preset(doc, "/p/explore.json", "d").budgets.timeout_ms == 60'000);
}
