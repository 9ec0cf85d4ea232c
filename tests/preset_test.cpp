#include "policy/decide.hpp"
#include "policy/preset.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "protocol/tools.hpp"
#include "policy/policy_lint.hpp"

using namespace supervisor;
using nlohmann::json;

namespace {
const std::filesystem::path kPolicies = std::filesystem::path(SUBAGENT_SOURCE_DIR) / "policies";

json explore_doc() { return read_jsonc_file(kPolicies / "explore.json"); }

std::string parse_error(const json& doc) {
  try {
    parse_preset(doc, "test.json", "");
  } catch (const PresetError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("every shipped preset loads and names itself after its file") {
  auto names = list_presets(kPolicies);
  CHECK(std::find(names.begin(), names.end(), "explore") != names.end());
  for (const auto& n : names) {
    Preset p = load_preset(n, kPolicies);
    CHECK(p.name == n);
    CHECK(p.digest.size() == 64);
    CHECK_FALSE(p.allow.empty());
  }
}

TEST_CASE("explore decisions: allow, deny, unlisted, parent-only") {
  Preset p = load_preset("explore", kPolicies);
  std::string why;
  CHECK(decide(p, "grep", json::object(), why) == Decision::allow);
  CHECK(why.find("tools.allow") != std::string::npos);
  CHECK(decide(p, "write_file", json::object(), why) == Decision::deny);
  CHECK(why.find("tools.deny") != std::string::npos);
  CHECK(decide(p, "launch_missiles", json::object(), why) == Decision::deny);
  CHECK(why.find("does not list") != std::string::npos);
  CHECK(decide(p, "spawn_agent", json::object(), why) == Decision::deny);
  CHECK(why.find("parent-only") != std::string::npos);
}

TEST_CASE("argument rules: command prefixes and protected paths") {
  json doc = explore_doc();
  doc["tools"]["allow"] = {"read_file", "edit_file"};
  doc["tools"]["ask"] = {"run_command"};
  doc["tools"]["deny"] = json::array();
  doc["tools"]["rules"] = json::parse(R"([
    {"tool": "run_command", "when": {"command_prefix": ["make", "git status"]}, "decision": "allow"},
    {"tool": "edit_file", "when": {"path_under": [".git", "policies"]}, "decision": "deny"}])");
  Preset p = parse_preset(doc, "t.json", "");
  std::string why;
  CHECK(decide(p, "run_command", {{"command", "make -j2"}}, why) == Decision::allow);
  CHECK(why.find("tools.rules[0]") != std::string::npos);
  CHECK(decide(p, "run_command", {{"command", "git status"}}, why) == Decision::allow);
  CHECK(decide(p, "run_command", {{"command", "makefoo"}}, why) == Decision::ask);
  CHECK(decide(p, "run_command", {{"command", "make; rm -rf /"}}, why) == Decision::ask);
  CHECK(decide(p, "run_command", {{"command", "make $(curl x)"}}, why) == Decision::ask);
  CHECK(decide(p, "run_command", {{"command", "rm -rf /"}}, why) == Decision::ask);
  CHECK(decide(p, "edit_file", {{"path", "src/a.c"}}, why) == Decision::allow);
  CHECK(decide(p, "edit_file", {{"path", ".git/hooks/pre-commit"}}, why) == Decision::deny);
  CHECK(decide(p, "edit_file", {{"path", "src/../.git/config"}}, why) == Decision::deny);
  CHECK(decide(p, "edit_file", {{"path", "../outside"}}, why) == Decision::deny);
  CHECK(decide(p, "edit_file", {{"path", "policies"}}, why) == Decision::deny);
  CHECK(decide(p, "edit_file", {{"path", "policies-not"}}, why) == Decision::allow);
}

TEST_CASE("policy errors name the file and the field") {
  json d = explore_doc();
  d["budgets"]["max_steps"] = "many";
  CHECK(parse_error(d) == "policy test.json: budgets.max_steps must be a non-negative integer");
  d = explore_doc();
  d["colour"] = "blue";
  CHECK(parse_error(d) ==
        "policy test.json: colour is not a known field (expected one of: schema, preset, description, unattended, "
        "workspace_mode, tools, blocked, web, writes, budgets, sandbox)");
  d = explore_doc();
  d["tools"]["allow"].push_back("write_file");
  CHECK(parse_error(d).find("more than once") != std::string::npos);
  d = explore_doc();
  d["tools"]["allow"].push_back("spawn_agent");
  CHECK(parse_error(d).find("parent-only") != std::string::npos);
  d = explore_doc();
  d["tools"]["rules"] = json::parse(R"([{"tool":"write_file","when":{"path_under":["x"]},"decision":"allow"}])");
  CHECK(parse_error(d).find("would widen 'write_file'") != std::string::npos);
  d = explore_doc();
  d["schema"] = 2;
  CHECK(parse_error(d).find("schema must be 1") != std::string::npos);
  CHECK(parse_error(explore_doc()).empty());
}

TEST_CASE("a policy naming a tool outside the catalogue is refused, naming the field and the valid names") {
  json d = explore_doc();
  d["tools"]["allow"].push_back("web_fetc");
  const std::string e = parse_error(d);
  CHECK_MESSAGE(e.find("tools.allow[4] names 'web_fetc', which is not a tool in the catalogue") != std::string::npos,
                e);
  CHECK(e.find("read_file, list_dir, glob, grep") != std::string::npos);
  CHECK(e.find("web_fetch, web_search") != std::string::npos);
  d = explore_doc();
  d["tools"]["deny"].push_back("teleport");
  CHECK(parse_error(d).find("tools.deny[9] names 'teleport'") != std::string::npos);
  d = explore_doc();
  d["tools"]["ask"] = {"Grep"};
  CHECK(parse_error(d).find("tools.ask[0] names 'Grep'") != std::string::npos);
  // Twin: every catalogue name is accepted, and a parent-only capability may still be denied.
  d = explore_doc();
  d["tools"]["deny"].push_back("spawn_agent");
  CHECK(parse_error(d).empty());
  for (const auto& name : protocol::tool_names()) {
    d = explore_doc();
    d["tools"] = {{"allow", {name}}};
    CHECK_MESSAGE(parse_error(d).empty(), name);
  }
}

TEST_CASE("a read-only preset may open /dev/null read-write, and nothing else") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("lint-null-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto errors = [&](const json& d) {
    std::ofstream(dir / "p.json") << d.dump(2);
    std::string all;
    for (const auto& x : lint_policy_file(dir / "p.json", kPolicies / "schema.json"))
      if (x.severity == supervisor::Severity::error) all += x.message + "\n";
    return all;
  };
  for (const char* n : {"explore", "reviewer", "research"}) {
    json d = read_jsonc_file(kPolicies / (std::string(n) + ".json"));
    CHECK(d["sandbox"]["filesystem"]["write"] == json::array({"/dev/null"}));
  }
  json d = explore_doc();
  d["preset"] = "p";
  CHECK(errors(d).empty());
  d["sandbox"]["filesystem"]["write"] = {"/dev/null", "/tmp"};
  CHECK(errors(d).find("read-only preset (no tool that writes) has write roots: /tmp") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("unknown presets and bad names are refused with what exists") {
  CHECK_THROWS_WITH(load_preset("nosuch", kPolicies), doctest::Contains("unknown preset 'nosuch'"));
  CHECK_THROWS_WITH(load_preset("nosuch", kPolicies), doctest::Contains("explore"));
  CHECK_THROWS_WITH(load_preset("Bad Name", kPolicies), doctest::Contains("not a valid preset name"));
}

TEST_CASE("a catalog reads its presets once, keeps each file's error, and answers as load_preset does") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("subagent-catalog-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kPolicies / "explore.json", dir / "explore.json");
  std::ofstream(dir / "broken.json") << "{ not json";
  PresetCatalog catalog(dir);
  const Preset before = catalog.get("explore");
  CHECK(before.digest == load_preset("explore", dir).digest);

  // Edited after the catalog was made: the catalog keeps what it read (the twin: a fresh read sees
  // the edit, so the file did change).
  json doc = read_jsonc_file(dir / "explore.json");
  doc["budgets"]["max_steps"] = 3;
  std::ofstream(dir / "explore.json", std::ios::trunc) << doc.dump();
  CHECK(catalog.get("explore").digest == before.digest);
  CHECK(catalog.get("explore").budgets.max_steps == before.budgets.max_steps);
  CHECK(load_preset("explore", dir).budgets.max_steps == 3);
  CHECK(PresetCatalog(dir).get("explore").budgets.max_steps == 3);

  // A file that did not load gives the same error each time, as load_preset gives it.
  std::string direct;
  try {
    load_preset("broken", dir);
  } catch (const PresetError& e) {
    direct = e.what();
  }
  REQUIRE_FALSE(direct.empty());
  CHECK_THROWS_WITH_AS(catalog.get("broken"), direct.c_str(), PresetError);
  CHECK_THROWS_WITH_AS(catalog.get("broken"), direct.c_str(), PresetError);

  // Unknown and invalid names: load_preset's messages; a preset added later is unknown to the catalog.
  fs::copy_file(kPolicies / "reviewer.json", dir / "reviewer.json");
  CHECK_THROWS_WITH_AS(catalog.get("reviewer"),
                       ("unknown preset 'reviewer' (known in " + dir.string() + ": broken, explore)").c_str(),
                       PresetError);
  CHECK(load_preset("reviewer", dir).name == "reviewer");
  CHECK_THROWS_WITH(catalog.get("Bad Name"), doctest::Contains("not a valid preset name"));
  // A path is read when asked, like load_preset.
  CHECK(catalog.get((dir / "reviewer.json").string()).name == "reviewer");
  fs::remove_all(dir);
}

TEST_CASE("schema validator reports the pointer of the offending value") {
  json schema = json::parse(R"({"type":"object","required":["a"],"additionalProperties":false,
    "properties":{"a":{"type":"integer","minimum":1},"b":{"type":"array","items":{"enum":["x","y"]}}}})");
  CHECK(validate_schema(json::parse(R"({"a":1,"b":["x"]})"), schema).empty());
  auto v = validate_schema(json::parse(R"({"a":0,"b":["z"],"c":1})"), schema);
  REQUIRE(v.size() == 3);
  CHECK(v[0] == "/a: must be at least 1");
  CHECK(v[1] == "/b/0: \"z\" is not one of [\"x\",\"y\"]");
  CHECK(v[2] == "/c: is not a known field (expected one of: a, b)");
  CHECK(validate_schema(json::object(), schema).front() == "/: missing required field \"a\"");
}

TEST_CASE("every shipped policy passes its schema and the lints") {
  for (const auto& n : list_presets(kPolicies)) {
    auto findings = lint_policy_file(kPolicies / (n + ".json"), kPolicies / "schema.json");
    std::string all;
    for (const auto& f : findings)
      if (f.severity == supervisor::Severity::error) all += f.message + "\n";
    CHECK_MESSAGE(all.empty(), n << ": " << all);
  }
}

TEST_CASE("lints catch widening") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("lint-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json d = explore_doc();
  d["sandbox"]["filesystem"]["write"] = {"${workspace}"};
  d["tools"]["ask"] = {"git_status"};
  d["tools"]["deny"].erase(std::find(d["tools"]["deny"].begin(), d["tools"]["deny"].end(), "git_status"));
  std::ofstream(dir / "wide.json") << d.dump(2);
  auto f = lint_policy_file(dir / "wide.json", kPolicies / "schema.json");
  std::string all;
  for (const auto& x : f) all += std::string(to_string(x.severity)) + ": " + x.message + "\n";
  CHECK(all.find("read-only preset") != std::string::npos);
  CHECK(all.find("runs unattended") != std::string::npos);
  CHECK(all.find("workspace_mode is \"read\" but ${workspace} is a write root") != std::string::npos);
  d = explore_doc();
  d["sandbox"]["syscalls"]["deny"] = {"not_a_syscall"};
  std::ofstream(dir / "bad.json") << d.dump(2);
  f = lint_policy_file(dir / "bad.json", kPolicies / "schema.json");
  REQUIRE_FALSE(f.empty());
  CHECK(f.back().message.find("not_a_syscall") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("map_json_source: positions and duplicates; a file nested past any policy stops the map, not the process") {
  const auto map = supervisor::map_json_source("{\n  \"a\": 1,\n  \"b\": [true, {\"c\": 2}],\n  \"a\": 3\n}\n");
  REQUIRE(map.duplicates.size() == 1);
  CHECK(map.duplicates[0].pointer == "/a");
  CHECK(map.at.at("/b/1/c").line == 3);
  // 100,000 levels of brackets: nlohmann parses them without recursion; the map must not recurse
  // that deep either (it stops at its limit).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto bounded = supervisor::map_json_source(deep);
  CHECK(bounded.at.size() <= 256);
  CHECK(bounded.at.count("") == 1);
}
