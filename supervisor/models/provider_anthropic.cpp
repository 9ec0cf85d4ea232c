// Anthropic Messages, streamed. Wire format:
//   request  POST {base}/v1/messages  x-api-key, anthropic-version
//            {model, max_tokens, system, messages:[{role:"user"|"assistant", content:[blocks]}],
//             tools:[{name, description, input_schema}], stream:true,
//             thinking:{type:"enabled", budget_tokens}}
//            tool calls are assistant `tool_use` blocks {id, name, input}; their results are
//            `tool_result` blocks {tool_use_id, content} inside the next user turn.
//   events   message_start {message:{usage:{input_tokens, cache_*_input_tokens}}}
//            content_block_start {index, content_block:{type:text|tool_use|thinking|redacted_thinking}}
//            content_block_delta {index, delta:{type:text_delta|input_json_delta|thinking_delta|signature_delta}}
//            content_block_stop, message_delta {delta:{stop_reason}, usage:{output_tokens}}, message_stop,
//            ping, error {error:{type, message}}
//
// Caching: cache_control breakpoints on the system prompt (whose prefix holds the tools) and the
// growing history (see place_breakpoints); usage reports cache_creation_input_tokens /
// cache_read_input_tokens.
//
// Extended thinking with tool use requires the assistant turn's signed thinking blocks to be sent back
// unchanged. Neutral messages have no place for them, so the provider (one per child) keeps them, keyed
// by the turn's first tool-call id, and puts them back when that turn comes round again.
#include <deque>
#include <map>

#include "provider_stream.hpp"
#include "models/providers.hpp"

namespace supervisor {

using nlohmann::json;

namespace wire {

std::string anthropic_tool_id(const std::string& id) {
  std::string out;
  for (unsigned char c : id) out.push_back(std::isalnum(c) || c == '_' || c == '-' ? static_cast<char>(c) : '_');
  return out.empty() ? "toolu_unnamed" : out;
}

json anthropic_request(const json& neutral, const json& specs, std::string& system,
                       const std::function<json(const std::string& first_tool_id)>& thinking_for) {
  json out = json::array();
  auto push = [&](const std::string& role, json block) {
    if (!out.empty() && out.back()["role"] == role)
      out.back()["content"].push_back(std::move(block));
    else
      out.push_back({{"role", role}, {"content", json::array({std::move(block)})}});
  };
  for (const auto& m : neutral) {
    if (!m.is_object()) throw std::invalid_argument("a chat message is not an object");
    const std::string role = m.value("role", "");
    const std::string text = detail::content_text(m.value("content", json()));
    if (role == "system") {
      system += (system.empty() ? "" : "\n\n") + text;
    } else if (role == "user") {
      push("user", {{"type", "text"}, {"text", text.empty() ? "(empty)" : text}});
    } else if (role == "assistant") {
      json blocks = json::array();
      auto tc = m.find("tool_calls");
      const bool has_calls = tc != m.end() && tc->is_array() && !tc->empty();
      if (has_calls && thinking_for) {
        json t = thinking_for((*tc)[0].value("id", ""));
        for (auto& b : t) blocks.push_back(std::move(b));
      }
      if (!text.empty()) blocks.push_back({{"type", "text"}, {"text", text}});
      if (has_calls) {
        for (const auto& c : *tc) {
          if (!c.is_object()) continue;
          json input = c.value("arguments", json::object());
          if (input.is_string() && protocol::nesting_within(input.get_ref<const std::string&>()))
            input = json::parse(input.get<std::string>(), nullptr, false);
          if (!input.is_object()) input = json::object();
          blocks.push_back({{"type", "tool_use"},
                            {"id", anthropic_tool_id(c.value("id", ""))},
                            {"name", c.value("name", "")},
                            {"input", std::move(input)}});
        }
      }
      if (blocks.empty()) blocks.push_back({{"type", "text"}, {"text", "(no content)"}});
      for (auto& b : blocks) push("assistant", std::move(b));
    } else if (role == "tool") {
      push("user", {{"type", "tool_result"},
                    {"tool_use_id", anthropic_tool_id(m.value("tool_call_id", ""))},
                    {"content", text}});
    } else {
      throw std::invalid_argument("unknown chat role '" + role + "'");
    }
  }
  (void)specs;
  return out;
}

json anthropic_tools(const json& specs) {
  json out = json::array();
  for (const auto& s : specs) {
    if (!s.is_object() || !s.contains("name")) continue;
    json schema = s.value("input_schema", json::object());
    if (!schema.is_object() || schema.empty()) schema = {{"type", "object"}, {"properties", json::object()}};
    out.push_back({{"name", s["name"]}, {"description", s.value("description", "")}, {"input_schema", schema}});
  }
  return out;
}

}  // namespace wire

namespace {

struct Block {
  std::string type;      // text | tool_use | thinking | redacted_thinking | other
  std::size_t call = 0;  // index into StreamState::calls for tool_use
  std::string thinking, signature, data;
};

class AnthropicDecoder final : public detail::Decoder {
 public:
  std::map<std::uint64_t, Block> blocks;

