// The MCP server (mcp_server.hpp): one McpServer object per process, every handler on the io thread.
#include "frontends/mcp_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <filesystem>
#include <map>

#include "frontends/control.hpp"
#include "frontends/mcp.hpp"
#include "frontends/operations.hpp"
#include "models/model.hpp"
#include "frontends/parent_io.hpp"
#include "frontends/parent_loop.hpp"
#include "records/terminal.hpp"

namespace supervisor {
namespace fs = std::filesystem;
namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr auto kHeartbeat = std::chrono::seconds(5);
// At most one progress notification per call in this interval: a busy child moves every few
// milliseconds, and a host needs to see that it lives, not every step.
constexpr auto kMinProgressInterval = std::chrono::milliseconds(500);

struct SyncCall {
  json request_id;
  json progress_token;  // null: the client asked for no progress
  std::uint64_t progress = 0;
  std::chrono::steady_clock::time_point last_progress{};
  bool cancelled = false;  // the client cancelled the request: no response is sent
  bool answered = false;
};

struct McpServer {
  McpServer(asio::io_context& ctx, McpConfig config) : io(ctx), opts(std::move(config)), heartbeat(ctx) {}

  asio::io_context& io;
  McpConfig opts;
  std::shared_ptr<ParentIo> parent;
  std::unique_ptr<Operations> ops;  // from initialize on
  bool elicitation = false;
  std::uint64_t next_request = 0;
  std::map<std::string, std::string> elicitations;              // our request id (dumped) -> approval id
  std::map<std::string, std::shared_ptr<SyncCall>> sync_calls;  // child id -> the tools/call waiting for it
  std::map<json, std::uint64_t> waiters;                        // agent_output request id -> wait ticket
  std::map<json, bool> applying;                                // agent_apply request id -> cancelled by the client
  asio::steady_timer heartbeat;
  bool heartbeat_running = false;
  bool ending = false;
  RequestGate gate;  // the client's messages after an agent_spawn wait until it is answered

  void send(const json& m) { parent->send(m); }
  void error(const json& id, int code, const std::string& message) { send(mcp::error_message(id, code, message)); }

  void on_message(const json& j) {
    std::visit([this](auto&& m) { handle(m); }, mcp::classify(j));
  }

  void handle(const mcp::Invalid& m) { error(m.id, m.code, m.message); }

  void handle(const mcp::Request& r) {
    try {
      if (r.method == "initialize") return initialize(r);
      if (r.method == "ping") return send(mcp::result_message(r.id, json::object()));
      if (!ops) return error(r.id, mcp::kInvalidRequest, "the server is not initialized: send initialize first");
      if (r.method == "tools/list")
        return send(mcp::result_message(r.id, {{"tools", mcp::tool_definitions(opts.presets)}}));
      if (r.method == "tools/call") return call_tool(r);
      error(r.id, mcp::kMethodNotFound, "unknown method '" + r.method + "' (this server offers tools only)");
    } catch (const std::exception& e) {
      error(r.id, mcp::kInternalError, std::string("internal error: ") + e.what());
    }
  }

  void handle(const mcp::Notification& n) {
    if (n.method == "notifications/cancelled") return cancelled(n.params);
    // notifications/initialized and anything else need no answer.
  }

  void handle(const mcp::Response& r) {
    auto it = elicitations.find(r.id.dump());
    if (it == elicitations.end()) {
      std::fprintf(stderr, "subagent-supervisor mcp: a response to unknown request %s was ignored\n",
                   r.id.dump().c_str());
      return;
    }
    const std::string approval_id = std::move(it->second);
    elicitations.erase(it);
    // An answer after the child ended (or the approval timed out) is dropped by the operations layer.
    auto reply = [&](bool allow, const std::string& why) { ops->approve(approval_id, allow, why); };
    if (!r.error.is_null()) {
      std::string why = r.error.is_object() && r.error.contains("message") && r.error["message"].is_string()
                            ? r.error["message"].get<std::string>()
                            : r.error.dump();
      return reply(false, "the client could not ask the user: " + why);
    }
    const json& res = r.result;
    std::string action =
        res.is_object() && res.contains("action") && res["action"].is_string() ? res["action"].get<std::string>() : "";
    if (action == "accept") {
      const json content = res.value("content", json::object());
      bool yes = content.is_object() && content.contains("approve") && content["approve"] == true;
      return reply(yes, yes ? "approved by the user" : "the user answered no");
    }
    if (action == "decline") return reply(false, "declined by the user");
    if (action == "cancel") return reply(false, "the user dismissed the request");
    reply(false, "the client's answer had no valid action (accept, decline, cancel)");
  }

