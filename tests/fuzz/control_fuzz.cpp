// The parent control protocol (`serve`) as a careless or hostile parent writes it: bytes are split
// into lines the way ParentIo does (protocol::LineReader, then JSON), and every JSON value goes through
// parse_spawn, parse_limits and parse_scope.
//
// Properties: the parsers throw nothing but BadRequest (whose text is not empty); a timeout given in
// seconds comes back as exactly that many milliseconds or is refused, never wrapped around; a duration
// string never yields a negative time.
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "protocol/framing.hpp"
#include "protocol/messages.hpp"
#include "session/budgets.hpp"
#include "frontends/control.hpp"

namespace {

using nlohmann::json;

void check_limits(const json& j, const supervisor::BudgetOverrides& o) {
  if (!j.is_object() || !o.timeout_ms) return;
  const json& t = j.at("timeout");
  if (t.is_number_unsigned()) FUZZ_CHECK(*o.timeout_ms / 1000 == t.get<std::uint64_t>());
  FUZZ_CHECK(static_cast<std::int64_t>(*o.timeout_ms) >= 0);  // fits a signed clock
}

template <class F>
void expect_bad_request_only(F&& f) {
  fuzz::only_throws<supervisor::BadRequest>(f);
}

void one_value(const json& j) {
  expect_bad_request_only([&] {
    auto r = supervisor::parse_spawn(j);
    if (j.is_object() && j.contains("limits")) check_limits(j["limits"], r.limits);
  });
  expect_bad_request_only([&] { check_limits(j, supervisor::parse_limits(j, "limits")); });
  expect_bad_request_only([&] {
    auto s = supervisor::parse_scope(j);
    if (j.is_object() && j.contains("budgets")) check_limits(j["budgets"], s.budgets);
  });
  if (j.is_string()) {
    try {
      FUZZ_CHECK(supervisor::parse_duration(j.get<std::string>()).count() >= 0);
    } catch (const std::invalid_argument&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  protocol::LineReader reader(64 * 1024);
  std::vector<protocol::Frame> frames;
  reader.feed(std::string_view(reinterpret_cast<const char*>(data), size), frames);
  reader.finish(frames);
  for (const auto& f : frames) {
    if (f.error != protocol::FrameError::none) continue;
    // What ParentIo does with a line before a handler sees it.
    if (!protocol::nesting_within(f.line)) continue;
    json j = json::parse(f.line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    one_value(j);
    if (j.is_object())
      for (const char* key : {"limits", "scope", "budgets"})
        if (j.contains(key)) one_value(j[key]);
  }
  return 0;
}
