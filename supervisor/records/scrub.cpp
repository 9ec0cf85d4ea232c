// Secret scrubbing: one combined RE2 finds candidates, the component that matched decides the label and
// the span that is replaced. See records/scrub.hpp for what is redacted.
#include "records/scrub.hpp"

#include <re2/re2.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <stdexcept>

namespace supervisor {

namespace {

// A token character class shared by the header-style patterns.
#define TOK "[A-Za-z0-9._~+/=\\-]"

enum class Check {
  none,       // every match is a secret
  has_digit,  // the secret part must hold a digit or a scheme ("Bearer authentication_required" is prose)
};

struct Component {
  const char* label;
  const char* pattern;  // group 1, when present, is the part replaced; otherwise the whole match
  Check check = Check::none;
};

// Order matters: at one position the first component that matches wins (leftmost-first), so the more
// specific prefixes come before the general ones.
const Component kComponents[] = {
    {"private_key",
     R"(-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:(?s:.)*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|(?s:.)*))"},
    {"anthropic_key", R"(\bsk-ant-[A-Za-z0-9_\-]{20,})"},
    {"openai_key", R"(\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,})"},
    {"xai_key", R"(\bxai-[A-Za-z0-9_\-]{20,})"},
    {"groq_key", R"(\bgsk_[A-Za-z0-9]{20,})"},
    {"huggingface_token", R"(\bhf_[A-Za-z0-9]{20,})"},
    {"google_api_key", R"(\bAIza[0-9A-Za-z_\-]{35})"},
    {"perplexity_key", R"(\bpplx-[A-Za-z0-9]{20,})"},
    {"replicate_token", R"(\br8_[A-Za-z0-9]{20,})"},
    {"stripe_key", R"(\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,})"},
    {"github_token", R"(\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}))"},
    {"gitlab_token", R"(\bglpat-[A-Za-z0-9_\-]{20,})"},
    {"npm_token", R"(\bnpm_[A-Za-z0-9]{30,})"},
    {"slack_token", R"(\bxox[abeprs]-[A-Za-z0-9\-]{10,})"},
    {"aws_access_key_id", R"(\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b)"},
    {"jwt", R"(\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"},
    {"aws_secret_key",
     R"((?i:\b(?:aws_?)?secret_?access_?key|\baws_?secret_?key|\baws_?session_?token|\bsessiontoken)["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{16,}))"},
    {"authorization",
     R"((?i:\b(?:proxy-)?authorization)["']?\s*[:=]\s*["']?((?:(?i:bearer|basic|token|bot|digest|negotiate)\s+)?)" TOK
     R"({8,}))",
     Check::has_digit},
    {"api_key",
     R"((?i:\b(?:x-api-key|x-goog-api-key|api-key|api_key|apikey|x-auth-token|x-subscription-token))["']?\s*[:=]\s*["']?()" TOK
     R"({8,}))",
     Check::has_digit},
    {"bearer_token", R"((?i:\bbearer)\s+()" TOK R"({16,}))", Check::has_digit},
    {"labelled_secret",
     R"((?i:\b(?:password|passwd|client_secret|secret_key|private_key|access_token|refresh_token|auth_token|api_token))["']?\s*[:=]\s*["']?([^\s"',;]{8,}))",
     Check::has_digit},
};

#undef TOK

RE2::Options re_options() {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingLatin1);  // byte-wise: invalid UTF-8 never stops a match
  o.set_log_errors(false);
  o.set_max_mem(64 << 20);
  return o;
}

// A credential holds a digit, or follows an explicit scheme ("Basic dXNlcjpwYXNz" may have no digit).
bool has_digit(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == ' ' || c == '\t'; });
}

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

// JSON keys whose string values are credentials whatever they look like. Stricter than the environment
// rule: "input_tokens" or "keywords" are ordinary keys.
bool secret_key_name(std::string_view key) {
  std::string k;
  for (char c : key)
    if (c != '-' && c != '_' && c != ' ') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* const exact[] = {"authorization", "proxyauthorization", "xapikey", "apikey", "xgoogapikey",
                                      "token",         "xauthtoken",         "bearer"};
  for (const char* e : exact)
    if (k == e) return true;
  static const char* const parts[] = {"secret", "password", "passwd", "credential"};
  for (const char* p : parts)
    if (k.find(p) != std::string::npos) return true;
  static const char* const suffixes[] = {"accesstoken",  "refreshtoken", "authtoken", "apitoken",   "idtoken",
                                         "sessiontoken", "apikey",       "accesskey", "privatekey", "secretkey"};
  for (const char* s : suffixes) {
    std::string_view sv(s);
    if (k.size() >= sv.size() && k.compare(k.size() - sv.size(), sv.size(), sv) == 0) return true;
  }
  return false;
}

