#include "supervisor/budgets.hpp"

#include <doctest/doctest.h>

using namespace supervisor;

TEST_CASE("overrides may tighten every budget") {
  Budgets base;
  BudgetOverrides o;
  o.max_steps = 5;
  o.max_tool_calls = 0;
  o.max_tokens = 999;
  o.timeout_ms = 1000;
  o.answer_bytes = 100;
  Budgets b = tighten(base, o, "the preset explore");
  CHECK(b.max_steps == 5);
  CHECK(b.max_tool_calls == 0);
  CHECK(b.max_tokens == 999);
  CHECK(b.timeout_ms == 1000);
  CHECK(b.answer_bytes == 100);
  CHECK(b.summary_bytes == base.summary_bytes);
}

TEST_CASE("equal values are not a raise") {
  Budgets base;
  BudgetOverrides o;
  o.max_steps = base.max_steps;
  CHECK(tighten(base, o, "x").max_steps == base.max_steps);
}

TEST_CASE("a raise is refused with the field and both values") {
  Budgets base;
  BudgetOverrides o;
  o.max_steps = 101;
  try {
    tighten(base, o, "the preset explore");
    FAIL("no error");
  } catch (const WideningError& e) {
    CHECK(std::string(e.what()) == "--max-steps 101 exceeds the preset explore's max_steps 100 (limits may only tighten)");
  }
  BudgetOverrides t;
  t.timeout_ms = base.timeout_ms + 1;
  CHECK_THROWS_AS(tighten(base, t, "x"), WideningError);
  BudgetOverrides k;
  k.max_tokens = 2'000'000;
  CHECK_THROWS_WITH(tighten(base, k, "x"), doctest::Contains("max_tokens 1000000"));
}

TEST_CASE("durations") {
  using std::chrono::milliseconds;
  CHECK(parse_duration("90") == milliseconds(90'000));
  CHECK(parse_duration("90s") == milliseconds(90'000));
  CHECK(parse_duration("250ms") == milliseconds(250));
  CHECK(parse_duration("5m") == milliseconds(300'000));
  CHECK(parse_duration("1h30m") == milliseconds(5'400'000));
  CHECK_THROWS(parse_duration(""));
  CHECK_THROWS(parse_duration("s"));
  CHECK_THROWS(parse_duration("5x"));
  CHECK_THROWS(parse_duration("-5s"));
  CHECK_THROWS(parse_duration("99999999999999999999h"));
}
