#include "models/model_config.hpp"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "models/model.hpp"

namespace supervisor {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool valid_env_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '_')) return false;
  return true;
}

void check_base_url(const std::string& url, const std::string& where) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    throw ModelSpecError(where + "base_url '" + url + "' must start with http:// or https://");
  auto host_start = url.find("://") + 3;
  auto host_end = url.find_first_of("/?#", host_start);
  if (url.substr(host_start, host_end - host_start).find('@') != std::string::npos)
    throw ModelSpecError(where +
                         "base_url must not contain credentials; put the key in an environment variable "
                         "and name it in api_key_env");
}

ProviderConfig builtin(const std::string& type) {
  ProviderConfig p;
  p.name = type;
  p.type = type;
  if (type == "openai") {
    p.base_url = env("OPENAI_BASE_URL");
    p.api_key_env = "OPENAI_API_KEY";
    p.api_key_required = p.base_url.empty();  // a local server named by OPENAI_BASE_URL may need none
    if (p.base_url.empty()) p.base_url = "https://api.openai.com/v1";
  } else {
    p.base_url = env("ANTHROPIC_BASE_URL");
    if (p.base_url.empty()) p.base_url = "https://api.anthropic.com";
    p.api_key_env = "ANTHROPIC_API_KEY";
    p.api_key_required = true;
  }
  return p;
}

class Reader {
 public:
  Reader(const json& o, std::string where) : o_(o), where_(std::move(where)) {}

  std::string str(const char* key, const std::string& dflt) {
    seen_.insert(key);
    auto it = o_.find(key);
    if (it == o_.end()) return dflt;
    if (!it->is_string()) throw ModelSpecError(where_ + key + " must be a string");
    return it->get<std::string>();
  }
  bool boolean(const char* key, bool dflt) {
    seen_.insert(key);
    auto it = o_.find(key);
    if (it == o_.end()) return dflt;
    if (!it->is_boolean()) throw ModelSpecError(where_ + key + " must be true or false");
    return it->get<bool>();
  }
  std::uint64_t number(const char* key, std::uint64_t dflt) {
    seen_.insert(key);
    auto it = o_.find(key);
    if (it == o_.end()) return dflt;
    if (!it->is_number_unsigned()) throw ModelSpecError(where_ + key + " must be a non-negative integer");
    return it->get<std::uint64_t>();
  }
  bool has(const char* key) const { return o_.contains(key); }
  void no_others() const {
    for (auto it = o_.begin(); it != o_.end(); ++it) {
      if (seen_.count(it.key())) continue;
      if (it.key() == "api_key" || it.key() == "key" || it.key() == "token")
        throw ModelSpecError(where_ + it.key() +
                             ": a config file must not hold keys; put the key in an environment variable and name "
                             "the variable in api_key_env");
      throw ModelSpecError(where_ + it.key() + " is not a known field");
    }
  }

 private:
  const json& o_;
  std::string where_;
  std::set<std::string> seen_;
};

ProviderConfig parse_provider(const std::string& name, const json& o, const std::string& source) {
  const std::string where = source + ": providers." + name + ".";
  if (!o.is_object()) throw ModelSpecError(source + ": providers." + name + " must be an object");
  Reader r(o, where);
  std::string type = r.str("type", "");
  if (type != "openai" && type != "anthropic")
    throw ModelSpecError(where + "type must be \"openai\" or \"anthropic\"" +
                         (type.empty() ? std::string(" (it is missing)") : " (not \"" + type + "\")"));
  ProviderConfig p = builtin(type);
  p.name = name;
  p.base_url = r.str("base_url", type == "openai" ? "https://api.openai.com/v1" : "https://api.anthropic.com");
  check_base_url(p.base_url, where);
  p.model = r.str("model", "");
  if (r.has("api_key_env")) {
    p.api_key_env = r.str("api_key_env", "");
    if (!p.api_key_env.empty() && !valid_env_name(p.api_key_env))
      throw ModelSpecError(where + "api_key_env must name an environment variable (letters, digits, _), not a key");
    p.api_key_required = !p.api_key_env.empty();
  } else {
    // No variable named: the official endpoints get the default one; other servers get no key.
    const bool official = p.base_url.find("api.openai.com") != std::string::npos ||
                          p.base_url.find("api.anthropic.com") != std::string::npos;
    if (!official) p.api_key_env.clear();
    p.api_key_required = official;
  }
  p.max_output_tokens = r.number("max_output_tokens", p.max_output_tokens);
  if (p.max_output_tokens == 0) throw ModelSpecError(where + "max_output_tokens must be at least 1");
  p.connect_timeout = std::chrono::milliseconds(r.number("connect_timeout_ms", p.connect_timeout.count()));
  p.request_timeout = std::chrono::milliseconds(r.number("request_timeout_ms", p.request_timeout.count()));
  p.stall_timeout = std::chrono::seconds(r.number("stall_timeout_seconds", p.stall_timeout.count()));
  if (p.stall_timeout.count() == 0) throw ModelSpecError(where + "stall_timeout_seconds must be at least 1");
  p.max_response_bytes = r.number("max_response_bytes", p.max_response_bytes);
  p.prompt_caching = r.boolean("prompt_caching", true);
  p.max_retries = static_cast<unsigned>(std::min<std::uint64_t>(r.number("max_retries", p.max_retries), 20));
  p.retry_base_delay = std::chrono::milliseconds(r.number("retry_base_delay_ms", p.retry_base_delay.count()));
  p.retry_max_delay = std::chrono::milliseconds(r.number("retry_max_delay_ms", p.retry_max_delay.count()));
  p.max_retry_after = std::chrono::milliseconds(r.number("max_retry_after_ms", p.max_retry_after.count()));
  if (type == "openai") {
    p.max_tokens_field =
        r.str("max_tokens_field",
              p.base_url.find("api.openai.com") != std::string::npos ? "max_completion_tokens" : "max_tokens");
    if (p.max_tokens_field != "max_tokens" && p.max_tokens_field != "max_completion_tokens")
      throw ModelSpecError(where + "max_tokens_field must be \"max_tokens\" or \"max_completion_tokens\"");
    p.stream_usage = r.boolean("stream_usage", true);
    p.reasoning_effort = r.str("reasoning_effort", "");
    if (!p.reasoning_effort.empty() && p.reasoning_effort != "low" && p.reasoning_effort != "medium" &&
        p.reasoning_effort != "high")
      throw ModelSpecError(where + "reasoning_effort must be \"low\", \"medium\" or \"high\" (or absent)");
  } else {
    p.thinking = r.boolean("thinking", true);
    p.anthropic_version = r.str("anthropic_version", p.anthropic_version);
  }
  r.no_others();
  return p;
}

