// `subagent-supervisor audit`: reads an audit log and answers "what did child X do" and "which children
// used tool Y". Streams the file; never loads it whole.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "protocol/envelope.hpp"
#include "records/terminal.hpp"
#include "records/audit.hpp"
#include "cli/cli.hpp"
#include "records/transcript.hpp"
#include "workspace/lock.hpp"

namespace supervisor::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kAuditHelp = R"(usage: subagent-supervisor audit [filters] [--children | --json] [--file FILE]
       subagent-supervisor audit --conversation ID [--json] [--transcript-dir DIR]

Reads the audit log (one JSON line per spawn, tool decision, approval, denial, budget event, kill
and envelope) and prints the lines that match every filter given.

Filters:
  --child ID         events of one child (a unique prefix of the id is enough)
  --tool NAME        tool decisions and approvals for one tool, e.g. run_command
  --decision D       tool decisions that were allow, deny or ask
  --event KIND       spawn | tool_decision | approval | denial | budget | kill | cancel | failure | envelope | abandoned
  --parent NAME      children a given parent asked for
  --preset NAME      children of one preset

Output:
  (default)          one readable line per event
  --children         only the children that matched, one per line: id, preset, parent, matching events
  --json             the matching lines unchanged (JSON lines, for jq)

  --file FILE        the audit log (default: $XDG_STATE_HOME/subagent-supervisor/transcripts/audit.jsonl)
  -h, --help         this text

One child's conversation, from its transcript (a unique prefix of the id is enough):
  --conversation ID  every message the model was sent, each once and in order, the model's
                     answers and tool calls, the tool decisions and results, and the envelope
  --json             instead: the messages as one JSON array (the history the model saw on the
                     last turn, then its last answer), ready to send to a model again
  --transcript-dir DIR  where the transcripts are (default: the audit log's directory)

Examples:
  subagent-supervisor audit --child 3f2a            # what did child 3f2a... do
  subagent-supervisor audit --tool run_command --decision allow --children
                                                    # which children ran commands

Exit status: 0 something matched; 1 nothing matched, or there is no audit log yet (stderr says
which); 64 bad command line, an ambiguous --child prefix included (the matches are listed).
)";

struct Filter {
  std::string child, tool, decision, event, parent, preset;

  bool matches(const json& l) const {
    auto str = [&](const char* k) {
      return l.contains(k) && l[k].is_string() ? l[k].get<std::string>() : std::string();
    };
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
  } else if (kind == "denial") {
    d = str("tool") + " denied by " + compact(l.value("rule", json("")), 120);
    if (!str("reason").empty()) d += " (" + compact(l["reason"], 120) + ")";
  } else if (kind == "budget") {
    d = str("budget") + " " + str("status") + ": " + str("reason");
  } else if (kind == "envelope") {
    d = str("status");
    if (l.contains("steps")) d += ", " + compact(l["steps"]) + " steps";
    if (l.contains("tool_calls")) d += ", " + compact(l["tool_calls"]) + " tool calls";
    if (!str("reason").empty()) d += ": " + compact(l["reason"], 120);
    d += l.contains("transcript") && l["transcript"].is_string() ? ", transcript " + str("transcript")
                                                                 : ", no transcript";
  } else {
    d = compact(l.value("reason", json("")), 160);
  }
  return d;
}

std::string one_line(const json& v, std::size_t max = 300) {
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.size() > max) s = protocol::cap_utf8(s, max).text + "…";
  return s;
}

// The transcript of the one child whose id starts with `prefix`, or an error naming what is wrong.
std::string find_transcript(const fs::path& dir, const std::string& prefix, fs::path& out) {
  if (prefix.empty() || prefix.find_first_not_of("0123456789abcdefABCDEF-_") != std::string::npos)
    return "'" + prefix + "' is not a child id";
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("subagent-" + prefix, 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
      found.push_back(it->path());
  }
  if (ec) return "cannot read the transcript directory " + dir.string() + ": " + ec.message();
  if (found.empty()) return "no transcript for a child '" + prefix + "' in " + dir.string();
  if (found.size() > 1)
    return "'" + prefix + "' matches " + std::to_string(found.size()) + " transcripts; give more of the id";
  out = found.front();
  return "";
}

void print_message(const json& m) {
  const std::string role = m.value("role", "?");
  std::string head = "[" + role;
  if (role == "tool") head += " " + m.value("name", "") + " " + m.value("tool_call_id", "");
  head += "]";
  const json content = m.contains("content") ? m["content"] : json("");
  print_for_terminal(stdout, "%s %s\n", head.c_str(),
                     content.is_string() ? content.get_ref<const std::string&>().c_str() : content.dump().c_str());
  if (m.contains("tool_calls") && m["tool_calls"].is_array())
    for (const auto& c : m["tool_calls"])
      print_for_terminal(stdout, "    -> tool call %s %s %s\n", c.value("id", "").c_str(), c.value("name", "").c_str(),
                         one_line(c.value("arguments", json::object()), 2000).c_str());
}

