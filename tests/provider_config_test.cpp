// --model specs and the model config file (docs/models.md).
#include "models/model_config.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <boost/asio/io_context.hpp>

#include "models/model.hpp"
#include "models/providers.hpp"
#include "test_util.hpp"

using nlohmann::json;
using supervisor::ModelSpecError;

namespace {

// Sets an environment variable for one scope.
struct Env {
  std::string name;
  std::optional<std::string> old;
  Env(std::string n, const char* value) : name(std::move(n)) {
    if (const char* o = ::getenv(name.c_str())) old = o;
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~Env() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ModelSpecError& e) {
    return e.what();
  }
  return "";
}

const json kConfig = json::parse(R"({
  "providers": {
    "local": {"type": "openai", "base_url": "http://127.0.0.1:8080/v1", "model": "qwen2.5"},
    "keyed": {"type": "openai", "base_url": "http://127.0.0.1:8081/v1", "model": "m", "api_key_env": "SUBAGENT_TEST_KEY",
              "max_output_tokens": 2048, "max_retries": 1, "stall_timeout_seconds": 5},
    "claude": {"type": "anthropic", "model": "claude-sonnet-4-5", "api_key_env": "SUBAGENT_TEST_ANT_KEY", "thinking": false}
  }
})");

}  // namespace

TEST_CASE("config providers resolve by name, and NAME:MODEL overrides the model") {
  auto cfg = supervisor::parse_model_config(kConfig, "models.json");
  auto p = supervisor::resolve_model_spec("local", cfg);
  CHECK(p.type == "openai");
  CHECK(p.base_url == "http://127.0.0.1:8080/v1");
  CHECK(p.model == "qwen2.5");
  CHECK(p.api_key_env.empty());  // a local server gets no key unless one is named
  CHECK_FALSE(p.api_key_required);
  CHECK(p.max_tokens_field == "max_tokens");
  CHECK(supervisor::resolve_model_spec("local:llama3", cfg).model == "llama3");
  auto k = supervisor::resolve_model_spec("keyed", cfg);
  CHECK(k.api_key_env == "SUBAGENT_TEST_KEY");
  CHECK(k.api_key_required);
  CHECK(k.max_output_tokens == 2048);
  CHECK(k.max_retries == 1);
  CHECK(k.stall_timeout == std::chrono::seconds(5));
  auto c = supervisor::resolve_model_spec("claude", cfg);
  CHECK(c.type == "anthropic");
  CHECK(c.base_url == "https://api.anthropic.com");
  CHECK_FALSE(c.thinking);
}

TEST_CASE("built-in openai: and anthropic: specs") {
  Env base("OPENAI_BASE_URL", nullptr), abase("ANTHROPIC_BASE_URL", nullptr);
  supervisor::ModelConfig none;
  auto o = supervisor::resolve_model_spec("openai:gpt-4.1", none);
  CHECK(o.base_url == "https://api.openai.com/v1");
  CHECK(o.model == "gpt-4.1");
  CHECK(o.api_key_env == "OPENAI_API_KEY");
  CHECK(o.api_key_required);
  auto a = supervisor::resolve_model_spec("anthropic:claude-sonnet-4-5", none);
  CHECK(a.base_url == "https://api.anthropic.com");
  CHECK(a.api_key_env == "ANTHROPIC_API_KEY");
  {
    Env local("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1");
    auto l = supervisor::resolve_model_spec("openai:llama3.2", none);
    CHECK(l.base_url == "http://127.0.0.1:11434/v1");
    CHECK_FALSE(l.api_key_required);
  }
  CHECK(error_of([&] { supervisor::resolve_model_spec("openai", none); }).find("names no model") != std::string::npos);
  CHECK(error_of([&] { supervisor::resolve_model_spec("mystery:x", none); }).find("unknown model spec 'mystery:x'") !=
        std::string::npos);
}

