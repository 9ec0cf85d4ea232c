// OpenAI Chat Completions, streamed (also vLLM, llama.cpp's server, Ollama, LM Studio: any server with
// the same /chat/completions endpoint). Wire format:
//   request  {model, messages, tools:[{type:"function", function:{name, description, parameters}}],
//             stream:true, stream_options:{include_usage:true}, max_tokens | max_completion_tokens}
//   events   data: {"choices":[{"index":0,"delta":{"content":"..", "reasoning_content":"..",
//                    "tool_calls":[{"index":0,"id":"call_1","function":{"name":"..","arguments":"{\"a"}}]},
//                    "finish_reason":null}]}
//            data: {"choices":[],"usage":{"prompt_tokens":..,"completion_tokens":..,
//                    "completion_tokens_details":{"reasoning_tokens":..}}}
//            data: [DONE]
#include "provider_stream.hpp"
#include "models/providers.hpp"

namespace supervisor {

using nlohmann::json;

namespace wire {

json openai_messages(const json& neutral) {
  json out = json::array();
  for (const auto& m : neutral) {
    if (!m.is_object()) throw std::invalid_argument("a chat message is not an object");
    const std::string role = m.value("role", "");
    const std::string text = detail::content_text(m.value("content", json()));
    if (role == "system" || role == "user") {
      out.push_back({{"role", role}, {"content", text}});
    } else if (role == "assistant") {
      json a = {{"role", "assistant"}, {"content", text.empty() ? json(nullptr) : json(text)}};
      if (auto tc = m.find("tool_calls"); tc != m.end() && tc->is_array() && !tc->empty()) {
        json calls = json::array();
        for (const auto& c : *tc) {
          if (!c.is_object()) continue;
          json args = c.value("arguments", json::object());
          calls.push_back(
              {{"id", c.value("id", "")},
               {"type", "function"},
               {"function",
                {{"name", c.value("name", "")},
                 {"arguments", args.is_string() ? args.get<std::string>()
                                                : args.dump(-1, ' ', false, json::error_handler_t::replace)}}}});
        }
        a["tool_calls"] = std::move(calls);
      }
      out.push_back(std::move(a));
    } else if (role == "tool") {
      out.push_back({{"role", "tool"}, {"tool_call_id", m.value("tool_call_id", "")}, {"content", text}});
    } else {
      throw std::invalid_argument("unknown chat role '" + role + "'");
    }
  }
  return out;
}

json openai_tools(const json& specs) {
  json out = json::array();
  for (const auto& s : specs) {
    if (!s.is_object() || !s.contains("name")) continue;
    json params = s.value("input_schema", json::object());
    if (!params.is_object() || params.empty()) params = {{"type", "object"}, {"properties", json::object()}};
    out.push_back(
        {{"type", "function"},
         {"function", {{"name", s["name"]}, {"description", s.value("description", "")}, {"parameters", params}}}});
  }
  return out;
}

}  // namespace wire

// The reasoning_effort for a call with `left` thinking tokens, never above `ceiling` (docs/models.md):
// at least 16,384 left: high; 4,096: medium; less: low.
std::string reasoning_effort_for(std::uint64_t left, const std::string& ceiling) {
  auto rank = [](const std::string& e) { return e == "high" ? 2 : e == "medium" ? 1 : 0; };
  const int want = left >= 16384 ? 2 : left >= 4096 ? 1 : 0;
  static const char* const names[] = {"low", "medium", "high"};
  return names[std::min(want, rank(ceiling))];
}

namespace {

constexpr std::uint64_t kVisibleAllowance = 4096;

class OpenAiDecoder final : public detail::Decoder {
 public:
  void on_event(const SseEvent& ev, detail::StreamState& st) override {
    if (ev.data == "[DONE]") {
      st.finished = true;
      return;
    }
    json j = protocol::nesting_within(ev.data) ? json::parse(ev.data, nullptr, false) : json(json::value_t::discarded);
    if (j.is_discarded() || !j.is_object()) {
      st.fail("bad_response",
              "malformed JSON in stream event " + std::to_string(st.events) + ": " + detail::printable(ev.data, 80));
      return;
    }
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
      std::string msg = e->is_object() ? e->value("message", e->dump()) : e->dump();
      st.fail("provider_error", "the server reported an error in the stream: " + detail::printable(msg, 300));
      return;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_unsigned())
        st.input_tokens = p->get<std::uint64_t>();
      if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_unsigned())
        st.output_tokens = c->get<std::uint64_t>();
      if (auto d = u->find("completion_tokens_details"); d != u->end() && d->is_object())
        if (auto r = d->find("reasoning_tokens"); r != d->end() && r->is_number_unsigned())
          st.reasoning_tokens = r->get<std::uint64_t>();
      // prompt_tokens includes the cached part; OpenAI reports no cache writes (it caches by itself).
      if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
        if (auto c = d->find("cached_tokens"); c != d->end() && c->is_number_unsigned())
          st.cache_read_tokens = c->get<std::uint64_t>();
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty()) return;
    const json& ch = (*choices)[0];
    if (!ch.is_object()) {
      st.fail("bad_response", "a stream event's choice is not an object");
      return;
    }
    if (auto d = ch.find("delta"); d != ch.end() && d->is_object()) delta(*d, st);
    if (st.cut || !st.error_code.empty()) return;
    if (auto f = ch.find("finish_reason"); f != ch.end() && f->is_string()) st.finish_reason = f->get<std::string>();
  }

 private:
  void delta(const json& d, detail::StreamState& st) {
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (auto r = d.find(key); r != d.end() && r->is_string() && !r->get_ref<const std::string&>().empty()) {
        if (!st.admit(r->get_ref<const std::string&>().size(), true)) return;
        break;
      }
    }
    if (auto c = d.find("content"); c != d.end() && c->is_string() && !c->get_ref<const std::string&>().empty()) {
      const auto& text = c->get_ref<const std::string&>();
      if (!st.admit(text.size(), false)) return;
      st.content += text;
    }
    auto tcs = d.find("tool_calls");
    if (tcs == d.end() || !tcs->is_array()) return;
    for (const auto& tc : *tcs) {
      if (!tc.is_object()) {
        st.fail("bad_response", "a tool-call delta is not an object");
        return;
      }
      std::size_t index = st.calls.size();
      if (auto i = tc.find("index"); i != tc.end() && i->is_number_unsigned())
        index = i->get<std::size_t>();
      else if (!st.calls.empty() && !tc.contains("id"))
        index = st.calls.size() - 1;  // servers that omit index
      if (index > st.calls.size() || index > 128) {
        st.fail("bad_response", "tool-call delta index " + std::to_string(index) + " skips ahead");
        return;
      }
      std::string name, args;
      if (auto f = tc.find("function"); f != tc.end() && f->is_object()) {
        if (auto n = f->find("name"); n != f->end() && n->is_string()) name = n->get<std::string>();
        if (auto a = f->find("arguments"); a != f->end()) args = a->is_string() ? a->get<std::string>() : a->dump();
      }
      if (!st.admit(name.size() + args.size(), false)) return;
      if (index == st.calls.size()) st.calls.emplace_back();
      auto& call = st.calls[index];
      if (auto id = tc.find("id"); id != tc.end() && id->is_string()) call.id = id->get<std::string>();
      call.name += name;
      call.arguments += args;
    }
  }
};

