#include "child/agent.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <optional>
#include <string_view>

#include "child/tools.hpp"
#include "protocol/framing.hpp"
#include "protocol/messages.hpp"

namespace child {
namespace {

using nlohmann::json;
namespace proto = protocol;

class ProtocolFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
struct Cancelled {};

// Blocking JSON-lines channel to the supervisor.
class Channel {
 public:
  Channel(int in, int out) : in_(in), out_(out) {}

  void send(const proto::ChildMessage& m) {
    std::string line = proto::encode_line(m);
    std::string_view rest = line;
    while (!rest.empty()) {
      ssize_t n = ::write(out_, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw ProtocolFailure("cannot write to the supervisor (pipe closed)");
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  proto::SupervisorMessage receive() {
    while (pending_.empty()) {
      if (eof_) throw ProtocolFailure("the supervisor closed the pipe");
      char buf[65536];
      ssize_t n = ::read(in_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      std::vector<proto::Frame> frames;
      if (n <= 0) {
        eof_ = true;
        reader_.finish(frames);
      } else {
        reader_.feed(std::string_view(buf, static_cast<std::size_t>(n)), frames);
      }
      for (auto& f : frames) {
        if (f.error != proto::FrameError::none)
          throw ProtocolFailure(std::string("bad frame from the supervisor: ") + proto::to_string(f.error));
        auto d = proto::decode_supervisor_message(f.line);
        if (!d) throw ProtocolFailure("bad message from the supervisor: " + d.error);
        pending_.push_back(std::move(*d.message));
      }
    }
    auto m = std::move(pending_.front());
    pending_.pop_front();
    return m;
  }

 private:
  int in_, out_;
  proto::LineReader reader_{proto::kDefaultMaxLine * 64};  // the supervisor is trusted; allow big tasks
  std::deque<proto::SupervisorMessage> pending_;
  bool eof_ = false;
};

bool icontains(std::string_view hay, std::string_view needle) {
  auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  if (needle.size() > hay.size()) return false;
  for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    std::size_t j = 0;
    while (j < needle.size() && lower(hay[i + j]) == lower(needle[j])) ++j;
    if (j == needle.size()) return true;
  }
  return false;
}

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> bullet_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string line = trim(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (line.rfind("- ", 0) == 0 || line.rfind("* ", 0) == 0) line = trim(line.substr(2));
    if (!line.empty() && line != "none" && line != "None" && line != "(none)") out.push_back(line);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return out;
}

class Agent {
 public:
  Agent(int in, int out, TrimOptions trim) : ch_(in, out), trimmer_(trim) {}

  int run() {
    try {
      ch_.send(proto::Hello{{proto::kVersion}, std::string("subagent-child/") + SUBAGENT_VERSION});
      auto first = ch_.receive();
      if (auto* e = std::get_if<proto::Error>(&first)) {
        std::fprintf(stderr, "subagent-child: supervisor refused the session: %s: %s\n", e->code.c_str(),
                     e->message.c_str());
        return 3;
      }
      auto* w = std::get_if<proto::Welcome>(&first);
      if (!w) throw ProtocolFailure(std::string("expected welcome, got ") + proto::type_name(first));
      task_ = w->task;
      ctx_.workspace = task_.workspace;
      ctx_.result_cap = task_.limits.tool_result_bytes ? task_.limits.tool_result_bytes : 16000;
      loop();
      return 0;
    } catch (const Cancelled&) {
      return 4;
    } catch (const ProtocolFailure& e) {
      std::fprintf(stderr, "subagent-child: protocol error: %s\n", e.what());
      return 3;
    }
  }

 private:
  void loop() {
    std::vector<std::string> names;
    for (const auto& spec : task_.tools) names.push_back(spec.value("name", ""));
    json messages = json::array();
    messages.push_back({{"role", "system"},
                        {"content", system_prompt(task_.preset, task_.workspace, names, trimmer_.options().enabled)}});
    std::string user = task_.brief;
    if (!task_.description.empty()) user = "Task: " + task_.description + "\n\n" + user;
    messages.push_back({{"role", "user"}, {"content", user}});

    std::string last_text;
    for (;;) {
      if (wrap_up_ && !wrap_up_prompted_) {
        messages.push_back({{"role", "user"},
                            {"content", "The supervisor asked you to wrap up (" + wrap_up_why_ +
                                            "). Do not call tools. Give your final answer now, in the "
                                            "required shape, with what you have."}});
        wrap_up_prompted_ = true;
      }
      if (std::size_t n = trimmer_.trim(messages))
        ch_.send(proto::Log{"info", "context trimmed: " + std::to_string(n) +
                                        " old tool results replaced by stubs (tool turns before " +
                                        std::to_string(trimmer_.boundary()) + ")"});
      proto::ModelRequest req;
      req.id = "m" + std::to_string(++model_turns_);
      req.messages = messages;
      req.tools = wrap_up_ ? json::array() : task_.tools;
      ch_.send(req);
      auto reply = await(req.id);
      if (auto* err = std::get_if<proto::ModelError>(&reply)) {
        if (err->code == "wrap_up" || err->code == "budget_exhausted") {
          if (!wrap_up_) {
            wrap_up_ = true;
            wrap_up_why_ = err->message;
            continue;
          }
        }
        finish(last_text.empty() ? "The model call failed: " + err->code + ": " + err->message : last_text,
               "model call failed: " + err->message);
        return;
      }
      auto& resp = std::get<proto::ModelResponse>(reply);
      if (!resp.content.empty()) last_text = resp.content;
      json assistant{{"role", "assistant"}, {"content", resp.content}};
      if (!resp.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& c : resp.tool_calls)
          calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
        assistant["tool_calls"] = std::move(calls);
      }
      messages.push_back(std::move(assistant));
      const bool cut = resp.finish_reason == "length" || resp.finish_reason == "budget";
      if (cut && wrap_up_ && !wrap_up_prompted_) continue;  // a fragment: ask for the wrap-up turn instead
      if (resp.tool_calls.empty() || (wrap_up_ && wrap_up_prompted_)) {
        finish(resp.content, {});
        return;
      }
      for (const auto& call : resp.tool_calls) {
        std::string result = wrap_up_ ? "Not run: the supervisor asked you to wrap up." : call_tool(call);
        messages.push_back({{"role", "tool"}, {"tool_call_id", call.id}, {"name", call.name}, {"content", result}});
      }
    }
  }

  // Asks permission for one tool call and runs it when allowed; returns what the model sees.
  std::string call_tool(const proto::ToolCall& call) {
    proto::ToolRequest req{"t" + std::to_string(++tool_requests_), call.name, call.arguments};
    ch_.send(req);
    auto reply = await(req.id);
    if (auto* r = std::get_if<proto::ToolResult>(&reply)) return r->ok ? r->content : "Tool error: " + r->content;
    auto& d = std::get<proto::ToolDecision>(reply);
    if (!d.allow) return "Tool call denied by the supervisor: " + d.reason;
    ToolOutput out = run_tool(call.name, call.arguments, ctx_);
    for (const auto& f : out.files_changed) add_unique(files_changed_, f);
    if (!out.command.empty()) commands_.push_back(out.command + " → exit " + std::to_string(out.exit_code));
    ch_.send(proto::ToolDone{req.id, out.ok, out.content.size(), out.ok ? "" : out.content.substr(0, 200)});
    return out.ok ? out.content : "Tool error: " + out.content;
  }

  // Waits for the answer to request `id`, handling wrap_up / cancel / error that arrive meanwhile.
  proto::SupervisorMessage await(const std::string& id) {
    for (;;) {
      auto m = ch_.receive();
      if (auto* w = std::get_if<proto::WrapUp>(&m)) {
        wrap_up_ = true;
        wrap_up_why_ = w->budget.empty() ? w->reason : w->reason + ": " + w->budget;
        continue;
      }
      if (std::holds_alternative<proto::Cancel>(m)) throw Cancelled{};
      if (auto* e = std::get_if<proto::Error>(&m))
        throw ProtocolFailure("supervisor reported " + e->code + ": " + e->message);
      std::string got = std::visit(
          [](const auto& x) -> std::string {
            if constexpr (requires { x.id; }) return x.id;
            return {};
          },
          m);
      if (got != id) throw ProtocolFailure("answer for unknown request '" + got + "' (waiting for '" + id + "')");
      if (id[0] == 'm' && !std::holds_alternative<proto::ModelResponse>(m) &&
          !std::holds_alternative<proto::ModelError>(m))
        throw ProtocolFailure(std::string("expected a model response, got ") + proto::type_name(m));
      if (id[0] == 't' && !std::holds_alternative<proto::ToolDecision>(m) &&
          !std::holds_alternative<proto::ToolResult>(m))
        throw ProtocolFailure(std::string("expected a tool decision, got ") + proto::type_name(m));
      return m;
    }
  }

  void finish(const std::string& model_text, const std::string& failure) {
    Report r = parse_report(model_text);
    for (const auto& f : files_changed_) add_unique(r.files_changed, f);
    for (const auto& c : commands_) add_unique(r.commands, c);
    if (!failure.empty() && r.risks.empty()) r.risks = failure;
    proto::Final fin;
    fin.summary = r.summary;
    fin.answer = render_report(r);
    fin.report = to_json(r);
    ch_.send(fin);
  }

  static void add_unique(std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return;
    v.push_back(s);
  }

  Channel ch_;
  Trimmer trimmer_;
  proto::Task task_;
  ToolContext ctx_;
  int model_turns_ = 0;
  int tool_requests_ = 0;
  bool wrap_up_ = false;
  bool wrap_up_prompted_ = false;
  std::string wrap_up_why_;
  std::vector<std::string> files_changed_;
  std::vector<std::string> commands_;
};

}  // namespace

std::string system_prompt(const std::string& preset, const std::string& workspace,
                          const std::vector<std::string>& tools, bool trims) {
  std::string list;
  for (const auto& t : tools) list += (list.empty() ? "" : ", ") + t;
  return "You are a focused sub-agent (preset: " + preset + ") working in the workspace " + workspace +
         ". You run in a sandbox: you can use only these tools: " + (list.empty() ? "none" : list) +
         ". Paths are relative to the workspace. Work on the task you are given and nothing else; be "
         "economical with tool calls. " +
         std::string(trims ? "Once seen, a tool result may later be replaced by a short stub: note in your "
                             "replies what you need from it, or repeat the call. "
                           : "") +
         "When you are done, reply without tool calls, using exactly these sections:\n"
         "## Summary\n(two or three sentences)\n"
         "## What I did or found\n"
         "## Evidence\n(one bullet per reference, as path:line — what it shows)\n"
         "## Files changed\n"
         "## Commands and tests run\n(with their results)\n"
         "## Remaining risks\n";
}

Report parse_report(const std::string& text) {
  Report r;
  std::string* current = nullptr;
  std::string evidence, files, commands, preamble;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    std::string t = trim(line);
    if (t.rfind("#", 0) == 0) {
      std::string h = t.substr(t.find_first_not_of('#'));
      if (icontains(h, "summary"))
        current = &r.summary;
      else if (icontains(h, "evidence"))
        current = &evidence;
      else if (icontains(h, "files"))
        current = &files;
      else if (icontains(h, "command") || icontains(h, "tests"))
        current = &commands;
      else if (icontains(h, "risk"))
        current = &r.risks;
      else if (icontains(h, "found") || icontains(h, "did") || icontains(h, "finding"))
        current = &r.found;
      else if (current)
        *current += line + "\n";
      else
        preamble += line + "\n";
    } else if (current) {
      *current += line + "\n";
    } else {
      preamble += line + "\n";
    }
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  r.summary = trim(r.summary);
  r.found = trim(r.found);
  r.risks = trim(r.risks);
  preamble = trim(preamble);
  if (r.found.empty()) r.found = preamble;
  if (r.summary.empty()) {
    // No summary section: the first paragraph of what the model said.
    std::string src = r.found.empty() ? trim(text) : r.found;
    r.summary = src.substr(0, src.find("\n\n"));
  }
  r.evidence = bullet_lines(evidence);
  r.files_changed = bullet_lines(files);
  r.commands = bullet_lines(commands);
  return r;
}

std::string render_report(const Report& r) {
  auto list = [](const std::vector<std::string>& v) {
    if (v.empty()) return std::string("- none\n");
    std::string s;
    for (const auto& x : v) s += "- " + x + "\n";
    return s;
  };
  return "## Summary\n" + (r.summary.empty() ? std::string("(none)") : r.summary) + "\n\n" +
         "## What I did or found\n" + (r.found.empty() ? std::string("(nothing reported)") : r.found) + "\n\n" +
         "## Evidence\n" + list(r.evidence) + "\n" + "## Files changed\n" + list(r.files_changed) + "\n" +
         "## Commands and tests run\n" + list(r.commands) + "\n" + "## Remaining risks\n" +
         (r.risks.empty() ? std::string("none reported") : r.risks) + "\n";
}

nlohmann::json to_json(const Report& r) {
  return {{"summary", r.summary},   {"found", r.found}, {"evidence", r.evidence}, {"files_changed", r.files_changed},
          {"commands", r.commands}, {"risks", r.risks}};
}

int run_agent(int in_fd, int out_fd, TrimOptions trim) { return Agent(in_fd, out_fd, trim).run(); }

}  // namespace child
