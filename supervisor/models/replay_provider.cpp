// replay:FILE — a JSONL script of assistant turns, so the whole loop runs with no network.
// Each non-empty line is one turn:
//   {"content": "...", "tool_calls": [{"name": "grep", "arguments": {...}}],
//    "usage": {"input_tokens": 10, "output_tokens": 5, "reasoning_tokens": 0},
//    "finish_reason": "tool_calls", "repeat": 3 | "forever", "delay_ms": 0}
// or {"error": {"code": "provider_error", "message": "..."}}. Lines starting with // are comments.
// The format is documented for users in docs/models.md ("Replay scripts").
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fstream>
#include <sstream>

#include "models/model.hpp"
#include "models/providers.hpp"

namespace supervisor {
namespace {

using nlohmann::json;

struct Turn {
  json body;
  std::uint64_t repeat = 1;  // 0 = forever
  std::uint64_t delay_ms = 0;
};

std::vector<Turn> load_script(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ModelSpecError("replay script '" + path + "' cannot be read (does it exist?)");
  std::vector<Turn> turns;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line.compare(b, 2, "//") == 0) continue;
    const std::string where = "replay script " + path + " line " + std::to_string(lineno) + ": ";
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw ModelSpecError(where + "not a JSON object");
    Turn t;
    if (auto r = j.find("repeat"); r != j.end()) {
      if (*r == "forever")
        t.repeat = 0;
      else if (r->is_number_unsigned() && r->get<std::uint64_t>() > 0)
        t.repeat = r->get<std::uint64_t>();
      else
        throw ModelSpecError(where + "\"repeat\" must be a positive integer or \"forever\"");
    }
    if (auto d = j.find("delay_ms"); d != j.end()) {
      if (!d->is_number_unsigned()) throw ModelSpecError(where + "\"delay_ms\" must be a non-negative integer");
      t.delay_ms = d->get<std::uint64_t>();
    }
    if (j.contains("content") && !j["content"].is_string())
      throw ModelSpecError(where + "\"content\" must be a string");
    if (j.contains("tool_calls")) {
      const json& calls = j["tool_calls"];
      if (!calls.is_array()) throw ModelSpecError(where + "\"tool_calls\" must be an array");
      for (const auto& c : calls) {
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string())
          throw ModelSpecError(where + "each tool call needs a string \"name\"");
        if (c.contains("arguments") && !c["arguments"].is_object())
          throw ModelSpecError(where + "tool call \"arguments\" must be an object");
      }
    }
    if (j.contains("error") && !j["error"].is_object()) throw ModelSpecError(where + "\"error\" must be an object");
    t.body = std::move(j);
    turns.push_back(std::move(t));
  }
  if (turns.empty()) throw ModelSpecError("replay script '" + path + "' has no turns");
  return turns;
}

class ReplayProvider final : public ModelProvider {
 public:
  ReplayProvider(boost::asio::io_context& io, std::string path)
      : io_(io), path_(std::move(path)), turns_(load_script(path_)), timer_(io) {}
  ReplayProvider(boost::asio::io_context& io, std::string path, std::vector<Turn> turns)
      : io_(io), path_(std::move(path)), turns_(std::move(turns)), timer_(io) {}

  std::string describe() const override { return "replay:" + path_; }

  void start(ModelCall call, std::function<void(ModelReply)> done) override {
    ModelReply reply = next(call);
    const std::uint64_t delay = current_delay_;
    auto gen = ++generation_;
    if (delay == 0) {
      boost::asio::post(io_, [this, gen, reply = std::move(reply), done = std::move(done)]() mutable {
        if (gen == generation_) done(std::move(reply));
      });
      return;
    }
    timer_.expires_after(std::chrono::milliseconds(delay));
    timer_.async_wait(
        [this, gen, reply = std::move(reply), done = std::move(done)](boost::system::error_code ec) mutable {
          if (!ec && gen == generation_) done(std::move(reply));
        });
  }

  void cancel() override {
    ++generation_;
    timer_.cancel();
  }

 private:
  ModelReply next(const ModelCall& call) {
    ModelReply r;
    current_delay_ = 0;
    if (index_ >= turns_.size()) {
      r.error_code = "provider_error";
      r.error_message = "replay script " + path_ + " has no more turns (it has " + std::to_string(turns_.size()) + ")";
      return r;
    }
    const Turn& t = turns_[index_];
    current_delay_ = t.delay_ms;
    if (t.repeat != 0 && ++served_ >= t.repeat) {
      ++index_;
      served_ = 0;
    }
    const json& b = t.body;
    if (auto e = b.find("error"); e != b.end()) {
      r.error_code = e->value("code", "provider_error");
      r.error_message = e->value("message", "scripted error");
      return r;
    }
    r.ok = true;
    r.content = b.value("content", "");
    int n = 0;
    for (const auto& c : b.value("tool_calls", json::array())) {
      protocol::ToolCall tc;
      tc.id = c.value("id", "call_" + std::to_string(++calls_) + "_" + std::to_string(++n));
      tc.name = c["name"].get<std::string>();
      tc.arguments = c.value("arguments", json::object());
      r.tool_calls.push_back(std::move(tc));
    }
    r.finish_reason = b.value("finish_reason", r.tool_calls.empty() ? "stop" : "tool_calls");
    if (auto u = b.find("usage"); u != b.end() && u->is_object()) {
      r.usage.input_tokens = u->value("input_tokens", 0ull);
      r.usage.output_tokens = u->value("output_tokens", 0ull);
      r.usage.reasoning_tokens = u->value("reasoning_tokens", 0ull);
    } else {
      r.usage_estimated = true;
      r.usage.input_tokens = estimate_tokens(call.messages.dump().size() + call.tools.dump().size());
      std::size_t out = r.content.size();
      for (const auto& c : r.tool_calls) out += c.name.size() + c.arguments.dump().size();
      r.usage.output_tokens = estimate_tokens(out);
    }
    if (call.max_tokens && r.usage.output_tokens > call.max_tokens) {
      // A real server stops at max_tokens; so does the replay, to keep budgets honest in tests.
      r.usage.output_tokens = call.max_tokens;
      r.finish_reason = "length";
    }
    return r;
  }

  boost::asio::io_context& io_;
  std::string path_;
  std::vector<Turn> turns_;
  std::size_t index_ = 0;
  std::uint64_t served_ = 0;
  std::uint64_t calls_ = 0;
  std::uint64_t current_delay_ = 0;
  std::uint64_t generation_ = 0;
  boost::asio::steady_timer timer_;
};

}  // namespace

std::unique_ptr<ModelProvider> make_replay_provider(boost::asio::io_context& io, const std::string& path) {
  return std::make_unique<ReplayProvider>(io, path);
}

void validate_replay_script(const std::string& path) { load_script(path); }

std::function<std::unique_ptr<ModelProvider>(boost::asio::io_context&)> load_replay_provider(const std::string& path) {
  auto turns = std::make_shared<const std::vector<Turn>>(load_script(path));
  return [path, turns](boost::asio::io_context& io) -> std::unique_ptr<ModelProvider> {
    return std::make_unique<ReplayProvider>(io, path, *turns);
  };
}

}  // namespace supervisor