// Whether the value of a secret-looking environment variable is worth redacting everywhere: short
// words ("disabled", "production"), small numbers and absolute paths ("SSH_KEY_PATH=/home/...") are
// settings, and redacting them would blank ordinary text all over the transcripts.
bool plausible_secret_value(std::string_view v, std::size_t min) {
  if (v.size() < std::max<std::size_t>(min, 1)) return false;
  if (v.front() == '/' || v.rfind("~/", 0) == 0) return false;
  if (v.size() < 16) {
    const bool word =
        std::all_of(v.begin(), v.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '-' || c == '_'; });
    const bool number = std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (word || number) return false;
  }
  return true;
}

}  // namespace

bool secret_looking_name(std::string_view name) noexcept {
  try {
    std::string u = upper(name);
    for (const char* p : {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"})
      if (u.find(p) != std::string::npos) return true;
  } catch (...) {
  }
  return false;
}

struct Scrubber::Impl {
  struct Literal {
    std::string value;
    std::string label;
  };
  std::vector<Literal> literals;  // longest first
  std::vector<std::unique_ptr<RE2>> components;
  std::unique_ptr<RE2> combined;
  std::vector<std::string> env_names;

  struct Hit {
    bool ok = false;
    const std::string* label = nullptr;
    std::size_t begin = 0, end = 0;  // the span replaced
  };

  explicit Impl(const ScrubOptions& o) {
    std::map<std::string, std::string> values;  // value -> label; the first label wins
    if (o.from_environment) {
      char** env = o.envp ? o.envp : ::environ;
      for (char** p = env; p && *p; ++p) {
        std::string_view kv(*p);
        auto eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        std::string_view name = kv.substr(0, eq), value = kv.substr(eq + 1);
        if (!secret_looking_name(name) || !plausible_secret_value(value, o.min_env_value)) continue;
        values.emplace(std::string(value), "env:" + std::string(name));
        env_names.emplace_back(name);
      }
    }
    for (const auto& l : o.literals)
      if (!l.empty()) values.emplace(l, "operator_value");
    for (auto& [v, label] : values) literals.push_back({v, label});
    std::stable_sort(literals.begin(), literals.end(),
                     [](const Literal& a, const Literal& b) { return a.value.size() > b.value.size(); });

    std::string all;
    for (const auto& l : literals) all += (all.empty() ? "" : "|") + RE2::QuoteMeta(l.value);
    for (const auto& c : kComponents) {
      auto re = std::make_unique<RE2>(c.pattern, re_options());
      if (!re->ok()) throw std::logic_error(std::string("scrubber pattern ") + c.label + ": " + re->error());
      components.push_back(std::move(re));
      all += (all.empty() ? "(?:" : "|(?:") + std::string(c.pattern) + ")";
    }
    combined = std::make_unique<RE2>(all, re_options());
    if (!combined->ok()) throw std::logic_error("scrubber: combined pattern: " + combined->error());
  }

  // Which alternative matched at [s, e) of `text`, and the span to replace.
  Hit identify(const re2::StringPiece& text, std::size_t s) const {
    Hit h;
    for (const auto& l : literals)
      if (text.size() - s >= l.value.size() && std::string_view(text.data() + s, l.value.size()) == l.value) {
        h.ok = true;
        h.label = &l.label;
        h.begin = s;
        h.end = s + l.value.size();
        return h;
      }
    for (std::size_t i = 0; i < components.size(); ++i) {
      const RE2& re = *components[i];
      re2::StringPiece groups[2];
      const int n = re.NumberOfCapturingGroups() >= 1 ? 2 : 1;
      if (!re.Match(text, s, text.size(), RE2::ANCHOR_START, groups, n)) continue;
      std::size_t begin = s, end = static_cast<std::size_t>(groups[0].data() - text.data()) + groups[0].size();
      if (n == 2 && groups[1].data() != nullptr) {
        begin = static_cast<std::size_t>(groups[1].data() - text.data());
        end = begin + groups[1].size();
      }
      if (kComponents[i].check == Check::has_digit && !has_digit(std::string_view(text.data() + begin, end - begin)))
        continue;  // prose such as "Bearer authentication_required", not a credential
      h.ok = true;
      h.label = &component_labels()[i];
      h.begin = begin;
      h.end = end;
      return h;
    }
    return h;
  }

  static const std::vector<std::string>& component_labels() {
    static const std::vector<std::string> labels = [] {
      std::vector<std::string> v;
      for (const auto& c : kComponents) v.emplace_back(c.label);
      return v;
    }();
    return labels;
  }

  // Scrubs `text`; with `out` null only reports whether there is a secret.
  bool run(std::string_view in, std::string* out) const {
    re2::StringPiece text(in.data(), in.size());
    std::size_t pos = 0, copied = 0;
    bool changed = false;
    std::string result;
    re2::StringPiece m;
    while (pos < in.size() && combined->Match(text, pos, in.size(), RE2::UNANCHORED, &m, 1)) {
      const std::size_t s = static_cast<std::size_t>(m.data() - in.data()), e = s + m.size();
      Hit h = m.empty() ? Hit{} : identify(text, s);
      if (!h.ok) {
        pos = s + 1;
        continue;
      }
      if (!out) return true;
      result.append(in.data() + copied, h.begin - copied);
      result += "[REDACTED:";
      result += *h.label;
      result += ']';
      copied = h.end;
      changed = true;
      pos = std::max(e, h.end);
    }
    if (changed && out) {
      result.append(in.data() + copied, in.size() - copied);
      *out = std::move(result);
    }
    return changed;
  }

  bool json_in_place(nlohmann::json& v) const {
    bool changed = false;
    if (v.is_string()) {
      auto& s = v.get_ref<std::string&>();
      std::string out;
      if (run(s, &out)) {
        s = std::move(out);
        changed = true;
      }
    } else if (v.is_array()) {
      for (auto& item : v) changed |= json_in_place(item);
    } else if (v.is_object()) {
      bool key_secret = false;
      for (auto it = v.begin(); it != v.end() && !key_secret; ++it) key_secret = run(it.key(), nullptr);
      if (key_secret) {
        nlohmann::json rebuilt = nlohmann::json::object();
        for (auto it = v.begin(); it != v.end(); ++it) {
          std::string k = it.key();
          run(it.key(), &k);
          rebuilt[k] = std::move(it.value());
        }
        v = std::move(rebuilt);
        changed = true;
      }
      for (auto it = v.begin(); it != v.end(); ++it) {
        auto& val = it.value();
        if (val.is_string() && secret_key_name(it.key()) && val.get_ref<const std::string&>().size() >= 8 &&
            val.get_ref<const std::string&>().rfind("[REDACTED:", 0) != 0) {
          val = "[REDACTED:" + std::string(it.key()) + "]";
          changed = true;
        } else {
          changed |= json_in_place(val);
        }
      }
    }
    return changed;
  }
};

Scrubber::Scrubber() : Scrubber(ScrubOptions{false, nullptr, 8, {}}) {}
Scrubber::Scrubber(const ScrubOptions& options) : impl_(std::make_unique<Impl>(options)) {}
Scrubber::~Scrubber() = default;
Scrubber::Scrubber(Scrubber&&) noexcept = default;
Scrubber& Scrubber::operator=(Scrubber&&) noexcept = default;

std::string Scrubber::scrub(std::string_view text) const {
  std::string out;
  if (impl_->run(text, &out)) return out;
  return std::string(text);
}

bool Scrubber::scrub_in_place(std::string& text) const {
  std::string out;
  if (!impl_->run(text, &out)) return false;
  text = std::move(out);
  return true;
}

nlohmann::json Scrubber::scrub_json(const nlohmann::json& value) const {
  nlohmann::json copy = value;
  impl_->json_in_place(copy);
  return copy;
}

bool Scrubber::scrub_in_place(nlohmann::json& value) const { return impl_->json_in_place(value); }

bool Scrubber::contains_secret(std::string_view text) const { return impl_->run(text, nullptr); }

const std::vector<std::string>& Scrubber::environment_names() const noexcept { return impl_->env_names; }

std::size_t Scrubber::literal_count() const noexcept { return impl_->literals.size(); }

std::vector<std::string> load_redact_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("redact file '" + path + "' cannot be read");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    out.push_back(line);
  }
  if (in.bad()) throw std::runtime_error("redact file '" + path + "': read error");
  return out;
}

std::shared_ptr<const Scrubber> default_scrubber() {
  static std::shared_ptr<const Scrubber> s = std::make_shared<const Scrubber>(ScrubOptions{});
  return s;
}

}  // namespace supervisor
