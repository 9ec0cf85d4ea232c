// Policy files (policies/*.json, JSON with comments) as a careless author writes them: the text is
// parsed the way read_jsonc_file does, then through parse_preset (which runs sandbox::parse_policy on
// the "sandbox" section) and, directly, sandbox::parse_policy. A preset that loads is then asked for
// decisions on tool arguments taken from the rest of the input (after the first NUL byte).
//
// Properties: only PresetError / PolicyError are thrown, with a message that names the file; every
// "..._seconds" budget comes back as exactly that many milliseconds or is refused, never wrapped.
#include <string>

#include "fuzz_util.hpp"
#include "protocol/messages.hpp"
#include "sandbox/policy.hpp"
#include "policy/decide.hpp"
#include "policy/preset.hpp"

namespace {

using nlohmann::json;

void check_seconds(const json& obj, const char* key, std::uint64_t ms) {
  auto it = obj.find(key);
  if (it != obj.end() && it->is_number_unsigned()) FUZZ_CHECK(ms / 1000 == it->get<std::uint64_t>());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view args_text = nul == std::string_view::npos ? std::string_view{} : all.substr(nul + 1);

  if (!protocol::nesting_within(text)) return 0;
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (doc.is_discarded()) return 0;

  if (doc.is_object() && doc.contains("sandbox")) {
    try {
      sandbox::parse_policy(doc["sandbox"], "fuzz.json");
    } catch (const sandbox::PolicyError& e) {
      FUZZ_CHECK(std::string_view(e.what()).starts_with("policy fuzz.json: "));
    }
  }

  supervisor::Preset p;
  try {
    p = supervisor::parse_preset(doc, "/policies/fuzz.json", "digest");
  } catch (const supervisor::PresetError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("policy fuzz.json: "));
    return 0;
  }
  check_seconds(doc["budgets"], "timeout_seconds", p.budgets.timeout_ms);
  check_seconds(doc["budgets"], "wrap_up_grace_seconds", p.budgets.wrap_up_grace_ms);
  if (doc.contains("web")) check_seconds(doc["web"], "fetch_timeout_seconds", p.web.fetch_timeout_ms);

  json args = protocol::nesting_within(args_text) ? json::parse(args_text, nullptr, false) : json();
  if (args.is_discarded()) args = json::object();
  for (const auto& tool : supervisor::offered_tools(p)) {
    std::string why;
    supervisor::decide(p, tool, args, why);
  }
  std::string why;
  supervisor::decide(p, "no_such_tool", args, why);
  return 0;
}
