// parse_policy: the shipped format parses; every kind of mistake is an error naming file and field.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "sandbox/policy.hpp"

namespace {

nlohmann::json explore_section() {
  std::ifstream in(SUBAGENT_SOURCE_DIR "/policies/explore.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, true, /*ignore_comments=*/true).at("sandbox");
}

std::string error_of(const nlohmann::json& section) {
  try {
    sandbox::parse_policy(section, "test.json");
  } catch (const sandbox::PolicyError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("explore.json parses") {
  auto policy = sandbox::parse_policy(explore_section(), "explore.json");
  CHECK(policy.source == "explore.json");
  CHECK(policy.read_paths.front() == "${workspace}");
  // /dev/null read-write grants nothing; it is the only write entry of a read-only preset.
  CHECK(policy.write_paths == std::vector<std::string>{"/dev/null"});
  CHECK(policy.exec_paths.at(1) == "${interpreter}");
  CHECK(to_string(policy.network) == "none");
  CHECK(policy.rlimits.open_files == 256);
  CHECK(policy.rlimits.processes == 32);
  CHECK(policy.namespaces.size() == 6);
  CHECK(policy.env_set.at("PATH") == "/usr/bin:/bin");
  CHECK(policy.required.size() == 6);
}

TEST_CASE("mistakes are errors that name the file and the field") {
  auto s = explore_section();
  auto with = [&](auto edit) {
    auto copy = s;
    edit(copy);
    return error_of(copy);
  };
  CHECK(with([](auto& j) { j["rlimits"]["open_files"] = -1; }) ==
        "policy test.json: sandbox.rlimits.open_files must be a non-negative integer");
  CHECK(with([](auto& j) { j["rlimits"]["cpu_seconds"] = "10"; }) ==
        "policy test.json: sandbox.rlimits.cpu_seconds must be a non-negative integer");
  CHECK(with([](auto& j) { j["rlimits"].erase("processes"); }) ==
        "policy test.json: sandbox.rlimits.processes is missing");
  CHECK(with([](auto& j) {
          j["rlimits"]["stack_mb"] = 8;
        }).starts_with("policy test.json: sandbox.rlimits.stack_mb is not a known field"));
  CHECK(with([](auto& j) { j["extra"] = 1; }).starts_with("policy test.json: sandbox.extra is not a known field"));
  CHECK(with([](auto& j) {
          j["syscalls"]["deny"] = {"ptrace", "no_such_call"};
        }) == "policy test.json: sandbox.syscalls.deny[1] names an unknown syscall 'no_such_call'");
  CHECK(with([](auto& j) {
          j["namespaces"] = {"user", "time"};
        }).starts_with("policy test.json: sandbox.namespaces[1] names an unknown namespace 'time'"));
  CHECK(with([](auto& j) {
          j["namespaces"] = {"pid", "pid"};
        }) == "policy test.json: sandbox.namespaces[1] repeats 'pid'");
  CHECK(with([](auto& j) {
          j["required"] = {"landlock", "selinux"};
        }) == "policy test.json: sandbox.required[1] names an unknown layer 'selinux'");
  CHECK(with([](auto& j) { j["network"] = "internet"; }) ==
        "policy test.json: sandbox.network must be \"none\", \"loopback\" or \"host\" (got "
        "\"internet\")");
  CHECK(with([](auto& j) { j["network"] = "host"; }) ==
        "policy test.json: sandbox.network is \"host\" but sandbox.namespaces lists \"net\", which "
        "hides it");
  CHECK(with([](auto& j) { j["filesystem"]["read"] = {"relative/path"}; }) ==
        "policy test.json: sandbox.filesystem.read[0] must be an absolute path or start with "
        "${workspace} or ${child} ('relative/path')");
  CHECK(with([](auto& j) { j["filesystem"]["write"] = {"${tmp}/x"}; }) ==
        "policy test.json: sandbox.filesystem.write[0] uses an unknown template ('${tmp}/x'); "
        "only ${workspace}, ${child}, ${interpreter} and ${home} exist");
  CHECK(with([](auto& j) { j["filesystem"]["write"] = {"${home}/x"}; }) ==
        "policy test.json: sandbox.filesystem.write[0] must be exactly \"${home}\" ('${home}/x'): the private "
        "home is granted as a whole");
  CHECK(with([](auto& j) { j["filesystem"]["execute"] = {"${home}"}; }) ==
        "policy test.json: sandbox.filesystem.execute[0] may not be \"${home}\": the private home may be read "
        "or written, never executed or protected");
  CHECK(with([](auto& j) { j["filesystem"]["write"] = {"${interpreter}"}; }) ==
        "policy test.json: sandbox.filesystem.write[0] may not be \"${interpreter}\": an interpreter may be read "
        "and executed, never written or protected");
  CHECK(with([](auto& j) { j["filesystem"]["execute"] = {"${interpreter}/lib"}; }) ==
        "policy test.json: sandbox.filesystem.execute[0] must be exactly \"${interpreter}\" ('${interpreter}/lib'): it "
        "stands for whole files");
  CHECK(with([](auto& j) { j["filesystem"]["execute"] = {"${interpreter}"}; }) == "no error");
  CHECK(with([](auto& j) { j["filesystem"]["read"] = {"${workspace}/../etc"}; }) ==
        "policy test.json: sandbox.filesystem.read[0] must not contain '..' ('${workspace}/../etc')");
  // Opened in the supervisor, /proc/self would name the supervisor's own /proc entry.
  CHECK(with([](auto& j) {
          j["filesystem"]["read"] = {"/usr", "/proc/self/fd"};
        }) ==
        "policy test.json: sandbox.filesystem.read[1] names /proc/self ('/proc/self/fd'), which "
        "would resolve to the supervisor's own /proc entry, never the child's; it cannot be "
        "granted");
  CHECK(with([](auto& j) { j["environment"]["allow"] = {"BAD-NAME"}; }) ==
        "policy test.json: sandbox.environment.allow[0] is not a valid variable name ('BAD-NAME')");
  CHECK(with([](auto& j) { j["environment"]["set"]["X"] = 1; }) ==
        "policy test.json: sandbox.environment.set.X must be a string");
  CHECK(with([](auto& j) {
          j["filesystem"]["write"] = nlohmann::json::array();
          j["filesystem"]["protected"] = {".git"};
        }) ==
        "policy test.json: sandbox.filesystem.protected lists paths but there is no write root to "
        "protect");
  CHECK(error_of(nlohmann::json::array()) == "policy test.json: sandbox must be an object");
}

TEST_CASE("sandbox.syscalls: groups, allow and deny are checked, each mistake named") {
  auto s = explore_section();
  auto with = [&](auto edit) {
    auto copy = s;
    edit(copy);
    return error_of(copy);
  };
  auto policy = sandbox::parse_policy(s, "explore.json");
  CHECK(policy.syscall_groups == std::vector<std::string>{"base"});
  CHECK(policy.extra_allowed_syscalls.empty());
  CHECK(with([](auto& j) { j["syscalls"]["groups"] = {"base", "watch"}; }) == "no error");
  CHECK(with([](auto& j) { j["syscalls"]["allow"] = {"inotify_init1"}; }) == "no error");
  CHECK(with([](auto& j) { j.erase("syscalls"); }) == "policy test.json: sandbox.syscalls is missing");
  CHECK(with([](auto& j) { j["syscalls"].erase("groups"); }) == "policy test.json: sandbox.syscalls.groups is missing");
  CHECK(with([](auto& j) {
          j["syscalls"]["groups"] = {"base", "sockets"};
        }) ==
        "policy test.json: sandbox.syscalls.groups[1] names an unknown syscall group 'sockets' "
        "(expected one of: base, process, filesystem_write, network, ipc, watch)");
  CHECK(with([](auto& j) {
          j["syscalls"]["groups"] = {"base", "base"};
        }) == "policy test.json: sandbox.syscalls.groups[1] repeats 'base'");
  CHECK(with([](auto& j) { j["syscalls"]["groups"] = {"process"}; }) ==
        "policy test.json: sandbox.syscalls.groups must list \"base\" (execve and what every "
        "process needs to start at all)");
  CHECK(with([](auto& j) {
          j["syscalls"]["allow"] = {"inotify_init1", "inotify_watch"};
        }) == "policy test.json: sandbox.syscalls.allow[1] names an unknown syscall 'inotify_watch'");
  CHECK(with([](auto& j) { j["syscalls"]["allow"] = {"ptrace"}; }) ==
        "policy test.json: sandbox.syscalls.allow[0] names 'ptrace', which every preset refuses; it "
        "cannot be allowed");
  CHECK(with([](auto& j) { j["syscalls"]["allow"] = {"clone3"}; })
            .starts_with("policy test.json: sandbox.syscalls.allow[0] names 'clone3', whose flags the filter cannot "
                         "inspect"));
  CHECK(with([](auto& j) {
          j["syscalls"]["allow"] = {"mbind"};
          j["syscalls"]["deny"] = {"mbind"};
        }) ==
        "policy test.json: sandbox.syscalls.allow[0] names 'mbind', which "
        "sandbox.syscalls.deny also lists");
  CHECK(with([](auto& j) { j["syscalls"]["groups"] = "base"; }) ==
        "policy test.json: sandbox.syscalls.groups must be an array of strings");
  CHECK(with([](auto& j) {
          j["syscalls"]["extra"] = {"x"};
        }).starts_with("policy test.json: sandbox.syscalls.extra is not a known field"));
}
