// The control-protocol server (serve_server.hpp): one Server object per process, on the io thread.
#include "frontends/serve_server.hpp"

#include <boost/asio/io_context.hpp>
#include "frontends/control.hpp"
#include "frontends/operations.hpp"
#include "frontends/parent_io.hpp"
#include "frontends/parent_loop.hpp"

namespace supervisor {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Server {
  Server(boost::asio::io_context& ctx, ServeConfig config)
      : io(ctx),
        base(std::move(config.base)),
        default_workspace(std::move(config.default_workspace)),
        drain_on_eof(config.drain_on_eof) {}
  boost::asio::io_context& io;
  HubConfig base;
  fs::path default_workspace;
  std::shared_ptr<ParentIo> parent;
  std::unique_ptr<Operations> ops;  // from hello on
  RequestGate gate;                 // the parent's requests after a spawn wait until it is answered
  bool ending = false;
  bool drain_on_eof;
  bool draining = false;

  void reply_error(const json& id, const std::string& code, const std::string& message) {
    parent->send({{"type", "error"}, {"id", id}, {"code", code}, {"message", message}});
  }

  void on_message(const json& m) {
    json id = m.is_object() && m.contains("id") ? m["id"] : json(nullptr);
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
      reply_error(id, "bad_request", "a request must be a JSON object with a string \"type\"");
      return;
    }
    const std::string type = m["type"];
    try {
      if (type == "hello") return hello(m, id);
      if (!ops) return reply_error(id, "bad_request", "send hello first (it declares your scope)");
      if (type == "spawn") return spawn(m, id);
      if (type == "list") {
        json children = json::array();
        for (const auto& c : ops->list()) children.push_back(to_json(c));
        return parent->send({{"type", "list"}, {"id", id}, {"children", children}});
      }
      if (type == "output") return output(m, id);
      if (type == "cancel") {
        std::string child = child_id(m);
        if (!ops->cancel(child, m.value("reason", std::string("cancelled by the parent"))))
          return reply_error(id, "unknown_child", "no child '" + child + "'");
        return parent->send({{"type", "cancelling"}, {"id", id}, {"child_id", child}});
      }
      if (type == "approval") return approval(m, id);
      if (type == "turn") {
        ops->new_turn();
        return parent->send({{"type", "turn"}, {"id", id}});
      }
      if (type == "apply") return apply(m, id);
      reply_error(id, "bad_request", "unknown request type '" + type + "'");
    } catch (...) {
      reply_exception(id, std::current_exception());
    }
  }

