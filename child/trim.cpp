#include "child/trim.hpp"

#include <map>
#include <stdexcept>

namespace child {

using nlohmann::json;

std::string trim_stub(const std::string& tool, std::size_t result_bytes) {
  return "[trimmed " + std::to_string(result_bytes) + " bytes: repeat this " + tool + " call]";
}

std::size_t Trimmer::trim(json& messages) {
  if (!o_.enabled || !messages.is_array()) return 0;
  // Tool turns: assistant messages with tool calls, in order; each result names its call's id.
  std::map<std::string, std::pair<std::size_t, std::size_t>> call;  // call id -> (turn, message index)
  std::size_t turns = 0;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    auto tc = m.find("tool_calls");
    if (tc == m.end() || !tc->is_array() || tc->empty()) continue;
    for (const auto& c : *tc)
      if (c.is_object()) call[c.value("id", "")] = {turns, i};
    ++turns;
  }
  // The boundary moves only when it can move a whole block, and then up to the newest keep_turns:
  // the part after it, written to the cache again, is never more than those turns and the stubs.
  if (turns <= o_.keep_turns) return 0;
  const std::size_t block = o_.block ? o_.block : 1;
  const std::size_t want = turns - o_.keep_turns;
  if (want < boundary_ + block) return 0;
  // The threshold starts trimming; from then on it goes on every turn (a history trimmed back under
  // the threshold would otherwise grow whole results again until the next pass, each read again from
  // the cache on every request in between).
  if (!started_) {
    if (messages.dump().size() <= o_.threshold_bytes) return 0;
    started_ = true;
  }
  std::size_t replaced = 0;
  for (auto& m : messages) {
    if (!m.is_object() || m.value("role", "") != "tool") continue;
    auto it = call.find(m.value("tool_call_id", ""));
    if (it == call.end() || it->second.first >= want) continue;
    const json* content = m.contains("content") ? &m["content"] : nullptr;
    if (!content || !content->is_string()) continue;
    const std::string& text = content->get_ref<const std::string&>();
    if (text.size() < o_.min_result_bytes || text.rfind("[trimmed", 0) == 0) continue;
    std::string tool = m.value("name", "tool");
    for (const auto& c : messages[it->second.second]["tool_calls"])
      if (c.value("id", "") == m.value("tool_call_id", "")) tool = c.value("name", tool);
    m["content"] = trim_stub(tool, text.size());
    ++replaced;
  }
  boundary_ = want;
  return replaced;
}

TrimOptions parse_trim_flags(const std::vector<std::string>& args) {
  TrimOptions o;
  auto number = [](const std::string& flag, const std::string& v) {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12)
      throw std::invalid_argument(flag + " takes a whole number, not '" + v + "'");
    return static_cast<std::size_t>(std::stoull(v));
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw std::invalid_argument(f + " needs a value");
      return args[++i];
    };
    if (f == "--no-trim")
      o.enabled = false;
    else if (f == "--trim-threshold-bytes")
      o.threshold_bytes = number(f, value());
    else if (f == "--trim-keep-turns") {
      o.keep_turns = number(f, value());
      // 0 would stub a result before the model saw it.
      if (o.keep_turns == 0) throw std::invalid_argument("--trim-keep-turns must be at least 1");
    } else if (f == "--trim-block") {
      o.block = number(f, value());
      if (o.block == 0) throw std::invalid_argument("--trim-block must be at least 1");
    } else {
      throw std::invalid_argument("unknown option '" + f + "' (see subagent-child --help)");
    }
  }
  return o;
}

}  // namespace child
