// --model SPEC → a provider (docs/models.md).
#include <cstdlib>

#include "models/model.hpp"
#include "models/model_config.hpp"
#include "models/providers.hpp"

namespace supervisor {

std::uint64_t estimate_tokens(std::size_t bytes) noexcept { return (bytes + 3) / 4; }

std::string api_key_for(const ProviderConfig& cfg) {
  if (cfg.api_key_env.empty()) return "";
  const char* v = std::getenv(cfg.api_key_env.c_str());
  std::string key = v ? v : "";
  if (key.empty() && cfg.api_key_required)
    throw ModelSpecError("the API key for model provider '" + cfg.name + "' is missing: set the environment variable " +
                         cfg.api_key_env +
                         (cfg.name == "openai" || cfg.name == "anthropic"
                              ? std::string()
                              : " (or change api_key_env in the model config)"));
  return key;
}

void validate_model_spec(const std::string& spec, const ModelConfig& config) {
  if (spec.rfind("replay:", 0) == 0) {
    validate_replay_script(spec.substr(7));
    return;
  }
  (void)api_key_for(resolve_model_spec(spec, config));
}

void validate_model_spec(const std::string& spec) {
  if (spec.rfind("replay:", 0) == 0) {
    validate_replay_script(spec.substr(7));
    return;
  }
  validate_model_spec(spec, load_model_config());
}

ResolvedModel resolve_model(const std::string& spec, const ModelConfig& config) {
  if (spec.rfind("replay:", 0) == 0) return {spec, load_replay_provider(spec.substr(7))};
  ProviderConfig p = resolve_model_spec(spec, config);
  std::string key = api_key_for(p);
  return {spec,
          [p = std::move(p), key = std::move(key)](boost::asio::io_context& io) -> std::unique_ptr<ModelProvider> {
            if (p.type == "anthropic") return make_anthropic_provider(io, p, key);
            return make_openai_provider(io, p, key);
          }};
}

ResolvedModel resolve_model(const std::string& spec) {
  if (spec.rfind("replay:", 0) == 0) return resolve_model(spec, ModelConfig{});
  return resolve_model(spec, load_model_config());
}

std::unique_ptr<ModelProvider> make_provider(const std::string& spec, boost::asio::io_context& io,
                                             const ModelConfig& config) {
  if (spec.rfind("replay:", 0) == 0) return make_replay_provider(io, spec.substr(7));
  ProviderConfig p = resolve_model_spec(spec, config);
  std::string key = api_key_for(p);
  if (p.type == "anthropic") return make_anthropic_provider(io, std::move(p), std::move(key));
  return make_openai_provider(io, std::move(p), std::move(key));
}

std::unique_ptr<ModelProvider> make_provider(const std::string& spec, boost::asio::io_context& io) {
  if (spec.rfind("replay:", 0) == 0) return make_replay_provider(io, spec.substr(7));
  return make_provider(spec, io, load_model_config());
}

}  // namespace supervisor