  void reply_exception(const json& id, std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const BadRequest& e) {
      reply_error(id, "bad_request", e.what());
    } catch (const ScopeError& e) {
      reply_error(id, "scope", e.what());
    } catch (const WideningError& e) {
      reply_error(id, "scope", e.what());
    } catch (const std::exception& e) {
      reply_error(id, "spawn_failed", e.what());
    }
  }

  static std::string child_id(const json& m) {
    auto it = m.find("child_id");
    if (it == m.end() || !it->is_string()) throw BadRequest("child_id: missing or not a string");
    return *it;
  }

  void hello(const json& m, const json& id) {
    if (ops) return reply_error(id, "bad_request", "hello was already sent");
    if (m.contains("protocol") && m["protocol"] != 1)
      return reply_error(id, "unsupported_version", "this supervisor speaks control protocol 1");
    HubConfig cfg = base;
    cfg.scope = parse_scope(m.value("scope", json(nullptr)));
    cfg.parent = m.value("parent", std::string("parent"));
    const bool approvals = m.value("approvals", false);
    cfg.on_log = [this](const std::string& line) {
      std::string child;
      if (line.rfind("[subagent:", 0) == 0) child = line.substr(10, line.find(']') - 10);
      parent->send({{"type", "log"}, {"child_id", child}, {"line", line}});
    };
    Operations::AskParent ask;
    if (approvals) {
      ask = [this](const std::string& approval_id, const ApprovalRequest& r) {
        parent->send({{"type", "approval_request"},
                      {"approval_id", approval_id},
                      {"child_id", r.child_id},
                      {"preset", r.preset},
                      {"description", r.description},
                      {"tool", r.tool},
                      {"args", r.args},
                      {"rule", r.rule}});
      };
    }
    ops = std::make_unique<Operations>(io, cfg, std::move(ask));
    json presets = json::array();
    for (const auto& p : ops->presets())
      presets.push_back(
          {{"name", p.name}, {"description", p.description}, {"tools", p.tools}, {"workspace_mode", p.workspace_mode}});
    parent->send({{"type", "hello"},
                  {"id", id},
                  {"protocol", 1},
                  {"version", SUBAGENT_VERSION},
                  {"capabilities",
                   {{"presets", presets},
                    {"max_concurrent", ops->config().max_concurrent},
                    {"max_per_turn", ops->config().max_per_turn},
                    {"approvals", approvals},
                    {"default_model", cfg.default_model.empty() ? json(nullptr) : json(cfg.default_model)},
                    {"requests", {"hello", "spawn", "list", "output", "cancel", "approval", "turn", "apply"}}}}});
  }

  void spawn(const json& m, const json& id) {
    SpawnRequest req = parse_spawn(m);
    if (req.workspace.empty()) req.workspace = default_workspace;
    const bool background = m.value("background", false);
    ops->spawn(
        req,
        [this, id, background](const Operations::SpawnAnswer& a) {
          if (a.error)
            reply_exception(id, a.error);
          else if (background)
            parent->send({{"type", "spawned"},
                          {"id", id},
                          {"child_id", a.spawned->child_id},
                          {"state", to_string(a.spawned->state)}});
          gate.release();
        },
        [this, id, background](const protocol::Envelope& e) {
          json env = protocol::to_json(e);
          if (background)
            parent->send({{"type", "child_done"}, {"child_id", e.id}, {"envelope", env}});
          else
            parent->send({{"type", "result"}, {"id", id}, {"child_id", e.id}, {"envelope", env}});
        });
    // The checks read files, so they run off the loop; the parent's next requests wait for their
    // answer (which never comes within the call above).
    gate.hold();
  }

  void output(const json& m, const json& id) {
    std::string child = child_id(m);
    auto info = ops->output(child);
    if (!info) return reply_error(id, "unknown_child", "no child '" + child + "'");
    json out = {{"type", "output"},
                {"id", id},
                {"child_id", child},
                {"state", to_string(info->state)},
                {"budget_use", to_json(info->progress)}};
    out["envelope"] = info->envelope ? protocol::to_json(*info->envelope) : json(nullptr);
    out["transcript"] =
        info->envelope && info->envelope->transcript ? json(*info->envelope->transcript) : json(nullptr);
    parent->send(out);
  }

  void apply(const json& m, const json& id) {
    std::string child = child_id(m);
    bool allow_flagged = false;
    if (m.contains("allow_flagged")) {
      if (!m["allow_flagged"].is_boolean()) throw BadRequest("allow_flagged: must be true or false");
      allow_flagged = m["allow_flagged"];
    }
    // The git steps run off the loop; other requests are answered meanwhile, this one by its id.
    ops->apply(child, allow_flagged, [this, id, child](const ApplyResult& r) {
      parent->send({{"type", "applied"},
                    {"id", id},
                    {"child_id", child},
                    {"ok", r.ok},
                    {"message", r.message},
                    {"files", r.files}});
    });
  }

  void approval(const json& m, const json& id) {
    auto it = m.find("approval_id");
    if (it == m.end() || !it->is_string()) throw BadRequest("approval_id: missing or not a string");
    if (!ops->asking(*it))
      return reply_error(id, "unknown_approval",
                         "no pending approval '" + it->get<std::string>() + "' (answered or timed out)");
    if (!m.contains("allow") || !m["allow"].is_boolean()) throw BadRequest("allow: must be true or false");
    const bool allow = m["allow"].get<bool>();
    ops->approve(*it, allow, m.value("reason", std::string(allow ? "approved by the parent" : "denied by the parent")));
  }

  void end(const std::string& why) {
    if (draining) {  // a signal while draining: cancel what is left, as without --drain
      draining = false;
      end_front_end(io, ops.get(), parent, why);
      return;
    }
    if (ending) return;
    ending = true;
    end_front_end(io, ops.get(), parent, why);
  }

  void end_of_input() {
    if (!drain_on_eof || !ops) return end("the parent closed its input");
    if (ending) return;
    ending = true;
    draining = true;
    auto p = parent;
    ops->drain("denied: the parent closed its input, so nobody can answer (serve --drain)",
               [this, p] { p->flush([this] { io.stop(); }); });
  }
};

}  // namespace

void serve_control(ServeConfig config) {
  boost::asio::io_context io;
  const std::size_t max_line = config.max_line;
  Server s(io, std::move(config));
  run_parent_loop(
      io, s.parent, max_line,
      {[&](const json& m) { s.on_message(m); }, [&](const std::string& e) { s.reply_error(nullptr, "bad_request", e); },
       [&](const std::string& why) { s.end(why); }, "the parent closed its input", [&] { s.end_of_input(); }, &s.gate});
}

}  // namespace supervisor