class OpenAiProvider final : public detail::StreamingProvider {
 public:
  using StreamingProvider::StreamingProvider;

  std::string describe() const override {
    return cfg_.name + ":" + cfg_.model + " (openai-compatible, " + cfg_.base_url + ")";
  }

 protected:
  Wire build(const ModelCall& call, std::uint64_t& out_cap, std::uint64_t& thinking_cap) override {
    Wire w;
    std::string base = cfg_.base_url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    w.url = base + "/chat/completions";
    if (!key_.empty()) w.headers.push_back("Authorization: Bearer " + key_);
    w.body = {{"model", cfg_.model}, {"messages", wire::openai_messages(call.messages)}, {"stream", true}};
    if (cfg_.stream_usage) w.body["stream_options"] = {{"include_usage", true}};
    // One cache key per child: its requests share a prefix, and land where that prefix is cached.
    if (cfg_.prompt_caching && !call.child_id.empty()) w.body["prompt_cache_key"] = "subagent-" + call.child_id;
    std::string effort;
    if (!cfg_.reasoning_effort.empty()) {
      // OpenAI streams no reasoning and has no per-call thinking cap: the effort is chosen from the
      // thinking budget left, and the output cap keeps one call from passing it by more than
      // kVisibleAllowance (reasoning counts in max_completion_tokens).
      effort = reasoning_effort_for(call.max_thinking_tokens, cfg_.reasoning_effort);
      w.body["reasoning_effort"] = effort;
      out_cap = std::max<std::uint64_t>(1, std::min(out_cap, call.max_thinking_tokens + kVisibleAllowance));
    }
    w.body[cfg_.max_tokens_field] = out_cap;
    json tools = wire::openai_tools(call.tools);
    if (!tools.empty()) w.body["tools"] = std::move(tools);
    thinking_cap = call.max_thinking_tokens;
    request_notes_ = {{"reasoning_effort", effort.empty() ? json(nullptr) : json(effort)},
                      {"prompt_cache_key", w.body.contains("prompt_cache_key")}};
    return w;
  }

  std::unique_ptr<detail::Decoder> make_decoder() override { return std::make_unique<OpenAiDecoder>(); }
};

}  // namespace

std::unique_ptr<ModelProvider> make_openai_provider(boost::asio::io_context& io, ProviderConfig cfg, std::string key) {
  return std::make_unique<OpenAiProvider>(io, std::move(cfg), std::move(key));
}

}  // namespace supervisor