  void on_event(const SseEvent& ev, detail::StreamState& st) override {
    json j = protocol::nesting_within(ev.data) ? json::parse(ev.data, nullptr, false) : json(json::value_t::discarded);
    if (j.is_discarded() || !j.is_object()) {
      st.fail("bad_response",
              "malformed JSON in stream event " + std::to_string(st.events) + ": " + detail::printable(ev.data, 80));
      return;
    }
    const std::string type = j.value("type", ev.event);
    if (type == "message_start") {
      const json& u = j.contains("message") && j["message"].is_object() ? j["message"].value("usage", json::object())
                                                                        : json::object();
      read_usage(u, st);
    } else if (type == "content_block_start") {
      const json& cb = j.value("content_block", json::object());
      const std::uint64_t index = j.value("index", std::uint64_t{0});
      Block b;
      b.type = cb.is_object() ? cb.value("type", "other") : "other";
      if (b.type == "tool_use") {
        const std::string name = cb.value("name", "");
        if (!st.admit(name.size(), false)) return;
        b.call = st.calls.size();
        st.calls.push_back({cb.value("id", ""), name, ""});
      } else if (b.type == "redacted_thinking") {
        b.data = cb.value("data", "");
      } else if (b.type == "text") {
        const std::string text = cb.value("text", "");
        if (!text.empty()) {
          if (!st.admit(text.size(), false)) return;
          st.content += text;
        }
      }
      blocks[index] = std::move(b);
    } else if (type == "content_block_delta") {
      const json& d = j.value("delta", json::object());
      auto it = blocks.find(j.value("index", std::uint64_t{0}));
      if (it == blocks.end() || !d.is_object()) {
        st.fail("bad_response", "a content_block_delta for a block that was never started");
        return;
      }
      Block& b = it->second;
      const std::string dt = d.value("type", "");
      if (dt == "text_delta") {
        const std::string text = d.value("text", "");
        if (!st.admit(text.size(), false)) return;
        st.content += text;
      } else if (dt == "input_json_delta" && b.type == "tool_use") {
        const std::string part = d.value("partial_json", "");
        if (!st.admit(part.size(), false)) return;
        st.calls[b.call].arguments += part;
      } else if (dt == "thinking_delta") {
        const std::string t = d.value("thinking", "");
        if (!st.admit(t.size(), true)) return;
        b.thinking += t;
      } else if (dt == "signature_delta") {
        b.signature += d.value("signature", "");
      }
    } else if (type == "message_delta") {
      const json& d = j.value("delta", json::object());
      if (d.is_object())
        if (auto r = d.find("stop_reason"); r != d.end() && r->is_string())
          st.finish_reason = map_stop(r->get<std::string>());
      if (auto u = j.find("usage"); u != j.end() && u->is_object()) read_usage(*u, st);
    } else if (type == "message_stop") {
      st.finished = true;
    } else if (type == "error") {
      const json& e = j.value("error", json::object());
      const std::string etype = e.is_object() ? e.value("type", "") : "";
      const std::string msg = e.is_object() ? e.value("message", "") : e.dump();
      st.retryable_error = etype == "overloaded_error" || etype == "api_error" || etype == "rate_limit_error";
      st.fail("provider_error",
              "the server reported an error in the stream: " + etype + ": " + detail::printable(msg, 300));
    }
    // ping, content_block_stop and event types added later are ignored.
  }

  // message_start carries the input counts; message_delta the output (cumulative) and, on newer
  // servers, the input counts again. input_tokens excludes the cache: the total input is the sum.
  // The thinking part of the output is usage.output_tokens_details.thinking_tokens when reported.
  static void read_usage(const json& u, detail::StreamState& st) {
    if (!u.is_object()) return;
    auto get = [&](const json& o, const char* k) -> std::optional<std::uint64_t> {
      if (auto v = o.find(k); v != o.end() && v->is_number_unsigned()) return v->get<std::uint64_t>();
      return std::nullopt;
    };
    if (auto in = get(u, "input_tokens")) {
      const std::uint64_t write = get(u, "cache_creation_input_tokens").value_or(0);
      const std::uint64_t read = get(u, "cache_read_input_tokens").value_or(0);
      st.input_tokens = *in + write + read;
      st.cache_write_tokens = write;
      st.cache_read_tokens = read;
    }
    if (auto out = get(u, "output_tokens")) st.output_tokens = *out;
    if (auto d = u.find("output_tokens_details"); d != u.end() && d->is_object())
      if (auto t = get(*d, "thinking_tokens")) st.reasoning_tokens = *t;
  }

