#include "session/budgets.hpp"

#include "frontends/control.hpp"
#include "scheduling/hub.hpp"

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
    CHECK(std::string(e.what()) ==
          "--max-steps 101 exceeds the preset explore's max_steps 100 (limits may only tighten)");
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

TEST_CASE("a cost budget tightens like the others and is capped by the parent's scope") {
  Budgets base;
  CHECK_FALSE(base.max_cost_usd);
  BudgetOverrides o;
  o.max_cost_usd = 2.5;
  Budgets b = tighten(base, o, "the preset explore");
  REQUIRE(b.max_cost_usd);
  CHECK(*b.max_cost_usd == 2.5);
  BudgetOverrides more;
  more.max_cost_usd = 3.0;
  CHECK_THROWS_WITH_AS(
      tighten(b, more, "the preset explore", "limits."),
      doctest::Contains("limits.max_cost_usd $3.0000 exceeds the preset explore's max_cost_usd $2.5000"),
      WideningError);
  BudgetOverrides zero;
  zero.max_cost_usd = 0;
  CHECK_THROWS_WITH(tighten(base, zero, "x"), doctest::Contains("--max-cost-usd must be a positive number"));

  BudgetOverrides scope;
  scope.max_cost_usd = 1.0;
  Budgets c = base;
  cap_cost_by_scope(c, scope, {});
  REQUIRE(c.max_cost_usd);
  CHECK(*c.max_cost_usd == 1.0);  // the scope's, when the spawn sets none
  CHECK_THROWS_WITH_AS(cap_cost_by_scope(c, scope, more), doctest::Contains("exceeds the parent's scope max_cost_usd"),
                       WideningError);
  BudgetOverrides less;
  less.max_cost_usd = 0.25;
  cap_cost_by_scope(c, scope, less);
  CHECK(*tighten(c, less, "x").max_cost_usd == 0.25);
}

TEST_CASE("the reservation: the worst case of one token per byte, from the previous call's input") {
  using nlohmann::json;
  const json sys = {{"role", "system"}, {"content", std::string(2000, 's')}};
  const json user = {{"role", "user"}, {"content", "brief"}};
  const json tools = json::array({{{"name", "read_file"}, {"description", "reads"}}});
  auto bytes = [](const json& j) { return j.dump().size(); };
  const std::uint64_t k = InputEstimator::kTokensPerPart;
  InputEstimator e;
  json msgs = json::array({sys, user});
  // Before any call: the whole request, a token per byte, plus the overhead of each message and tool.
  const std::uint64_t whole = bytes(sys) + bytes(user) + bytes(tools) + 3 * k;
  CHECK(e.reserve(InputEstimator::shape(msgs, tools)) == whole);
  e.observe(InputEstimator::shape(msgs, tools), 600, 0);  // the server counted far fewer

  // Two messages appended: the previous input plus them, at the worst rate.
  const json call = {{"role", "assistant"}, {"content", "x"}};
  const json result = {{"role", "tool"}, {"content", std::string(5000, 'r')}};
  msgs.push_back(call);
  msgs.push_back(result);
  CHECK(e.reserve(InputEstimator::shape(msgs, tools)) == 600 + bytes(call) + bytes(result) + 2 * k);
  // The wrap-up turn drops the tools: never credited, the same bound.
  CHECK(e.reserve(InputEstimator::shape(msgs, json::array())) == 600 + bytes(call) + bytes(result) + 2 * k);
  // Changed tool specs count in full.
  const json other = json::array({{{"name", "grep"}, {"description", "searches"}}});
  CHECK(e.reserve(InputEstimator::shape(msgs, other)) == 600 + bytes(call) + bytes(result) + 2 * k + bytes(other) + k);
  // A message rewritten in the middle: everything from it on is new.
  json edited = msgs;
  edited[1]["content"] = "brief, edited";
  CHECK(e.reserve(InputEstimator::shape(edited, tools)) ==
        600 + bytes(edited[1]) + bytes(call) + bytes(result) + 3 * k);
  // Never more than the whole request at the worst rate (a server that counted more than that
  // breaks the assumption; the bound follows what it reported).
  e.observe(InputEstimator::shape(msgs, tools), 100000, 0);
  msgs.push_back(user);
  CHECK(e.reserve(InputEstimator::shape(msgs, tools)) ==
        bytes(sys) + 2 * bytes(user) + bytes(call) + bytes(result) + bytes(tools) + 6 * k);
  // The last call's reasoning may come back as input (thinking blocks): both bounds add it.
  e.observe(InputEstimator::shape(msgs, tools), 700, 50);
  msgs.push_back(call);
  CHECK(e.reserve(InputEstimator::shape(msgs, tools)) == 700 + bytes(call) + k + 50);
}