Price parse_price(const std::string& model, const json& o, const std::string& source) {
  const std::string where = source + ": prices." + model + ".";
  if (!o.is_object()) throw ModelSpecError(source + ": prices." + model + " must be an object");
  Price pr;
  std::set<std::string> seen;
  auto num = [&](const char* key, bool required, double dflt) {
    seen.insert(key);
    auto it = o.find(key);
    if (it == o.end()) {
      if (required) throw ModelSpecError(where + key + " is missing (US dollars per million tokens)");
      return dflt;
    }
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > 1e6)
      throw ModelSpecError(where + key + " must be a non-negative number of US dollars per million tokens");
    return it->get<double>();
  };
  pr.input = num("input", true, 0);
  pr.output = num("output", true, 0);
  pr.cached_input = num("cached_input", false, pr.input);
  pr.cache_write = num("cache_write", false, pr.input);
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!seen.count(it.key()))
      throw ModelSpecError(where + it.key() + " is not a known field (input, cached_input, cache_write, output)");
  return pr;
}

}  // namespace

ModelConfig parse_model_config(const json& j, const std::string& source) {
  if (!j.is_object()) throw ModelSpecError(source + ": the model config must be a JSON object");
  ModelConfig c;
  c.source = source;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "providers" && it.key() != "prices" && it.key() != "$schema" && it.key() != "comment")
      throw ModelSpecError(source + ": " + it.key() + " is not a known field (expected \"providers\" or \"prices\")");
  if (auto pr = j.find("prices"); pr != j.end()) {
    if (!pr->is_object()) throw ModelSpecError(source + ": prices must be an object of model -> price");
    for (auto it = pr->begin(); it != pr->end(); ++it)
      c.prices.emplace(it.key(), parse_price(it.key(), it.value(), source));
  }
  auto p = j.find("providers");
  if (p == j.end()) return c;
  if (!p->is_object()) throw ModelSpecError(source + ": providers must be an object of name -> provider");
  for (auto it = p->begin(); it != p->end(); ++it) {
    if (it.key().empty() || it.key().find(':') != std::string::npos || it.key() == "replay")
      throw ModelSpecError(source + ": provider name '" + it.key() + "' is not allowed (no ':', not \"replay\")");
    c.providers.emplace(it.key(), parse_provider(it.key(), it.value(), source));
  }
  return c;
}

std::optional<fs::path> model_config_path() {
  if (std::string e = env("SUBAGENT_MODEL_CONFIG"); !e.empty()) return fs::path(e);
  fs::path base;
  if (std::string x = env("XDG_CONFIG_HOME"); !x.empty())
    base = x;
  else if (std::string h = env("HOME"); !h.empty())
    base = fs::path(h) / ".config";
  else
    return std::nullopt;
  fs::path p = base / "subagent-supervisor" / "models.json";
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  return p;
}

ModelConfig load_model_config() {
  auto path = model_config_path();
  if (!path) return {};
  std::ifstream in(*path);
  if (!in)
    throw ModelSpecError("model config " + path->string() +
                         " cannot be read (set by SUBAGENT_MODEL_CONFIG or found in the default location)");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false, /*ignore_comments=*/true);
  if (j.is_discarded()) throw ModelSpecError("model config " + path->string() + " is not valid JSON");
  return parse_model_config(j, path->string());
}

ProviderConfig resolve_model_spec(const std::string& spec, const ModelConfig& config) {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string model = colon == std::string::npos ? "" : spec.substr(colon + 1);
  ProviderConfig p;
  if (auto it = config.providers.find(name); it != config.providers.end()) {
    p = it->second;
  } else if (name == "openai" || name == "anthropic") {
    p = builtin(name);
  } else {
    std::string known;
    for (const auto& [n, _] : config.providers) known += (known.empty() ? "" : ", ") + n;
    throw ModelSpecError("unknown model spec '" + spec +
                         "' (expected replay:FILE, openai:MODEL, anthropic:MODEL or a provider of the model config" +
                         (config.source.empty() ? std::string(", and no model config was found")
                                                : " " + config.source + ": " + (known.empty() ? "none" : known)) +
                         ")");
  }
  if (!model.empty()) p.model = model;
  if (auto pr = config.prices.find(p.model); pr != config.prices.end()) p.price = pr->second;
  if (p.model.empty())
    throw ModelSpecError("model spec '" + spec + "' names no model (use " + name + ":MODEL" +
                         (config.providers.count(name) ? " or set \"model\" in " + config.source : std::string()) +
                         ")");
  check_base_url(p.base_url, "provider " + p.name + ": ");
  return p;
}

}  // namespace supervisor
