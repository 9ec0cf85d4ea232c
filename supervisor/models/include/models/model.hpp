// Model providers. The supervisor, never the child, talks to the model: API keys stay here and the
// token budget is enforced from outside the sandbox.
//
// Threading: providers run on the supervisor's io_context thread; `done` is invoked on that thread,
// exactly once per start(), unless cancel() was called first (then never).
//
// Errors: a bad model spec throws ModelSpecError; a failed call is a value, ModelReply with ok=false
// and error_code, delivered to the callback.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"
#include "models/model_config.hpp"

namespace supervisor {

struct ModelCall {
  std::string child_id;
  nlohmann::json messages = nlohmann::json::array();  // neutral chat messages (protocol/README.md)
  nlohmann::json tools = nlohmann::json::array();     // tool specs the model may call
  std::uint64_t max_tokens = 0;                       // output cap for this call (0: provider default)
  // Thinking tokens this call may spend: what is left of the child's thinking budget (0: none). The
  // provider sizes Anthropic's budget_tokens and OpenAI's reasoning_effort from it.
  std::uint64_t max_thinking_tokens = 0;
  bool wrap_up = false;  // the wrap-up turn (no tools)
  // The child's wall-clock deadline: retries and backoff never run past it.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct ModelReply {
  bool ok = false;
  std::string error_code;  // provider_error | bad_response | budget_exhausted | ...
  std::string error_message;
  std::string content;
  std::vector<protocol::ToolCall> tool_calls;
  protocol::Usage usage;
  bool usage_estimated = false;  // the provider reported no usage; the numbers are estimates
  std::string finish_reason;     // "length": the server's token cap; "budget": the supervisor cut the stream
  // What the provider chose for this request (thinking budget, reasoning effort, cache breakpoints),
  // for the transcript: nothing is switched off or rewritten without a trace.
  nlohmann::json request = nlohmann::json::object();
};

class ModelProvider {
 public:
  virtual ~ModelProvider() = default;
  virtual std::string describe() const = 0;  // e.g. "replay:examples/demo.jsonl" (never a key)
  virtual void start(ModelCall call, std::function<void(ModelReply)> done) = 0;
  virtual void cancel() = 0;  // drops the call in flight, if any
  // The model's list prices from the model config, when it has them (cost estimates and max_cost_usd).
  virtual std::optional<Price> price() const { return std::nullopt; }
};

class ModelSpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelConfig;  // model_config.hpp

// Checks a --model spec without creating anything (so `run` can refuse it before starting a child):
// the replay script, or the provider's config and that its key variable is set. The one-argument
// forms read the model config file (model_config.hpp: $SUBAGENT_MODEL_CONFIG, then the XDG path).
void validate_model_spec(const std::string& spec);
void validate_model_spec(const std::string& spec, const ModelConfig& config);

// One provider per child (a replay script keeps its own position; an Anthropic provider keeps the
// child's signed thinking blocks). Specs: replay:FILE, openai:MODEL, anthropic:MODEL, NAME[:MODEL]
// from the model config (docs/models.md). Throws ModelSpecError.
std::unique_ptr<ModelProvider> make_provider(const std::string& spec, boost::asio::io_context& io);
std::unique_ptr<ModelProvider> make_provider(const std::string& spec, boost::asio::io_context& io,
                                             const ModelConfig& config);

// A model spec with everything it names already read (the replay script's turns, or the model
// config's entry and the provider's key), so that making its provider reads no file: a spawn
// resolves on a worker and makes each child's provider on the loop.
struct ResolvedModel {
  std::string spec;
  // A new provider per call; reads nothing. Throws only what the provider's constructor throws.
  std::function<std::unique_ptr<ModelProvider>(boost::asio::io_context&)> make;
};
// Reads what `spec` names, as make_provider would, and checks it (throws ModelSpecError). The
// one-argument form reads the model config file.
ResolvedModel resolve_model(const std::string& spec);
ResolvedModel resolve_model(const std::string& spec, const ModelConfig& config);

// Rough token estimate (4 bytes per token) for providers that report no usage.
std::uint64_t estimate_tokens(std::size_t bytes) noexcept;

}  // namespace supervisor