TEST_CASE("cost of a call: each kind of input token at its own price") {
  protocol::Usage u;
  u.input_tokens = 10'000;
  u.cache_read_input_tokens = 6'000;
  u.cache_write_input_tokens = 3'000;
  u.output_tokens = 500;
  Price p{3.0, 0.30, 3.75, 15.0};
  CHECK(cost_of(u, p) == doctest::Approx((1000 * 3.0 + 6000 * 0.30 + 3000 * 3.75 + 500 * 15.0) / 1e6));
  CHECK(worst_input_price(p) == 3.75);
}

TEST_CASE("max_cost_usd from serve and mcp: parsed, capped by the parent's scope, refused above it") {
  auto limits = parse_limits(nlohmann::json{{"max_cost_usd", 0.5}}, "limits");
  REQUIRE(limits.max_cost_usd);
  CHECK(*limits.max_cost_usd == 0.5);
  CHECK_THROWS_WITH(parse_limits(nlohmann::json{{"max_cost_usd", "1"}}, "limits"),
                    doctest::Contains("limits.max_cost_usd: must be a positive number"));
  CHECK_THROWS_WITH(parse_limits(nlohmann::json{{"max_cost_usd", -1}}, "limits"),
                    doctest::Contains("limits.max_cost_usd: must be a positive number"));
  Scope scope = parse_scope(nlohmann::json{{"budgets", {{"max_cost_usd", 1.0}}}});
  Preset p;
  p.name = "explore";
  Budgets b = effective_budgets(p, scope, {});
  REQUIRE(b.max_cost_usd);
  CHECK(*b.max_cost_usd == 1.0);  // the parent's cap reaches a child that sets none
  CHECK(*effective_budgets(p, scope, limits).max_cost_usd == 0.5);
  auto more = parse_limits(nlohmann::json{{"max_cost_usd", 2.0}}, "limits");
  CHECK_THROWS_WITH(effective_budgets(p, scope, more),
                    doctest::Contains("limits.max_cost_usd $2.0000 exceeds the parent's scope"));
  CHECK_FALSE(effective_budgets(p, Scope{}, {}).max_cost_usd);  // no cost budget unless one is set
}

TEST_CASE("a budget of 0 that would end the child at once is refused, naming the field") {
  Budgets base;
  struct Case {
    std::optional<std::uint64_t> BudgetOverrides::*field;
    const char* flag;
    const char* json_name;
  };
  for (const Case& c : {Case{&BudgetOverrides::max_steps, "--max-steps", "limits.max_steps"},
                        Case{&BudgetOverrides::max_tokens, "--max-tokens", "limits.max_tokens"},
                        Case{&BudgetOverrides::timeout_ms, "--timeout", "limits.timeout"},
                        Case{&BudgetOverrides::summary_bytes, "--summary-bytes", "limits.summary_bytes"},
                        Case{&BudgetOverrides::answer_bytes, "--answer-bytes", "limits.answer_bytes"}}) {
    INFO(c.flag);
    BudgetOverrides o;
    o.*c.field = 0;
    for (const auto& [prefix, name] : {std::pair<std::string, std::string>{"", c.flag}, {"limits.", c.json_name}}) {
      std::string what;
      try {
        tighten(base, o, "the preset explore", prefix);
      } catch (const WideningError& e) {
        what = e.what();
      }
      CHECK_MESSAGE(what.find(name + " 0: must be at least 1") == 0, what);
    }
    o.*c.field = 1;  // the twin: the smallest real budget is fine
    CHECK_NOTHROW(tighten(base, o, "the preset explore"));
  }
  // 0 stays meaningful where it is one: no tool calls, no thinking, no wrap-up grace.
  BudgetOverrides zero_ok;
  zero_ok.max_tool_calls = 0;
  zero_ok.max_thinking_tokens = 0;
  zero_ok.wrap_up_grace_ms = 0;
  Budgets b = tighten(base, zero_ok, "the preset explore");
  CHECK(b.max_tool_calls == 0);
  CHECK(b.max_thinking_tokens == 0);
  CHECK(b.wrap_up_grace_ms == 0);
}
