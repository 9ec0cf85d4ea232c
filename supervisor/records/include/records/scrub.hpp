// Secret scrubbing for everything the supervisor writes or emits: transcripts, audit lines, child log
// lines, events and envelopes. A secret is replaced by "[REDACTED:<kind>]"; the rest of the text is kept.
//
// What counts as a secret (docs/transcripts.md lists the exact patterns):
//   - provider API keys: OpenAI sk-/sk-proj-, Anthropic sk-ant-, xai-, gsk_, hf_, AIza, pplx-, r8_ ...
//   - Authorization / Proxy-Authorization / x-api-key style header values and "Bearer <token>"
//   - AWS access key ids (AKIA/ASIA/...) and labelled AWS secret keys and session tokens
//   - GitHub (ghp_ gho_ ghu_ ghs_ ghr_ github_pat_) and Slack (xox[baprs]-) tokens, JWTs
//   - private key blocks (-----BEGIN ... PRIVATE KEY----- ... END, or to the end of a cut-off text)
//   - in JSON, string values under keys that name a credential (authorization, x-api-key, *secret*,
//     *password*, *access_token* ...)
//   - the values of this process's environment variables whose names look secret (*KEY*, *TOKEN*,
//     *SECRET*, *PASSWORD*, *PASSWD*, *CREDENTIAL*), at least `min_env_value` bytes long, except
//     values that are settings rather than secrets: absolute paths, and lowercase words or numbers
//     under 16 bytes ("disabled", "production", "100000000")
//   - any literal value the operator lists
// A secret inside a longer string is found; a secret split across two JSON strings is not.
//
// One combined RE2 (patterns and escaped literals, Latin-1 so invalid UTF-8 never hides a match) finds
// the candidates in a single DFA pass; only a hit pays for working out which kind it was.
//
// Thread-safety: a constructed Scrubber is immutable; its const methods may be called from any thread.
//
// Errors: building a scrubber from a file throws std::runtime_error naming it; scrubbing never throws.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace supervisor {

struct ScrubOptions {
  // Take the values of secret-looking environment variables from `envp` (nullptr: this process's).
  bool from_environment = true;
  char** envp = nullptr;
  // Shorter environment values are not treated as secrets (so "1" or "true" is not redacted everywhere).
  std::size_t min_env_value = 8;
  // Values the operator wants redacted wherever they appear (empty strings are ignored).
  std::vector<std::string> literals;
};

// What a record is handed: a value its Scrubber has already scrubbed whole (the record then only
// cuts it, and never scrubs the same text twice), or one it must scrub first.
enum class Scrubbed { no, yes };

class Scrubber {
 public:
  // Built-in patterns only: no environment values, no literals.
  Scrubber();
  explicit Scrubber(const ScrubOptions& options);
  ~Scrubber();
  Scrubber(Scrubber&&) noexcept;
  Scrubber& operator=(Scrubber&&) noexcept;

  // `text` with every secret replaced.
  std::string scrub(std::string_view text) const;
  // Replaces in place; returns whether anything was redacted.
  bool scrub_in_place(std::string& text) const;
  // Scrubs every string in `value`, object keys included.
  nlohmann::json scrub_json(const nlohmann::json& value) const;
  bool scrub_in_place(nlohmann::json& value) const;
  // Whether `text` holds anything scrub() would redact.
  bool contains_secret(std::string_view text) const;

  // Names of the environment variables whose values are redacted (never the values).
  const std::vector<std::string>& environment_names() const noexcept;
  std::size_t literal_count() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether an environment variable or JSON key named `name` looks like it holds a secret.
bool secret_looking_name(std::string_view name) noexcept;

// Reads operator-listed values, one per line (a trailing '\r' is dropped, empty lines and lines starting
// with '#' are skipped). Throws std::runtime_error naming the file when it cannot be read.
std::vector<std::string> load_redact_file(const std::string& path);

// A shared, process-wide default: built-in patterns plus this process's secret-looking environment,
// built on first use. For code that has no Scrubber handed to it.
std::shared_ptr<const Scrubber> default_scrubber();

}  // namespace supervisor