int conversation(const std::string& id, const std::string& transcript_dir, const std::string& audit_file,
                 bool as_json) {
  fs::path dir = !transcript_dir.empty() ? fs::path(transcript_dir)
                 : !audit_file.empty()   ? fs::path(audit_file).parent_path()
                                         : default_transcript_dir();
  fs::path file;
  if (std::string err = find_transcript(dir, id, file); !err.empty()) {
    print_for_terminal(stderr, "subagent-supervisor audit: %s\n", err.c_str());
    return 1;
  }
  std::ifstream in(file, std::ios::binary);
  json doc = in ? json::parse(in, nullptr, false) : json(json::value_t::discarded);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("events") || !doc["events"].is_array()) {
    print_for_terminal(stderr, "subagent-supervisor audit: %s is not a readable transcript\n", file.string().c_str());
    return 2;
  }
  // history: what the model was sent, rebuilt from each request's new messages (see docs/transcripts.md).
  json history = json::array();
  json last_reply;
  if (!as_json)
    print_for_terminal(stdout, "child %s  preset %s  model %s  status %s\nbrief: %s\n", doc.value("id", "").c_str(),
                       doc.value("preset", "").c_str(), doc.value("model", "").c_str(), doc.value("status", "").c_str(),
                       doc.value("brief", "").c_str());
  for (const auto& e : doc["events"]) {
    const std::string kind = e.value("event", "");
    if (kind == "model_request") {
      const std::size_t from = e.value("messages_from", std::size_t{0});
      if (history.size() > from) {
        if (!as_json) print_for_terminal(stdout, "  (the child rewrote its history from message %zu)\n", from);
        history.erase(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
      }
      if (!as_json) {
        print_for_terminal(stdout, "=== model request %s, step %s, tools: %s%s\n", e.value("id", "").c_str(),
                           one_line(e.value("step", json(0))).c_str(),
                           one_line(e.value("tool_names", json::array())).c_str(),
                           e.value("wrap_up_turn", false) ? " (wrap-up turn)" : "");
      }
      for (const auto& m : e.value("new_messages", json::array())) {
        history.push_back(m);
        if (!as_json) print_message(m);
      }
      last_reply = nullptr;
    } else if (kind == "model_response") {
      json reply = {{"role", "assistant"}, {"content", e.value("content", json(""))}};
      if (e.contains("tool_calls") && e["tool_calls"].is_array() && !e["tool_calls"].empty())
        reply["tool_calls"] = e["tool_calls"];
      last_reply = reply;
      if (!as_json) {
        print_for_terminal(stdout, "=== model response %s%s\n", e.value("id", "").c_str(),
                           e.value("ok", true) ? "" : (", failed: " + one_line(e.value("error", json("")))).c_str());
        if (e.value("ok", true)) print_message(reply);
      }
    } else if (!as_json && kind == "tool_decision") {
      print_for_terminal(stdout, "--- tool %s %s %s: %s (%s)\n", e.value("id", "").c_str(), e.value("tool", "").c_str(),
                         one_line(e.value("args", json::object()), 2000).c_str(), e.value("decision", "").c_str(),
                         e.value("reason", "").c_str());
    } else if (!as_json && kind == "tool_result") {
      print_for_terminal(stdout, "--- brokered result %s (%s): %s\n", e.value("id", "").c_str(),
                         e.value("ok", false) ? "ok" : "failed", e.value("content", "").c_str());
    } else if (!as_json && kind == "tool_done") {
      print_for_terminal(stdout, "--- tool done %s %s: %s, %s bytes%s\n", e.value("id", "").c_str(),
                         e.value("tool", "").c_str(), e.value("ok", false) ? "ok" : "failed",
                         one_line(e.value("bytes", json(0))).c_str(),
                         e.value("error", "").empty() ? "" : (" (" + e.value("error", "") + ")").c_str());
    } else if (!as_json && (kind == "budget" || kind == "kill" || kind == "cancel" || kind == "failure")) {
      print_for_terminal(stdout, "--- %s: %s\n", kind.c_str(), e.value("reason", "").c_str());
    }
  }
  if (as_json) {
    if (!last_reply.is_null()) history.push_back(last_reply);
    print_for_terminal(stdout, "%s\n", history.dump(2).c_str());
  } else if (doc.contains("envelope") && doc["envelope"].is_object()) {
    const json& env = doc["envelope"];
    print_for_terminal(stdout, "=== envelope: %s (%s)\n%s\n", env.value("status", "").c_str(),
                       env.value("reason", "").c_str(), one_line(env.value("answer", json("")), 1u << 20).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int cmd_audit(Args args) {
  Filter f;
  std::string file, conversation_id, transcript_dir;
  bool as_json = false, children = false;
  try {
    while (auto a = args.next()) {
      const std::string& flag = *a;
      if (flag == "-h" || flag == "--help") {
        std::fputs(kAuditHelp, stdout);
        return 0;
      } else if (flag == "--file")
        file = args.value(flag);
      else if (flag == "--child")
        f.child = args.value(flag);
      else if (flag == "--tool")
        f.tool = args.value(flag);
      else if (flag == "--decision")
        f.decision = args.value(flag);
      else if (flag == "--event")
        f.event = args.value(flag);
      else if (flag == "--parent")
        f.parent = args.value(flag);
      else if (flag == "--preset")
        f.preset = args.value(flag);
      else if (flag == "--json")
        as_json = true;
      else if (flag == "--children")
        children = true;
      else if (flag == "--conversation")
        conversation_id = args.value(flag);
      else if (flag == "--transcript-dir")
        transcript_dir = args.value(flag);
      else
        throw UsageError("unknown option '" + flag + "' (see audit --help)");
    }
    if (as_json && children) throw UsageError("--json and --children do not go together");
    if (conversation_id.empty() && !transcript_dir.empty())
      throw UsageError("--transcript-dir goes with --conversation ID");
    if (!f.decision.empty() && f.decision != "allow" && f.decision != "deny" && f.decision != "ask")
      throw UsageError("--decision takes allow, deny or ask, not '" + f.decision + "'");
    if (!f.event.empty() && !AuditLog::audited(parse_event_kind(f.event)))
      throw UsageError("--event: '" + f.event + "' is not an audited event (see audit --help)");
  } catch (const UsageError& e) {
    print_for_terminal(stderr, "subagent-supervisor audit: %s\n", e.what());
    return kUsageError;
  }

  recover_at_start(default_workspace_config().state_dir, "audit");  // settled children get their "abandoned" lines
  if (!conversation_id.empty()) return conversation(conversation_id, transcript_dir, file, as_json);

  const std::string path = file.empty() ? default_audit_file().string() : file;
  std::error_code exists_ec;
  if (!fs::exists(path, exists_ec)) {
    if (file.empty())
      print_for_terminal(stderr,
                         "subagent-supervisor audit: no child has run yet: there is no audit log at %s (run, "
                         "serve and mcp write it; --file names another)\n",
                         path.c_str());
    else
      print_for_terminal(stderr, "subagent-supervisor audit: there is no audit log at %s\n", path.c_str());
    return 1;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    print_for_terminal(stderr, "subagent-supervisor audit: cannot read the audit log %s: %s\n", path.c_str(),
                       std::strerror(err));
    return 1;
  }
  // --child takes a unique prefix: one that names several children is refused, listing them.
  if (!f.child.empty()) {
    std::vector<std::string> ids;
    std::string line;
    while (std::getline(in, line)) {
      json l = json::parse(line, nullptr, false);
      if (!l.is_object() || !l.contains("child") || !l["child"].is_string()) continue;
      const std::string id = l["child"].get<std::string>();
      if (id.rfind(f.child, 0) == 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    if (ids.empty()) {
      print_for_terminal(stderr, "subagent-supervisor audit: no child whose id starts with '%s' in %s\n",
                         f.child.c_str(), path.c_str());
      return 1;
    }
    if (ids.size() > 1) {
      std::string list;
      for (std::size_t i = 0; i < ids.size() && i < 20; ++i) list += "\n  " + ids[i];
      if (ids.size() > 20) list += "\n  ... and " + std::to_string(ids.size() - 20) + " more";
      print_for_terminal(stderr,
                         "subagent-supervisor audit: --child '%s' matches %zu children; give more of the id:%s\n",
                         f.child.c_str(), ids.size(), list.c_str());
      return kUsageError;
    }
    in.clear();
    in.seekg(0);
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
      write_for_terminal(stdout, raw);
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
      print_for_terminal(stdout, "%s  %s  %-10s %-13s %s\n", l.value("time", "").c_str(), l.value("child", "").c_str(),
                         l.value("preset", "").c_str(), l.value("event", "").c_str(), describe(l).c_str());
    }
  }
  if (in.bad()) {
    print_for_terminal(stderr, "subagent-supervisor audit: read error in %s after line %zu\n", path.c_str(), lineno);
    return 1;
  }
  if (children)
    for (const auto& id : order) {
      const auto& c = seen[id];
      print_for_terminal(stdout, "%s  preset %s  parent %s  first %s  %zu matching event%s\n", id.c_str(),
                         c.preset.c_str(), c.parent.empty() ? "-" : c.parent.c_str(), c.first_time.c_str(), c.events,
                         c.events == 1 ? "" : "s");
    }
  if (unreadable)
    print_for_terminal(stderr, "subagent-supervisor audit: skipped %zu line%s of %s that were not JSON objects\n",
                       unreadable, unreadable == 1 ? "" : "s", path.c_str());
  std::fflush(stdout);
  if (!matched) print_for_terminal(stderr, "subagent-supervisor audit: no event in %s matches\n", path.c_str());
  return matched ? 0 : 1;
}

}  // namespace supervisor::cli