TEST_CASE("a missing key names the variable, never a value; a present key never shows in describe()") {
  auto cfg = supervisor::parse_model_config(kConfig, "models.json");
  boost::asio::io_context io;
  {
    Env k("SUBAGENT_TEST_KEY", nullptr);
    auto e = error_of([&] { supervisor::validate_model_spec("keyed", cfg); });
    CHECK(e.find("set the environment variable SUBAGENT_TEST_KEY") != std::string::npos);
    CHECK_FALSE(error_of([&] { supervisor::make_provider("keyed", io, cfg); }).empty());
  }
  {
    Env k("SUBAGENT_TEST_KEY", "sk-very-secret-value");
    CHECK(error_of([&] { supervisor::validate_model_spec("keyed", cfg); }).empty());
    auto p = supervisor::make_provider("keyed", io, cfg);
    CHECK(p->describe().find("sk-very-secret-value") == std::string::npos);
    CHECK(p->describe().find("keyed:m") != std::string::npos);
  }
  Env k("OPENAI_API_KEY", nullptr), b("OPENAI_BASE_URL", nullptr);
  CHECK(error_of([&] {
          supervisor::validate_model_spec("openai:gpt-4.1", supervisor::ModelConfig{});
        }).find("OPENAI_API_KEY") != std::string::npos);
  CHECK(error_of([&] { supervisor::validate_model_spec("local", cfg); }).empty());
}

TEST_CASE("bad config files name the provider and the field") {
  auto err = [](const char* text) {
    return error_of([&] { supervisor::parse_model_config(json::parse(text), "models.json"); });
  };
  CHECK(err(R"({"providers": {"x": {"type": "gemini"}}})").find("providers.x.type must be") != std::string::npos);
  CHECK(err(R"({"providers": {"x": {"type": "openai", "api_key": "sk-123"}}})").find("must not hold keys") !=
        std::string::npos);
  CHECK(err(R"({"providers": {"x": {"type": "openai", "api_key": "sk-123"}}})").find("sk-123") == std::string::npos);
  CHECK(err(R"({"providers": {"x": {"type": "openai", "base_url": "http://u:p@h/v1"}}})").find("credentials") !=
        std::string::npos);
  CHECK(err(R"({"providers": {"x": {"type": "openai", "max_retries": -1}}})").find("providers.x.max_retries") !=
        std::string::npos);
  CHECK(err(R"({"providers": {"x": {"type": "openai", "colour": 1}}})").find("colour is not a known field") !=
        std::string::npos);
  CHECK(err(R"({"providers": {"x": {"type": "openai", "api_key_env": "sk-abc-123"}}})")
            .find("must name an environment variable") != std::string::npos);
  CHECK(err(R"({"providers": {"a:b": {"type": "openai"}}})").find("not allowed") != std::string::npos);
}

TEST_CASE("the config file is found through SUBAGENT_MODEL_CONFIG, then XDG_CONFIG_HOME") {
  test::TempDir dir;
  std::string path = dir.write("m.json", kConfig.dump());
  {
    Env e("SUBAGENT_MODEL_CONFIG", path.c_str());
    auto cfg = supervisor::load_model_config();
    CHECK(cfg.source == path);
    CHECK(cfg.providers.count("local") == 1);
    CHECK(error_of([] { supervisor::validate_model_spec("local"); }).empty());
  }
  {
    Env e("SUBAGENT_MODEL_CONFIG", (dir.path() / "missing.json").c_str());
    CHECK(error_of([] { supervisor::load_model_config(); }).find("cannot be read") != std::string::npos);
  }
  {
    Env e("SUBAGENT_MODEL_CONFIG", nullptr);
    dir.write("xdg/subagent-supervisor/models.json", "// comments are allowed\n" + kConfig.dump());
    Env x("XDG_CONFIG_HOME", (dir.path() / "xdg").c_str());
    CHECK(supervisor::load_model_config().providers.size() == 3);
  }
  {
    Env e("SUBAGENT_MODEL_CONFIG", nullptr);
    Env x("XDG_CONFIG_HOME", (dir.path() / "nothing").c_str());
    CHECK(supervisor::load_model_config().providers.empty());
    CHECK(supervisor::model_config_path() == std::nullopt);
  }
}

TEST_CASE("replay: specs still work through make_provider") {
  boost::asio::io_context io;
  std::string script = test::source("examples/explore-demo.jsonl").string();
  CHECK(error_of([&] { supervisor::validate_model_spec("replay:" + script); }).empty());
  auto p = supervisor::make_provider("replay:" + script, io);
  CHECK(p->describe() == "replay:" + script);
  CHECK(error_of([] { supervisor::validate_model_spec("replay:/nonexistent"); }).find("cannot be read") !=
        std::string::npos);
}
