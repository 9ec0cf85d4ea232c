// Model provider configuration: the --model spec and the optional models.json file (docs/models.md).
//
// A config never holds an API key: it names the environment variable that does (api_key_env). Keys
// are read from the environment when a provider is made, kept in the supervisor only, and never
// appear in describe(), logs, errors, transcripts or envelopes.
//
// Errors: exceptions (std::runtime_error naming the file and field) while reading the config; none
// afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace supervisor {

// List prices of one model, in US dollars per million tokens (docs/models.md, "Prices and cost").
struct Price {
  double input = 0;         // uncached input
  double cached_input = 0;  // input read from the prompt cache
  double cache_write = 0;   // input written to the prompt cache (Anthropic); OpenAI bills it as input
  double output = 0;        // output, thinking included
};

struct ProviderConfig {
  std::string name;      // the config key, or "openai" / "anthropic" for the built-ins
  std::string type;      // "openai" (Chat Completions) | "anthropic" (Messages)
  std::string base_url;  // e.g. https://api.openai.com/v1, http://127.0.0.1:8080/v1, https://api.anthropic.com
  std::string model;
  std::string api_key_env;                 // "" : no key is sent (local servers)
  bool api_key_required = false;           // making the provider fails when the variable is unset or empty
  std::uint64_t max_output_tokens = 8192;  // per-request ceiling, whatever the budget leaves
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds request_timeout{600'000};  // one attempt, start to end of stream
  // No byte for this long: the stream is dead. Generous because reasoning models may send nothing
  // while they think (OpenAI streams no reasoning deltas).
  std::chrono::seconds stall_timeout{300};
  // Prompt caching: Anthropic cache_control breakpoints, OpenAI prompt_cache_key (the child's id).
  bool prompt_caching = true;
  std::optional<Price> price;  // from the config's price table, for `model`
  std::size_t max_response_bytes = 16u << 20;
  unsigned max_retries = 4;                            // after the first attempt
  std::chrono::milliseconds retry_base_delay{500};     // doubled per retry, with jitter
  std::chrono::milliseconds retry_max_delay{30'000};   // cap on one backoff (Retry-After may ask more)
  std::chrono::milliseconds max_retry_after{120'000};  // a longer Retry-After ends the call
  // openai only
  std::string max_tokens_field = "max_tokens";  // "max_completion_tokens" for OpenAI's reasoning models
  bool stream_usage = true;                     // send stream_options.include_usage
  // The highest reasoning_effort to send ("low" | "medium" | "high"); "" sends none (models without
  // reasoning reject the field). Each call's effort is chosen from the thinking budget left.
  std::string reasoning_effort;
  // anthropic only
  bool thinking = true;  // extended thinking, with budget_tokens from the child's thinking budget
  std::string anthropic_version = "2023-06-01";
};

struct ModelConfig {
  std::map<std::string, ProviderConfig> providers;
  std::map<std::string, Price> prices;  // model name -> price
  std::string source;                   // the file it came from ("" when none)
};

class ModelSpecError;  // model.hpp

// Parses the JSON of a models.json; `source` names it in errors. Throws ModelSpecError naming the
// provider and field ("models.json: providers.local.max_retries must be a non-negative integer").
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);

// The config file in force: $SUBAGENT_MODEL_CONFIG (which must then exist), else
// $XDG_CONFIG_HOME/subagent-supervisor/models.json, else ~/.config/subagent-supervisor/models.json.
// Returns nullopt when no file is named and the default ones do not exist.
std::optional<std::filesystem::path> model_config_path();

// Loads model_config_path(); an empty config when there is none. Throws ModelSpecError.
ModelConfig load_model_config();

// Resolves a --model spec (other than replay:FILE):
//   NAME          a provider of the config file
//   NAME:MODEL    the same with another model
//   openai:MODEL  built-in OpenAI (or $OPENAI_BASE_URL) unless the config defines "openai"
//   anthropic:MODEL built-in Anthropic (or $ANTHROPIC_BASE_URL) unless the config defines "anthropic"
// Throws ModelSpecError naming what is wrong (never a key).
ProviderConfig resolve_model_spec(const std::string& spec, const ModelConfig& config);

}  // namespace supervisor
