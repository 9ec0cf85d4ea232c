// `subagent-supervisor audit`: reads an audit log and answers "what did child X do" and "which children
// used tool Y". Streams the file; never loads it whole.
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "supervisor/audit.hpp"
#include "supervisor/transcript.hpp"

namespace supervisor::cli {

using nlohmann::json;

namespace {

constexpr const char* kAuditHelp = R"(usage: subagent-supervisor audit [filters] [--children | --json] [--file FILE]

Reads the audit log (one JSON line per spawn, tool decision, approval, budget event, kill and
envelope) and prints the lines that match every filter given.

Filters:
  --child ID         events of one child (a unique prefix of the id is enough)
  --tool NAME        tool decisions and approvals for one tool, e.g. run_command
  --decision D       tool decisions that were allow, deny or ask
  --event KIND       spawn | tool_decision | approval | budget | kill | cancel | failure | envelope
  --parent NAME      children a given parent asked for
  --preset NAME      children of one preset

Output:
  (default)          one readable line per event
  --children         only the children that matched, one per line: id, preset, parent, matching events
  --json             the matching lines unchanged (JSON lines, for jq)

  --file FILE        the audit log (default: $XDG_STATE_HOME/subagent-supervisor/transcripts/audit.jsonl)
  -h, --help         this text

Examples:
  subagent-supervisor audit --child 3f2a            # what did child 3f2a... do
  subagent-supervisor audit --tool run_command --decision allow --children
                                                    # which children ran commands

Exit status: 0 something matched, 1 nothing matched, 2 the log could not be read, 64 bad command line.
)";

struct Filter {
  std::string child, tool, decision, event, parent, preset;

  bool matches(const json& l) const {
    auto str = [&](const char* k) { return l.contains(k) && l[k].is_string() ? l[k].get<std::string>() : std::string(); };
    if (!child.empty() && str("child").rfind(child, 0) != 0) return false;
    if (!event.empty() && str("event") != event) return false;
    if (!parent.empty() && str("parent") != parent) return false;
    if (!preset.empty() && str("preset") != preset) return false;
    if (!tool.empty() && str("tool") != tool) return false;
    if (!decision.empty()) {
      if (str("event") != "tool_decision" || str("decision") != decision) return false;
    }
    return true;
  }
};

std::string compact(const json& v, std::size_t max = 160) {
  std::string s = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > max) s = protocol::cap_utf8(s, max).text + "…";
  return s;
}

std::string describe(const json& l) {
  auto str = [&](const char* k) { return l.contains(k) && l[k].is_string() ? l[k].get<std::string>() : std::string(); };
  const std::string kind = str("event");
  std::string d;
  if (kind == "spawn") {
    if (!str("description").empty()) d = "\"" + compact(l["description"], 80) + "\" ";
    d += "parent " + (str("parent").empty() ? std::string("-") : str("parent"));
    if (l.contains("workspace")) d += " workspace " + str("workspace");
    if (l.contains("model")) d += " model " + str("model");
  } else if (kind == "tool_decision") {
    d = str("tool") + " " + str("decision");
    if (l.contains("args")) d += " " + compact(l["args"]);
    if (!str("reason").empty()) d += " (" + compact(l["reason"], 120) + ")";
  } else if (kind == "approval") {
    d = str("tool") + (l.value("allow", false) ? " approved" : " refused");
    if (!str("reason").empty()) d += " (" + compact(l["reason"], 120) + ")";
  } else if (kind == "budget") {
    d = str("budget") + " " + str("status") + ": " + str("reason");
  } else if (kind == "envelope") {
    d = str("status");
    if (l.contains("steps")) d += ", " + compact(l["steps"]) + " steps";
    if (l.contains("tool_calls")) d += ", " + compact(l["tool_calls"]) + " tool calls";
    if (!str("reason").empty()) d += ": " + compact(l["reason"], 120);
    d += l.contains("transcript") && l["transcript"].is_string() ? ", transcript " + str("transcript") : ", no transcript";
  } else {
    d = compact(l.value("reason", json("")), 160);
  }
  return d;
}

}  // namespace