  // --- lifecycle ---

  void initialize(const mcp::Request& r) {
    if (ops) return error(r.id, mcp::kInvalidRequest, "initialize was already received");
    const json& p = r.params;
    if (!p.is_object() || !p.contains("protocolVersion") || !p["protocolVersion"].is_string())
      return error(r.id, mcp::kInvalidParams, "protocolVersion: missing or not a string");
    if (p.contains("capabilities") && !p["capabilities"].is_object())
      return error(r.id, mcp::kInvalidParams, "capabilities: must be an object");
    const json caps = p.value("capabilities", json::object());
    // Form-mode elicitation: an empty elicitation object means form mode (older revisions).
    if (auto e = caps.find("elicitation"); e != caps.end() && e->is_object())
      elicitation = e->empty() || e->contains("form");

    HubConfig cfg = opts.base;
    if (!opts.preset_filter.empty()) cfg.scope.presets = opts.preset_filter;
    if (p.contains("clientInfo") && p["clientInfo"].is_object() && p["clientInfo"].contains("name") &&
        p["clientInfo"]["name"].is_string())
      cfg.parent = "mcp:" + p["clientInfo"]["name"].get<std::string>();
    else
      cfg.parent = "mcp";
    cfg.on_log = [](const std::string& line) {
      std::fprintf(stderr, "%s\n", escape_for_terminal(line, false).c_str());
    };
    cfg.on_progress = [this](const Progress& pr) { progress(pr.id); };
    Operations::AskParent ask;
    if (elicitation)
      ask = [this](const std::string& approval_id, const ApprovalRequest& a) { ask_user(approval_id, a); };
    ops = std::make_unique<Operations>(io, cfg, std::move(ask));

    send(mcp::result_message(
        r.id, {{"protocolVersion", mcp::negotiate_version(p["protocolVersion"])},
               {"capabilities", {{"tools", {{"listChanged", false}}}}},
               {"serverInfo",
                {{"name", "subagent-supervisor"}, {"title", "Subagent supervisor"}, {"version", SUBAGENT_VERSION}}},
               {"instructions",
                "Delegate focused work to sandboxed subagents: agent_spawn runs one child on a brief (it sees nothing "
                "else) with a preset's tools and budgets and returns one result envelope. Use background=true for "
                "long jobs and read them with agent_output (wait_seconds); agent_cancel stops one; agent_apply applies "
                "an implementation child's patch."}}));
  }

  void cancelled(const json& params) {
    if (!params.is_object() || !params.contains("requestId")) return;
    const json& rid = params["requestId"];
    const std::string reason = params.value("reason", std::string("the client cancelled the request"));
    for (const auto& [id, call] : sync_calls) {
      if (call->request_id != rid || call->cancelled) continue;
      call->cancelled = true;
      const std::string child = id;  // the entry goes away when the envelope is delivered
      ops->cancel(child, "cancelled by the client: " + reason);
      return;
    }
    if (auto it = waiters.find(rid); it != waiters.end()) {
      ops->stop_waiting(it->second);
      waiters.erase(it);
    }
    // An apply cannot be stopped halfway: it finishes, and its answer is not sent.
    if (auto it = applying.find(rid); it != applying.end()) it->second = true;
  }

  // --- approvals and progress ---

  void ask_user(const std::string& approval_id, const ApprovalRequest& a) {
    json id = "approval-" + std::to_string(++next_request);
    elicitations[id.dump()] = approval_id;
    std::string args = protocol::cap_utf8(a.args.dump(), 2000).text;
    std::string message = "Subagent " + a.child_id + " (" + a.preset + ": " + a.description + ") asks to use " +
                          a.tool + " with " + args + ". Policy: " + a.rule + ". Allow it?";
    json schema = {{"type", "object"},
                   {"properties",
                    {{"approve",
                      {{"type", "boolean"},
                       {"title", "Allow this tool call"},
                       {"description", "true runs the call inside the child's sandbox; false denies it"}}}}},
                   {"required", {"approve"}}};
    send(mcp::request_message(id, "elicitation/create", {{"message", message}, {"requestedSchema", schema}}));
  }