  static std::string map_stop(const std::string& r) {
    if (r == "end_turn" || r == "stop_sequence") return "stop";
    if (r == "tool_use") return "tool_calls";
    if (r == "max_tokens") return "length";
    return r;  // pause_turn, refusal and any later ones pass through
  }
};

class AnthropicProvider final : public detail::StreamingProvider {
 public:
  using StreamingProvider::StreamingProvider;

  std::string describe() const override { return cfg_.name + ":" + cfg_.model + " (anthropic, " + cfg_.base_url + ")"; }

 protected:
  Wire build(const ModelCall& call, std::uint64_t& out_cap, std::uint64_t& thinking_cap) override {
    Wire w;
    std::string base = cfg_.base_url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    w.url = base + (base.size() >= 3 && base.compare(base.size() - 3, 3, "/v1") == 0 ? "/messages" : "/v1/messages");
    if (!key_.empty()) w.headers.push_back("x-api-key: " + key_);
    w.headers.push_back("anthropic-version: " + cfg_.anthropic_version);

    // Thinking gets what is left of the child's thinking budget, at most half the output cap (the
    // answer keeps room; budget_tokens must stay below max_tokens). Under Anthropic's minimum of 1,024
    // this call goes without thinking, and the transcript says why.
    std::uint64_t budget = 0;
    std::string no_thinking;
    if (!cfg_.thinking) {
      no_thinking = "thinking is off in the model config";
    } else {
      budget = std::min(call.max_thinking_tokens, out_cap / 2);
      if (budget < kMinThinking) {
        no_thinking = std::to_string(call.max_thinking_tokens) + " thinking tokens left and an output cap of " +
                      std::to_string(out_cap) + " allow " + std::to_string(budget) +
                      ", under Anthropic's minimum budget_tokens of 1024";
        budget = 0;
      }
    }
    bool missing_blocks = false;
    std::string system;
    auto thinking_for = [&](const std::string& id) -> json {
      auto it = thinking_.find(id);
      if (it != thinking_.end()) return it->second;
      missing_blocks = true;
      return json::array();
    };
    json messages = wire::anthropic_request(call.messages, call.tools, system, thinking_for);
    if (budget && missing_blocks && continuing_tool_turn(call.messages)) {
      // The API requires a continued tool-use turn to start with its signed thinking block; a turn
      // this provider did not produce (another provider's history) has none.
      budget = 0;
      no_thinking = "the tool-use turn being continued has no signed thinking block";
    }
    // Earlier thinking blocks stay as they were sent, thinking on or off: the API ignores those of
    // earlier turns, and rewriting them would change the cached prefix.
    json tools = wire::anthropic_tools(call.tools);
    json breakpoints = json::array();
    if (cfg_.prompt_caching) place_breakpoints(tools, system, messages, breakpoints);
    w.body = {{"model", cfg_.model}, {"max_tokens", out_cap}, {"messages", std::move(messages)}, {"stream", true}};
    if (!system.empty()) {
      json sys = json::array({{{"type", "text"}, {"text", system}}});
      if (cfg_.prompt_caching) sys[0]["cache_control"] = {{"type", "ephemeral"}};
      w.body["system"] = std::move(sys);
    }
    if (!tools.empty()) w.body["tools"] = std::move(tools);
    if (budget) w.body["thinking"] = {{"type", "enabled"}, {"budget_tokens", budget}};
    thinking_cap = budget ? budget : 0;
    derive_reasoning_ = budget > 0;
    request_notes_ = {{"thinking_budget_tokens", budget}, {"cache_breakpoints", breakpoints}};
    if (!no_thinking.empty()) request_notes_["thinking_off"] = no_thinking;
    return w;
  }