int cmd_audit(Args args) {
  Filter f;
  std::string file;
  bool as_json = false, children = false;
  try {
    while (auto a = args.next()) {
      const std::string& flag = *a;
      if (flag == "-h" || flag == "--help") {
        std::fputs(kAuditHelp, stdout);
        return 0;
      } else if (flag == "--file") file = args.value(flag);
      else if (flag == "--child") f.child = args.value(flag);
      else if (flag == "--tool") f.tool = args.value(flag);
      else if (flag == "--decision") f.decision = args.value(flag);
      else if (flag == "--event") f.event = args.value(flag);
      else if (flag == "--parent") f.parent = args.value(flag);
      else if (flag == "--preset") f.preset = args.value(flag);
      else if (flag == "--json") as_json = true;
      else if (flag == "--children") children = true;
      else throw UsageError("unknown option '" + flag + "' (see audit --help)");
    }
    if (as_json && children) throw UsageError("--json and --children do not go together");
    if (!f.decision.empty() && f.decision != "allow" && f.decision != "deny" && f.decision != "ask")
      throw UsageError("--decision takes allow, deny or ask, not '" + f.decision + "'");
    if (!f.event.empty() && !AuditLog::audited(f.event))
      throw UsageError("--event: '" + f.event + "' is not an audited event (see audit --help)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "subagent-supervisor audit: %s\n", e.what());
    return kUsageError;
  }

  const std::string path = file.empty() ? default_audit_file().string() : file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "subagent-supervisor audit: cannot read the audit log %s (is that the right --file?)\n",
                 path.c_str());
    return 2;
  }

  struct ChildSummary {
    std::string preset, parent, first_time;
    std::size_t events = 0;
  };
  std::map<std::string, ChildSummary> seen;
  std::vector<std::string> order;
  std::size_t matched = 0, unreadable = 0, lineno = 0;
  std::string raw;
  while (std::getline(in, raw)) {
    ++lineno;
    if (raw.empty()) continue;
    json l = json::parse(raw, nullptr, false);
    if (l.is_discarded() || !l.is_object()) {
      ++unreadable;
      continue;
    }
    if (!f.matches(l)) continue;
    ++matched;
    if (as_json) {
      std::fwrite(raw.data(), 1, raw.size(), stdout);
      std::fputc('\n', stdout);
    } else if (children) {
      const std::string id = l.value("child", "");
      auto [it, fresh] = seen.try_emplace(id);
      if (fresh) {
        order.push_back(id);
        it->second.first_time = l.value("time", "");
      }
      if (it->second.preset.empty()) it->second.preset = l.value("preset", "");
      if (it->second.parent.empty()) it->second.parent = l.value("parent", "");
      ++it->second.events;
    } else {
      std::printf("%s  %s  %-10s %-13s %s\n", l.value("time", "").c_str(), l.value("child", "").c_str(),
                  l.value("preset", "").c_str(), l.value("event", "").c_str(), describe(l).c_str());
    }
  }
  if (in.bad()) {
    std::fprintf(stderr, "subagent-supervisor audit: read error in %s after line %zu\n", path.c_str(), lineno);
    return 2;
  }
  if (children)
    for (const auto& id : order) {
      const auto& c = seen[id];
      std::printf("%s  preset %s  parent %s  first %s  %zu matching event%s\n", id.c_str(), c.preset.c_str(),
                  c.parent.empty() ? "-" : c.parent.c_str(), c.first_time.c_str(), c.events, c.events == 1 ? "" : "s");
    }
  if (unreadable)
    std::fprintf(stderr, "subagent-supervisor audit: skipped %zu line%s of %s that were not JSON objects\n", unreadable,
                 unreadable == 1 ? "" : "s", path.c_str());
  std::fflush(stdout);
  return matched ? 0 : 1;
}

}  // namespace supervisor::cli