  void progress(const std::string& child) {
    auto it = sync_calls.find(child);
    // Never after the result: a host drops the token with the answer and warns about the stray.
    if (it == sync_calls.end() || it->second->progress_token.is_null() || it->second->cancelled || it->second->answered)
      return;
    auto info = ops->output(child);
    if (!info || info->state == ChildState::done || info->envelope) return;
    const auto now = std::chrono::steady_clock::now();
    if (it->second->progress > 0 && now - it->second->last_progress < kMinProgressInterval) return;
    it->second->last_progress = now;
    const Progress& p = info->progress;
    std::string message = info->state == ChildState::running
                              ? "step " + std::to_string(p.steps) + "/" + std::to_string(p.max_steps) + ", " +
                                    std::to_string(p.tool_calls) + " tool calls, " + std::to_string(p.tokens) +
                                    " tokens, " + std::to_string(p.elapsed_ms / 1000) + " s"
                              : to_string(info->state) + (info->waiting_for.empty() ? "" : ": " + info->waiting_for);
    send(mcp::notification_message(
        "notifications/progress",
        {{"progressToken", it->second->progress_token}, {"progress", ++it->second->progress}, {"message", message}}));
  }

  // While a sync spawn with a progress token runs, a notification at least every few seconds keeps
  // clients that reset their request timeout on progress from giving up on a long child.
  void arm_heartbeat() {
    if (heartbeat_running) return;
    heartbeat_running = true;
    heartbeat.expires_after(kHeartbeat);
    heartbeat.async_wait([this](boost::system::error_code ec) {
      heartbeat_running = false;
      if (ec) return;
      bool any = false;
      for (const auto& [child, call] : sync_calls) {
        if (call->progress_token.is_null()) continue;
        any = true;
        progress(child);
      }
      if (any) arm_heartbeat();
    });
  }

  // --- tools ---

  void call_tool(const mcp::Request& r) {
    const json& p = r.params;
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string())
      return error(r.id, mcp::kInvalidParams, "name: missing or not a string");
    const std::string name = p["name"];
    json args = p.value("arguments", json::object());
    if (args.is_null()) args = json::object();
    args = mcp::without_host_fields(std::move(args));
    json token = nullptr;
    if (auto m = p.find("_meta"); m != p.end() && m->is_object() && m->contains("progressToken")) {
      const json& t = (*m)["progressToken"];
      if (t.is_string() || t.is_number_integer()) token = t;
    }
    try {
      if (name == "agent_spawn") return spawn(r.id, args, token);
      if (name == "agent_list") {
        mcp::parse_no_arguments(args);
        json children = json::array();
        for (const auto& c : ops->list()) children.push_back(to_json(c));
        return send(mcp::result_message(r.id, mcp::tool_result({{"children", children}})));
      }
      if (name == "agent_output") return output(r.id, args);
      if (name == "agent_cancel") {
        std::string child = mcp::parse_child_id(args, {"reason"});
        std::string reason = "cancelled by the parent";
        if (args.contains("reason")) {
          if (!args["reason"].is_string()) throw BadRequest("reason: must be a string");
          reason = args["reason"];
        }
        if (!ops->cancel(child, reason))
          return send(mcp::result_message(r.id, mcp::tool_error("no child '" + child + "'")));
        return send(mcp::result_message(
            r.id, mcp::tool_result({{"child_id", child}, {"state", to_string(ops->output(child)->state)}})));
      }
      if (name == "agent_apply") {
        std::string child = mcp::parse_child_id(args, {"allow_flagged"});
        bool allow_flagged = false;
        if (args.contains("allow_flagged")) {
          if (!args["allow_flagged"].is_boolean()) throw BadRequest("allow_flagged: must be true or false");
          allow_flagged = args["allow_flagged"];
        }
        // The git steps run off the loop; other calls are answered meanwhile, this one by its id.
        applying[r.id] = false;
        return ops->apply(child, allow_flagged, [this, id = r.id, child](const ApplyResult& a) {
          auto it = applying.find(id);
          const bool cancelled = it != applying.end() && it->second;
          if (it != applying.end()) applying.erase(it);
          if (cancelled) return;
          json res = mcp::tool_result({{"child_id", child}, {"ok", a.ok}, {"message", a.message}, {"files", a.files}});
          res["isError"] = !a.ok;
          send(mcp::result_message(id, res));
        });
      }
      error(r.id, mcp::kInvalidParams, "unknown tool '" + name + "'");
    } catch (...) {
      tool_exception(r.id, name, std::current_exception());
    }
  }

