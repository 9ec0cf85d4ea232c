// Internal: what the OpenAI and Anthropic providers share. One streaming POST per attempt over the
// io_context's http::Client, an SSE decoder per wire format, the token count kept as deltas arrive
// (the stream is cut when it would pass the call's output cap), and retries with exponential backoff
// and jitter on 429 / 5xx / connection errors, honouring Retry-After, never past the call's deadline.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "net/http.hpp"
#include "models/model.hpp"
#include "models/model_config.hpp"
#include "models/sse.hpp"

namespace supervisor::detail {

using http::printable;

// What a decoder builds while the stream arrives.
struct StreamState {
  std::uint64_t out_cap = 0;       // output tokens this request may produce (what was sent)
  std::uint64_t thinking_cap = 0;  // reasoning tokens it may produce (0: no separate cap)
  std::string content;
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls;
  std::string finish_reason;
  bool finished = false;                  // the stream's terminal event arrived
  bool cut = false;                       // stopped because the next delta would pass a cap
  std::string error_code, error_message;  // the decoder ends the stream with an error
  bool retryable_error = false;           // e.g. Anthropic's mid-stream overloaded_error
  std::uint64_t events = 0;
  std::uint64_t out_deltas = 0, out_bytes = 0, reasoning_deltas = 0, reasoning_bytes = 0;
  std::optional<std::uint64_t> input_tokens, output_tokens, reasoning_tokens;  // as the server reports
  std::optional<std::uint64_t> cache_read_tokens, cache_write_tokens;          // parts of input_tokens
  // Thinking was on for this request but the server may not report a thinking count: then the thinking
  // tokens are what output_tokens leaves after the visible output (estimated at 4 bytes a token, so the
  // thinking count errs high, never low).
  bool derive_reasoning = false;

  // Counts one output delta of `bytes` bytes (reasoning or not). False when it would pass a cap: the
  // delta must then be dropped, and `cut` is set.
  bool admit(std::size_t bytes, bool reasoning);
  void fail(std::string code, std::string message) {
    if (error_code.empty()) {
      error_code = std::move(code);
      error_message = std::move(message);
    }
  }
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void on_event(const SseEvent& ev, StreamState& st) = 0;
};

class StreamingProvider : public ModelProvider {
 public:
  StreamingProvider(boost::asio::io_context& io, ProviderConfig cfg, std::string key);
  ~StreamingProvider() override;
  void start(ModelCall call, std::function<void(ModelReply)> done) override;
  void cancel() override;
  std::optional<Price> price() const override { return cfg_.price; }

 protected:
  struct Wire {
    std::string url;
    std::vector<std::string> headers;  // including the key's header
    nlohmann::json body;
  };
  // Builds the request. `out_cap` may be lowered (OpenAI reasoning); `thinking_cap` is the thinking
  // tokens the stream may carry (0: no separate cap); `request_notes` goes to the transcript.
  virtual Wire build(const ModelCall& call, std::uint64_t& out_cap, std::uint64_t& thinking_cap) = 0;
  nlohmann::json request_notes_ = nlohmann::json::object();
  bool derive_reasoning_ = false;  // set by build(): see StreamState::derive_reasoning
  virtual std::unique_ptr<Decoder> make_decoder() = 0;
  // Turns the state of a finished (or cut) stream into the reply; the default handles both formats.
  virtual void finish(StreamState& st, ModelReply& reply);
  // Lets a provider keep what it needs from a completed turn (Anthropic's signed thinking blocks).
  virtual void remember(const StreamState&, const ModelReply&) {}

  const ProviderConfig cfg_;
  const std::string key_;  // never logged, never in an error, never in describe()

 private:
  void attempt();
  bool on_body(long status, std::string_view chunk);
  void on_done(http::Response r);
  bool retry(std::optional<std::chrono::milliseconds> retry_after, std::string& why_not);
  void complete_ok();
  // `output_tokens` held to the call's output cap (a server reporting more is noted in the request notes).
  std::uint64_t within_cap(std::uint64_t output_tokens);
  void fail(std::string code, std::string message);
  std::string scrub(std::string s) const;
  std::string where() const;

  boost::asio::io_context& io_;
  http::Client& client_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<char> life_ = std::make_shared<char>();
  std::uint64_t gen_ = 0;
  http::Client::Id transfer_ = 0;
  ModelCall call_;
  std::function<void(ModelReply)> done_;
  unsigned attempt_ = 0;
  std::size_t request_bytes_ = 0;
  std::unique_ptr<StreamState> st_;
  std::unique_ptr<Decoder> dec_;
  std::optional<SseParser> sse_;
  std::optional<bool> sse_mode_;
  std::string raw_;  // error bodies and non-streamed answers (bounded)
  std::mt19937_64 rng_;
};

// Tool-call argument text → object; "" → {}. Sets `err` for anything but a JSON object.
nlohmann::json parse_arguments(const std::string& text, const std::string& tool, std::string& err);

std::string content_text(const nlohmann::json& content);  // neutral content → plain text

}  // namespace supervisor::detail
