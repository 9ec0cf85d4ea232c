// Model providers behind --model (docs/models.md): replay scripts, OpenAI-compatible Chat Completions
// and Anthropic Messages. make_provider() in model.hpp picks one from a spec; these are its parts.
//
// The HTTP providers stream (SSE) over the io_context's http::Client; the contract of ModelProvider
// holds (done on the io thread, exactly once per start() unless cancel() came first). They cut a stream
// that would pass the call's output cap (finish_reason "budget"), retry 429 / 5xx / connection errors
// with backoff and jitter, honour Retry-After, and never wait past ModelCall::deadline.
//
// Errors: as model.hpp: a failed call is a ModelReply with ok=false; only make_provider throws
// (ModelSpecError).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "models/model.hpp"
#include "models/model_config.hpp"

namespace supervisor {

// `key` is the API key ("" sends none). It stays inside the provider.
std::unique_ptr<ModelProvider> make_openai_provider(boost::asio::io_context& io, ProviderConfig cfg, std::string key);
std::unique_ptr<ModelProvider> make_anthropic_provider(boost::asio::io_context& io, ProviderConfig cfg,
                                                       std::string key);

std::unique_ptr<ModelProvider> make_replay_provider(boost::asio::io_context& io, const std::string& path);
void validate_replay_script(const std::string& path);  // throws ModelSpecError
// Reads and checks the script once; each call of the result is a new provider at its first turn.
std::function<std::unique_ptr<ModelProvider>(boost::asio::io_context&)> load_replay_provider(const std::string& path);

// Reads cfg.api_key_env from the environment. Throws ModelSpecError naming the variable (never a
// value) when the key is required and the variable is unset or empty.
std::string api_key_for(const ProviderConfig& cfg);

// Translations between the neutral chat format (protocol/README.md) and each wire format.
namespace wire {
nlohmann::json openai_messages(const nlohmann::json& neutral);
nlohmann::json openai_tools(const nlohmann::json& specs);
// Returns Anthropic `messages`; system messages are joined into `system`. `thinking_for(first tool id)`
// returns the signed thinking blocks to put back in front of an assistant tool-use turn (may be empty).
nlohmann::json anthropic_request(const nlohmann::json& neutral, const nlohmann::json& specs, std::string& system,
                                 const std::function<nlohmann::json(const std::string&)>& thinking_for = {});
nlohmann::json anthropic_tools(const nlohmann::json& specs);
std::string anthropic_tool_id(const std::string& id);  // ids Anthropic accepts: [A-Za-z0-9_-]
}  // namespace wire

// OpenAI reasoning_effort for a call with `thinking_left` tokens of thinking budget, at most `ceiling`.
std::string reasoning_effort_for(std::uint64_t thinking_left, const std::string& ceiling);

}  // namespace supervisor