  void tool_exception(const json& id, const std::string& name, std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const BadRequest& e) {
      send(mcp::result_message(id, mcp::tool_error(name + ": " + e.what())));
    } catch (const ScopeError& e) {
      send(mcp::result_message(id, mcp::tool_error(name + ": refused: " + e.what())));
    } catch (const WideningError& e) {
      send(mcp::result_message(id, mcp::tool_error(name + ": refused: " + e.what())));
    } catch (const std::exception& e) {
      send(mcp::result_message(id, mcp::tool_error(name + ": could not start the child: " + e.what())));
    }
  }

  // On a worker (it reads the file system): the workspace a spawn asked for, canonical and under one
  // of the allowed roots.
  static fs::path checked_workspace(const fs::path& asked, const fs::path& default_workspace,
                                    const std::vector<fs::path>& roots) {
    fs::path ws = asked.empty() ? default_workspace : asked.is_relative() ? default_workspace / asked : asked;
    std::error_code ec;
    fs::path canon = fs::canonical(ws, ec);
    if (ec || !fs::is_directory(canon))
      throw BadRequest("workspace: '" + ws.string() + "' is not an existing directory");
    for (const auto& root : roots) {
      auto rel = canon.lexically_relative(root);
      if (!rel.empty() && *rel.begin() != "..") return canon;
    }
    std::string allowed;
    for (const auto& root : roots) allowed += (allowed.empty() ? "" : ", ") + root.string();
    throw BadRequest("workspace: '" + canon.string() + "' is outside the allowed roots (" + allowed +
                     "; the server's --workspace and --allow-workspace set them)");
  }

  void spawn(const json& request_id, const json& args, const json& token) {
    mcp::SpawnArguments a = mcp::parse_spawn_arguments(args);
    // MCP has no notion of the parent's turns: a burst of spawns ends when nothing is left running.
    if (ops->idle()) ops->new_turn();
    const bool background = a.background;
    auto call = std::make_shared<SyncCall>(SyncCall{request_id, token});
    ops->spawn(
        a.request,
        [this, call, background](const Operations::SpawnAnswer& answer) {
          if (answer.error) {
            tool_exception(call->request_id, "agent_spawn", answer.error);
          } else if (background) {
            send(
                mcp::result_message(call->request_id, mcp::tool_result({{"child_id", answer.spawned->child_id},
                                                                        {"state", to_string(answer.spawned->state)}})));
          } else if (!call->answered) {
            // The envelope can arrive before the answer (a child refused before it started).
            sync_calls[answer.spawned->child_id] = call;
            if (!call->progress_token.is_null()) {
              progress(answer.spawned->child_id);
              arm_heartbeat();
            }
          }
          gate.release();
        },
        [this, call, background](const protocol::Envelope& e) {
          if (background) return;
          call->answered = true;
          if (!call->cancelled) send(mcp::result_message(call->request_id, mcp::envelope_result(e)));
          sync_calls.erase(e.id);
        },
        [default_workspace = opts.default_workspace, roots = opts.roots](SpawnRequest& r) {
          r.workspace = checked_workspace(r.workspace, default_workspace, roots);
        });
    // The checks read files, so they run off the loop; the client's next messages wait for their
    // answer (which never comes within the call above).
    gate.hold();
  }

  static json output_value(const ChildInfo& info) {
    json out = {{"child_id", info.id}, {"state", to_string(info.state)}, {"budget_use", to_json(info.progress)}};
    out["envelope"] = info.envelope ? protocol::to_json(*info.envelope) : json(nullptr);
    return out;
  }

  void output(const json& request_id, const json& args) {
    std::string child = mcp::parse_child_id(args, {"wait_seconds"});
    std::uint64_t wait = mcp::parse_wait_seconds(args);
    std::uint64_t ticket = ops->wait(child, std::chrono::seconds(wait), [this, request_id](const ChildInfo& info) {
      waiters.erase(request_id);
      send(mcp::result_message(request_id, mcp::tool_result(output_value(info))));
    });
    if (ticket == 0) return send(mcp::result_message(request_id, mcp::tool_error("no child '" + child + "'")));
    if (ops->waiting(ticket)) waiters[request_id] = ticket;
  }

  void end(const std::string& why) {
    if (ending) return;
    ending = true;
    heartbeat.cancel();
    elicitations.clear();
    end_front_end(io, ops.get(), parent, why);
  }
};

}  // namespace

void serve_mcp(McpConfig config) {
  asio::io_context io;
  const std::size_t max_line = config.max_line;
  McpServer s(io, std::move(config));
  run_parent_loop(
      io, s.parent, max_line,
      {[&](const json& m) { s.on_message(m); }, [&](const std::string& e) { s.error(nullptr, mcp::kParseError, e); },
       [&](const std::string& why) { s.end(why); }, "the client closed its input", nullptr, &s.gate});
}

}  // namespace supervisor