  // At most four breakpoints (the API's limit); the cache holds a prefix only where an earlier request
  // put a breakpoint, so they go where later requests will share the prefix:
  //  - the system prompt (its prefix holds the tools too; the last tool gets one only without a system);
  //  - the anchor: the end of the history that did not change the last time the history changed
  //    in the middle (the child trimmed old results). Marked on every request since, so the next
  //    trim, which starts after it, reads everything up to it back;
  //  - the end of the history this request shares with the previous one (read back: normally the
  //    previous request's end, or its last assistant message);
  //  - the end of this request (written for the next one), and, when a breakpoint is left, the last
  //    assistant message: where the history changes next when the child replaces the results it
  //    has just been shown by stubs (the reference child's default trimming), so the next request
  //    reads everything before those results back.
  //  Once the child has done that (this request changes the history exactly at the results after the
  //  previous request's last assistant message), the results after this request's last assistant
  //  message are not written to the cache: the next request will not send them again, so they cost
  //  the plain input price once instead of a cache write that is never read.
  void place_breakpoints(json& tools, const std::string& system, json& messages, json& where) {
    const json ephemeral = {{"type", "ephemeral"}};
    if (!tools.empty() && system.empty()) {
      tools.back()["cache_control"] = ephemeral;
      where.push_back("tools");
    }
    if (!system.empty()) where.push_back("system");
    std::vector<std::string> dumps;
    dumps.reserve(messages.size());
    for (const auto& m : messages) dumps.push_back(m.dump(-1, ' ', false, json::error_handler_t::replace));
    std::size_t common = 0;
    while (common < dumps.size() && common < prev_.size() && dumps[common] == prev_[common]) ++common;
    const bool changed_inside = common < prev_.size();
    prev_ = std::move(dumps);
    auto mark = [&](std::size_t i) {
      if (i >= messages.size()) return false;
      json& content = messages[i]["content"];
      for (auto it = content.rbegin(); it != content.rend(); ++it) {
        const std::string t = it->value("type", "");
        if (t == "thinking" || t == "redacted_thinking") continue;  // cannot carry cache_control
        if (it->contains("cache_control")) return true;
        (*it)["cache_control"] = ephemeral;
        where.push_back("message " + std::to_string(i));
        return true;
      }
      return false;
    };
    const std::size_t n = messages.size();
    if (n == 0) return;
    std::optional<std::size_t> last_assistant;
    for (std::size_t i = n; i-- > 0;)
      if (messages[i].value("role", "") == "assistant") {
        last_assistant = i;
        break;
      }
    const bool trims_seen = changed_inside && prev_last_assistant_ && common == *prev_last_assistant_ + 1;
    prev_last_assistant_ = last_assistant;
    if (anchor_ && *anchor_ >= common) anchor_.reset();  // the anchor itself changed
    if (anchor_) mark(*anchor_);
    if (common > 0 && common < n) mark(common - 1);
    if (changed_inside && common > 0) anchor_ = common - 1;
    if (trims_seen && last_assistant && *last_assistant + 1 < n && mark(*last_assistant)) return;
    if (last_assistant && *last_assistant + 1 < n && where.size() < 3) mark(*last_assistant);
    mark(n - 1);
  }

  std::unique_ptr<detail::Decoder> make_decoder() override {
    auto d = std::make_unique<AnthropicDecoder>();
    decoder_ = d.get();
    return d;
  }

  void remember(const detail::StreamState&, const ModelReply& reply) override {
    if (!decoder_ || reply.tool_calls.empty()) return;
    json kept = json::array();
    for (const auto& [i, b] : decoder_->blocks) {
      if (b.type == "thinking" && !b.signature.empty())
        kept.push_back({{"type", "thinking"}, {"thinking", b.thinking}, {"signature", b.signature}});
      else if (b.type == "redacted_thinking")
        kept.push_back({{"type", "redacted_thinking"}, {"data", b.data}});
    }
    if (kept.empty()) return;
    // Every turn's blocks are kept for the child's whole life: dropping the oldest would force thinking
    // off when that turn comes round again, and rewrite the cached prefix. They cost what the child's
    // own history costs (it resends every turn anyway).
    const std::string id = reply.tool_calls.front().id;
    thinking_[id] = std::move(kept);
  }

 private:
  static bool continuing_tool_turn(const json& messages) {
    // The last assistant message with tool calls is followed only by tool results.
    for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
      const std::string role = it->value("role", "");
      if (role == "tool") continue;
      return role == "assistant" && it->contains("tool_calls") && !(*it)["tool_calls"].empty();
    }
    return false;
  }

  static constexpr std::uint64_t kMinThinking = 1024;
  AnthropicDecoder* decoder_ = nullptr;
  std::map<std::string, json> thinking_;
  std::vector<std::string> prev_;      // the previous request's messages, serialized (where the cache ends)
  std::optional<std::size_t> anchor_;  // see place_breakpoints
  std::optional<std::size_t> prev_last_assistant_;  // the previous request's last assistant message
};

}  // namespace

std::unique_ptr<ModelProvider> make_anthropic_provider(boost::asio::io_context& io, ProviderConfig cfg,
                                                       std::string key) {
  return std::make_unique<AnthropicProvider>(io, std::move(cfg), std::move(key));
}

}  // namespace supervisor
