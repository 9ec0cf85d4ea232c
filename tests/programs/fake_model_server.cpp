// A loopback HTTP/1.1 server speaking the real wire formats, for the provider and web tool tests.
// Listens on two ephemeral ports of 127.0.0.1 and prints "PORT1 PORT2\n"; exits when stdin closes
// (so it never outlives its test). Behaviour is chosen by the path:
//   /s/<scenario>/<token>/...  model endpoints (.../chat/completions or .../messages); <token> keeps
//                              per-test state (attempt counters) apart
//   /inspect/<token>           JSON array of the requests received for <token>: {path, headers, body,
//                              tools_offered} (tools_offered: the tool names the request offered)
//   /script/<token>            POST a JSON array of turns for the "script" scenario: turn N answers
//                              the Nth model request of <token>, {content, tool_calls: [{name,
//                              arguments}]}; past the end the model answers with a short report
//   /web/...                   pages for web_fetch / web_search (see web())
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <tuple>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;

namespace {

std::mutex mu;
std::map<std::string, json> seen;                 // token -> requests
std::map<std::string, int> attempts;              // token -> count
std::map<std::string, json> scripts;              // token -> turns (the "script" scenario)
std::map<std::string, std::pair<int, int>> held;  // token -> /web/slow requests held now, and the most at once
int port2 = 0;

struct Req {
  std::string method, path, query, body;
  std::map<std::string, std::string> headers;
};

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

bool read_request(int fd, std::string& buf, Req& r) {
  size_t end;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    char tmp[65536];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(tmp, size_t(n));
  }
  std::string head = buf.substr(0, end);
  buf.erase(0, end + 4);
  size_t line_end = head.find("\r\n");
  std::string first = head.substr(0, line_end);
  auto sp1 = first.find(' '), sp2 = first.rfind(' ');
  r.method = first.substr(0, sp1);
  std::string target = first.substr(sp1 + 1, sp2 - sp1 - 1);
  auto q = target.find('?');
  r.path = target.substr(0, q);
  r.query = q == std::string::npos ? "" : target.substr(q + 1);
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string::npos) e = head.size();
    std::string h = head.substr(pos, e - pos);
    auto c = h.find(':');
    if (c != std::string::npos) {
      std::string name = h.substr(0, c);
      for (auto& ch : name) ch = char(std::tolower(ch));
      std::string v = h.substr(c + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      r.headers[name] = v;
    }
    pos = e + 2;
  }
  size_t len = r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
  while (buf.size() < len) {
    char tmp[65536];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(tmp, size_t(n));
  }
  r.body = buf.substr(0, len);
  buf.erase(0, len);
  return true;
}

std::string response(int status, const std::string& type, const std::string& body,
                     const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// An SSE response sent as one chunk per event (chunked transfer encoding), as servers do.
struct Sse {
  int fd;
  bool ok = true;
  explicit Sse(int f) : fd(f) {
    ok = write_all(fd,
                   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n");
  }
  void raw(const std::string& s) {
    if (!ok) return;
    char hex[32];
    std::snprintf(hex, sizeof hex, "%zx\r\n", s.size());
    ok = write_all(fd, hex + s + "\r\n");
  }
  void data(const json& j) { raw("data: " + j.dump() + "\n\n"); }
  void event(const std::string& type, const json& j) { raw("event: " + type + "\ndata: " + j.dump() + "\n\n"); }
  void end() {
    if (ok) ok = write_all(fd, "0\r\n\r\n");
  }
};

json chunk(const json& delta, const json& finish = nullptr) {
  return {{"id", "chatcmpl-1"},
          {"object", "chat.completion.chunk"},
          {"model", "fake"},
          {"choices", json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
}

void openai_text(Sse& s, const std::string& text, const std::string& finish, int prompt = 11) {
  s.data(chunk({{"role", "assistant"}, {"content", ""}}));
  int n = 0;
  for (size_t i = 0; i < text.size(); i += 5, ++n) s.data(chunk({{"content", text.substr(i, 5)}}));
  s.data(chunk(json::object(), finish));
  s.data({{"id", "chatcmpl-1"},
          {"choices", json::array()},
          {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", n}, {"total_tokens", prompt + n}}}});
  s.raw("data: [DONE]\n\n");
  s.end();
}

void openai_tools(Sse& s) {
  s.data(chunk({{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "Let me think."}}));
  s.data(chunk({{"content", "Looking."}}));
  s.data(chunk({{"tool_calls",
                 {{{"index", 0},
                   {"id", "call_a"},
                   {"type", "function"},
                   {"function", {{"name", "list_dir"}, {"arguments", ""}}}}}}}));
  s.data(chunk({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{\"pa"}}}}}}}));
  s.data(chunk({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "th\": \"src\"}"}}}}}}}));
  s.data(chunk({{"tool_calls",
                 {{{"index", 1},
                   {"id", "call_b"},
                   {"type", "function"},
                   {"function", {{"name", "grep"}, {"arguments", "{\"pattern\":\"x\"}"}}}}}}}));
  s.data(chunk(json::object(), "tool_calls"));
  s.data({{"choices", json::array()},
          {"usage",
           {{"prompt_tokens", 120},
            {"completion_tokens", 30},
            {"completion_tokens_details", {{"reasoning_tokens", 4}}}}}});
  s.raw("data: [DONE]\n\n");
  s.end();
}

void anthropic_message(Sse& s, bool tool, const std::string& text = "Here is the answer.") {
  s.event("message_start",
          {{"type", "message_start"},
           {"message",
            {{"id", "msg_1"},
             {"type", "message"},
             {"role", "assistant"},
             {"content", json::array()},
             {"model", "fake"},
             {"usage", {{"input_tokens", 200}, {"cache_read_input_tokens", 50}, {"output_tokens", 1}}}}}});
  s.event("ping", {{"type", "ping"}});
  int idx = 0;
  if (tool) {
    s.event(
        "content_block_start",
        {{"type", "content_block_start"}, {"index", idx}, {"content_block", {{"type", "thinking"}, {"thinking", ""}}}});
    s.event("content_block_delta", {{"type", "content_block_delta"},
                                    {"index", idx},
                                    {"delta", {{"type", "thinking_delta"}, {"thinking", "I should list the dir."}}}});
    s.event("content_block_delta", {{"type", "content_block_delta"},
                                    {"index", idx},
                                    {"delta", {{"type", "signature_delta"}, {"signature", "SIG123"}}}});
    s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", idx}});
    ++idx;
  }
  s.event("content_block_start",
          {{"type", "content_block_start"}, {"index", idx}, {"content_block", {{"type", "text"}, {"text", ""}}}});
  for (size_t i = 0; i < text.size(); i += 6)
    s.event("content_block_delta", {{"type", "content_block_delta"},
                                    {"index", idx},
                                    {"delta", {{"type", "text_delta"}, {"text", text.substr(i, 6)}}}});
  s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", idx}});
  ++idx;
  if (tool) {
    s.event("content_block_start",
            {{"type", "content_block_start"},
             {"index", idx},
             {"content_block",
              {{"type", "tool_use"}, {"id", "toolu_01"}, {"name", "list_dir"}, {"input", json::object()}}}});
    s.event("content_block_delta", {{"type", "content_block_delta"},
                                    {"index", idx},
                                    {"delta", {{"type", "input_json_delta"}, {"partial_json", "{\"path\": "}}}});
    s.event("content_block_delta", {{"type", "content_block_delta"},
                                    {"index", idx},
                                    {"delta", {{"type", "input_json_delta"}, {"partial_json", "\".\"}"}}}});
    s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", idx}});
  }
  s.event("message_delta", {{"type", "message_delta"},
                            {"delta", {{"stop_reason", tool ? "tool_use" : "end_turn"}, {"stop_sequence", nullptr}}},
                            {"usage", {{"output_tokens", 42}}}});
  s.event("message_stop", {{"type", "message_stop"}});
  s.end();
}

bool has_tool_result(const json& body) {
  for (const auto& m : body.value("messages", json::array())) {
    if (m.value("role", "") == "tool") return true;
    if (m.contains("content") && m["content"].is_array())
      for (const auto& b : m["content"])
        if (b.is_object() && b.value("type", "") == "tool_result") return true;
  }
  return false;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// ---- the scripted loop: /s/loop:<steps>:<bytes per token>:<thinking per call>[:fill]/<token>/... --
// With ":fill" the answering turn (no tool call) is as long as the request allows: max_tokens
// one-token deltas, ended by the token cap (the worst case for a budget: every output token it may).
// With ":dense" (or ":fill+dense") tool results count a token a byte whatever <bytes per token> is,
// as dense data (numbers, hashes, non-Latin text) does.
// A read-only explore session: until the history holds <steps> tool results the model calls read_file
// on the next 60-line window of a file of this repository (run it with the repository as workspace),
// then answers. Usage is computed from the request as a server would: input tokens are the request's
// bytes (tools, system, messages, cache_control markers left out) at <bytes per token>, and prompt
// caching is simulated the way each API documents it (OpenAI: the longest prefix shared with an earlier
// request, in 128-token steps from 1,024; Anthropic: only at cache_control breakpoints, read where an
// earlier request wrote the same prefix, written up to the last breakpoint).
const char* const kLoopFiles[] = {"supervisor/session/session.cpp",
                                  "supervisor/scheduling/hub.cpp",
                                  "supervisor/net/http_client.cpp",
                                  "supervisor/records/transcript.cpp",
                                  "supervisor/web/web_tools.cpp",
                                  "sandbox/launch.cpp",
                                  "child/tools/grep.cpp",
                                  "supervisor/cli/mcp.cpp",
                                  "protocol/messages.cpp",
                                  "supervisor/models/provider_stream.cpp",
                                  "supervisor/frontends/mcp.cpp",
                                  "supervisor/policy/preset.cpp",
                                  "supervisor/records/scrub.cpp",
                                  "child/tools/common.cpp",
                                  "supervisor/cli/run.cpp",
                                  "child/tools/read_tools.cpp",
                                  "supervisor/workspace/patch.cpp",
                                  "child/tools/process.cpp",
                                  "supervisor/models/model_config.cpp",
                                  "supervisor/cli/policy.cpp"};

struct Loop {
  int steps = 40;
  double bpt = 4;
  long think = 0;
  bool fill = false, dense = false;
};

Loop parse_loop(const std::string& scenario) {
  Loop l;
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= scenario.size()) {
    size_t c = scenario.find(':', pos);
    parts.push_back(scenario.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (parts.size() > 1) l.steps = std::stoi(parts[1]);
  if (parts.size() > 2) l.bpt = std::stod(parts[2]);
  if (parts.size() > 3) l.think = std::stol(parts[3]);
  if (parts.size() > 4) {
    l.fill = parts[4].find("fill") != std::string::npos;
    l.dense = parts[4].find("dense") != std::string::npos;
  }
  return l;
}

void strip_cache_control(json& j) {
  if (j.is_object()) j.erase("cache_control");
  if (j.is_object() || j.is_array())
    for (auto& v : j) strip_cache_control(v);
}

std::map<std::string, std::vector<std::string>> openai_prefixes;     // cache key -> earlier requests
std::map<std::string, std::map<std::string, bool>> anthropic_cache;  // token -> prefixes written

long tokens_of(size_t bytes, double bpt) { return long((double(bytes) + bpt - 1) / bpt); }

// Input usage of an OpenAI request: {prompt_tokens, cached_tokens}.
std::pair<long, long> openai_input(const json& body, const std::string& token, double bpt, bool dense) {
  const json& b = body;
  std::string text = b.value("tools", json::array()).dump();
  size_t result_bytes = 0;
  for (const auto& m : b.value("messages", json::array())) {
    text += m.dump();
    if (dense && m.value("role", "") == "tool") result_bytes += m.dump().size();
  }
  const long total = tokens_of(text.size() - result_bytes, bpt) + long(result_bytes);
  std::lock_guard lk(mu);
  const std::string key = token + "|" + b.value("prompt_cache_key", std::string());
  size_t best = 0;
  for (const auto& prev : openai_prefixes[key]) {
    size_t n = 0;
    while (n < prev.size() && n < text.size() && prev[n] == text[n]) ++n;
    best = std::max(best, n);
  }
  openai_prefixes[key].push_back(text);
  long cached = long(double(best) / bpt);
  cached = cached >= 1024 ? cached / 128 * 128 : 0;
  return {total, std::min(cached, total)};
}

// Input usage of an Anthropic request: {uncached input, cache writes, cache reads}.
std::tuple<long, long, long> anthropic_input(const json& body, const std::string& token, double bpt, bool dense) {
  std::vector<std::pair<std::string, bool>> blocks;  // serialized block (markers stripped), breakpoint?
  auto add = [&](json block) {
    const bool bp = block.is_object() && block.contains("cache_control");
    strip_cache_control(block);
    blocks.push_back({block.dump(), bp});
  };
  for (const auto& t : body.value("tools", json::array())) add(t);
  if (body.contains("system")) {
    if (body["system"].is_string())
      add(json{{"type", "text"}, {"text", body["system"]}});
    else
      for (const auto& b : body["system"]) add(b);
  }
  for (const auto& m : body.value("messages", json::array())) {
    add(json{{"role", m.value("role", "")}});
    if (m["content"].is_string())
      add(json{{"type", "text"}, {"text", m["content"]}});
    else
      for (const auto& b : m["content"]) add(b);
  }
  size_t result_bytes = 0;
  if (dense)
    for (const auto& m : body.value("messages", json::array()))
      if (m["content"].is_array())
        for (const auto& b : m["content"])
          if (b.is_object() && b.value("type", "") == "tool_result") {
            json c = b;
            strip_cache_control(c);
            result_bytes += c.dump().size();
          }
  std::string prefix;
  size_t read_bytes = 0, write_end = 0;
  std::vector<std::string> written;
  std::lock_guard lk(mu);
  auto& cache = anthropic_cache[token];
  for (const auto& [text, bp] : blocks) {
    prefix += text;
    if (!bp) continue;
    if (long(double(prefix.size()) / bpt) < 1024) continue;  // under the minimum cacheable length
    if (cache.count(prefix))
      read_bytes = prefix.size();
    else
      written.push_back(prefix);
    write_end = prefix.size();
  }
  for (auto& w : written) cache[w] = true;
  const long total = tokens_of(prefix.size() - result_bytes, bpt) + long(result_bytes);
  const long from_cache = long(double(read_bytes) / bpt);
  const long to_cache = write_end > read_bytes ? long(double(write_end - read_bytes) / bpt) : 0;
  return {std::max(0L, total - from_cache - to_cache), to_cache, from_cache};
}

size_t tool_results(const json& body) {
  size_t n = 0;
  for (const auto& m : body.value("messages", json::array())) {
    if (m.value("role", "") == "tool") ++n;
    if (m.contains("content") && m["content"].is_array())
      for (const auto& b : m["content"])
        if (b.is_object() && b.value("type", "") == "tool_result") ++n;
  }
  return n;
}

bool loop(int fd, const json& body, const std::string& scenario, const std::string& token, bool anthropic) {
  const Loop l = parse_loop(scenario);
  const size_t k = tool_results(body);
  const bool has_tools = body.contains("tools") && !body["tools"].empty();
  const bool call = has_tools && k < size_t(l.steps);
  const size_t nfiles = sizeof kLoopFiles / sizeof *kLoopFiles;
  const json args = {
      {"path", kLoopFiles[k % nfiles]}, {"start_line", 1 + 60 * (k / nfiles)}, {"end_line", 60 * (k / nfiles + 1)}};
  const std::string text = call ? "Reading the next file."
                                : "## Summary\nExplored " + std::to_string(k) +
                                      " file windows of the repository.\n## What I did or found\n"
                                      "Read the session, hub, HTTP and protocol code.\n## Evidence\n- "
                                      "supervisor/session/session.cpp:1 - the session\n";
  const std::string args_text = args.dump();
  const long visible = tokens_of(text.size() + (call ? args_text.size() + 9 : 0), 4);
  const bool fill = l.fill && !call;
  Sse s(fd);
  if (anthropic) {
    long budget = 0;
    if (auto t = body.find("thinking"); t != body.end() && t->is_object() && t->value("type", "") == "enabled")
      budget = t->value("budget_tokens", 0L);
    const long thinking = std::min(budget, l.think);
    const long max_tokens = body.value("max_tokens", 0L);
    auto [in, cache_write, cache_read] = anthropic_input(body, token, l.bpt, l.dense);
    s.event("message_start", {{"type", "message_start"},
                              {"message",
                               {{"id", "msg_loop"},
                                {"type", "message"},
                                {"role", "assistant"},
                                {"content", json::array()},
                                {"model", "fake"},
                                {"usage",
                                 {{"input_tokens", in},
                                  {"cache_creation_input_tokens", cache_write},
                                  {"cache_read_input_tokens", cache_read},
                                  {"output_tokens", 1}}}}}});
    int idx = 0;
    if (thinking > 0) {  // summarized thinking: a short text for many tokens served
      s.event("content_block_start", {{"type", "content_block_start"},
                                      {"index", idx},
                                      {"content_block", {{"type", "thinking"}, {"thinking", ""}}}});
      s.event("content_block_delta", {{"type", "content_block_delta"},
                                      {"index", idx},
                                      {"delta", {{"type", "thinking_delta"}, {"thinking", "Next file."}}}});
      s.event("content_block_delta",
              {{"type", "content_block_delta"},
               {"index", idx},
               {"delta", {{"type", "signature_delta"}, {"signature", "SIG" + std::to_string(k)}}}});
      s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", idx}});
      ++idx;
    }
    s.event("content_block_start",
            {{"type", "content_block_start"}, {"index", idx}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    if (fill) {
      for (long i = 0; i < max_tokens - thinking && s.ok; ++i)
        s.event("content_block_delta",
                {{"type", "content_block_delta"}, {"index", idx}, {"delta", {{"type", "text_delta"}, {"text", "x "}}}});
    } else {
      s.event("content_block_delta",
              {{"type", "content_block_delta"}, {"index", idx}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
    }
    s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", idx}});
    ++idx;
    if (call) {
      s.event("content_block_start", {{"type", "content_block_start"},
                                      {"index", idx},
                                      {"content_block",
                                       {{"type", "tool_use"},
                                        {"id", "toolu_" + std::to_string(k)},
                                        {"name", "read_file"},
                                        {"input", json::object()}}}});
      s.event("content_block_delta", {{"type", "content_block_delta"},
                                      {"index", idx},
                                      {"delta", {{"type", "input_json_delta"}, {"partial_json", args_text}}}});
      s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", idx}});
    }
    json usage = {{"output_tokens", fill ? max_tokens : std::min(max_tokens, visible + thinking)}};
    if (thinking > 0) usage["output_tokens_details"] = {{"thinking_tokens", thinking}};
    s.event("message_delta", {{"type", "message_delta"},
                              {"delta",
                               {{"stop_reason", call   ? "tool_use"
                                                : fill ? "max_tokens"
                                                       : "end_turn"}}},
                              {"usage", usage}});
    s.event("message_stop", {{"type", "message_stop"}});
  } else {
    auto [prompt, cached] = openai_input(body, token, l.bpt, l.dense);
    long reasoning = 0;
    if (body.contains("reasoning_effort")) {
      const std::string e = body["reasoning_effort"];
      reasoning = std::min<long>(l.think *
                                     (e == "high"     ? 4
                                      : e == "medium" ? 2
                                                      : 1) /
                                     2,
                                 body.value("max_completion_tokens", body.value("max_tokens", 0L)) - visible);
      reasoning = std::max(0L, reasoning);
    }
    if (fill) {
      const long cap = body.value("max_completion_tokens", body.value("max_tokens", 0L));
      s.data(chunk({{"role", "assistant"}, {"content", ""}}));
      for (long i = 0; i < cap - reasoning && s.ok; ++i) s.data(chunk({{"content", "x "}}));
      s.data(chunk(json::object(), "length"));
      s.data({{"choices", json::array()},
              {"usage",
               {{"prompt_tokens", prompt},
                {"completion_tokens", cap},
                {"prompt_tokens_details", {{"cached_tokens", cached}}},
                {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}}}});
      s.raw("data: [DONE]\n\n");
      s.end();
      return s.ok;
    }
    s.data(chunk({{"role", "assistant"}, {"content", text}}));
    if (call)
      s.data(chunk({{"tool_calls",
                     {{{"index", 0},
                       {"id", "call_" + std::to_string(k)},
                       {"type", "function"},
                       {"function", {{"name", "read_file"}, {"arguments", args_text}}}}}}}));
    s.data(chunk(json::object(), call ? "tool_calls" : "stop"));
    s.data({{"choices", json::array()},
            {"usage",
             {{"prompt_tokens", prompt},
              {"completion_tokens", visible + reasoning},
              {"prompt_tokens_details", {{"cached_tokens", cached}}},
              {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}}}});
    s.raw("data: [DONE]\n\n");
  }
  s.end();
  return s.ok;
}

// Returns false to close the connection.
bool model(int fd, const Req& r, const std::string& scenario, const std::string& token) {
  json body = json::parse(r.body, nullptr, false);
  int attempt;
  {
    std::lock_guard lk(mu);
    json h = json::object();
    for (auto& [k, v] : r.headers) h[k] = v;
    json offered = json::array();  // OpenAI {type, function: {name}} and Anthropic {name} alike
    if (body.is_object() && body.contains("tools") && body["tools"].is_array())
      for (const auto& t : body["tools"]) {
        if (t.contains("function"))
          offered.push_back(t["function"].value("name", ""));
        else if (t.contains("name"))
          offered.push_back(t.value("name", ""));
      }
    seen[token].push_back({{"path", r.path}, {"headers", h}, {"body", body}, {"tools_offered", offered}});
    attempt = ++attempts[token];
  }
  const bool anthropic = r.path.size() >= 9 && r.path.compare(r.path.size() - 9, 9, "/messages") == 0;
  if (scenario.rfind("loop", 0) == 0) return loop(fd, body, scenario, token, anthropic);
  if (scenario == "length" || scenario == "length-always") {
    // The server's own token cap ends the turn inside a tool call; "length" answers a request without
    // tools (the wrap-up turn) in full.
    Sse s(fd);
    const bool tools = body.contains("tools") && !body["tools"].empty();
    if (scenario == "length" && !tools) {
      if (anthropic)
        anthropic_message(s, false, "## Summary\nWrapped up after the cut.\n");
      else
        openai_text(s, "## Summary\nWrapped up after the cut.\n", "stop");
      return s.ok;
    }
    if (anthropic) {
      s.event("message_start", {{"type", "message_start"}, {"message", {{"usage", {{"input_tokens", 40}}}}}});
      s.event("content_block_start",
              {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
      s.event(
          "content_block_delta",
          {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", "Searching."}}}});
      s.event("content_block_start",
              {{"type", "content_block_start"},
               {"index", 1},
               {"content_block",
                {{"type", "tool_use"}, {"id", "toolu_cut"}, {"name", "grep"}, {"input", json::object()}}}});
      s.event("content_block_delta",
              {{"type", "content_block_delta"},
               {"index", 1},
               {"delta", {{"type", "input_json_delta"}, {"partial_json", "{\"pattern\": \"re"}}}});
      s.event(
          "message_delta",
          {{"type", "message_delta"}, {"delta", {{"stop_reason", "max_tokens"}}}, {"usage", {{"output_tokens", 12}}}});
      s.event("message_stop", {{"type", "message_stop"}});
    } else {
      s.data(chunk({{"role", "assistant"}, {"content", "Searching."}}));
      s.data(chunk({{"tool_calls",
                     {{{"index", 0},
                       {"id", "call_cut"},
                       {"type", "function"},
                       {"function", {{"name", "grep"}, {"arguments", "{\"pattern\": \"re"}}}}}}}));
      s.data(chunk(json::object(), "length"));
      s.data({{"choices", json::array()}, {"usage", {{"prompt_tokens", 40}, {"completion_tokens", 12}}}});
      s.raw("data: [DONE]\n\n");
    }
    s.end();
    return s.ok;
  }
  if (scenario == "script" && !anthropic) {  // scripted turns (POST /script/<token>), OpenAI format
    json turn;
    {
      std::lock_guard lk(mu);
      const json& all = scripts[token];
      if (all.is_array() && attempt <= int(all.size())) turn = all[size_t(attempt - 1)];
    }
    if (turn.is_null()) turn = {{"content", "## Summary\nThe scripted turns are done.\n"}};
    Sse s(fd);
    s.data(chunk({{"role", "assistant"}, {"content", turn.value("content", "")}}));
    const json calls = turn.value("tool_calls", json::array());
    for (size_t i = 0; i < calls.size(); ++i)
      s.data(chunk({{"tool_calls",
                     {{{"index", i},
                       {"id", "call_" + std::to_string(attempt) + "_" + std::to_string(i)},
                       {"type", "function"},
                       {"function",
                        {{"name", calls[i].value("name", "")},
                         {"arguments", calls[i].value("arguments", json::object()).dump()}}}}}}}));
    s.data(chunk(json::object(), calls.empty() ? "stop" : "tool_calls"));
    s.data({{"id", "chatcmpl-1"},
            {"choices", json::array()},
            {"usage", {{"prompt_tokens", 100}, {"completion_tokens", 10}, {"total_tokens", 110}}}});
    s.raw("data: [DONE]\n\n");
    s.end();
    return s.ok;
  }
  if (scenario == "text") {
    Sse s(fd);
    if (anthropic)
      anthropic_message(s, false);
    else
      openai_text(s, "Hello from the fake model.", "stop");
    return s.ok;
  }
  if (scenario == "tools") {
    Sse s(fd);
    if (anthropic)
      anthropic_message(s, true, "Let me look.");
    else
      openai_tools(s);
    return s.ok;
  }
  if (scenario == "agent") {  // tool call first, then an answer once a tool result is in the history
    Sse s(fd);
    const bool answered = has_tool_result(body);
    if (anthropic) {
      if (answered)
        anthropic_message(s, false, "## Summary\nThe workspace was listed.\n");
      else
        anthropic_message(s, true, "Let me look.");
    } else if (answered) {
      openai_text(s, "## Summary\nThe workspace was listed.\n", "stop");
    } else {
      s.data(chunk({{"role", "assistant"}, {"content", "Listing."}}));
      s.data(chunk({{"tool_calls",
                     {{{"index", 0},
                       {"id", "call_1"},
                       {"type", "function"},
                       {"function", {{"name", "list_dir"}, {"arguments", "{\"path\":\".\"}"}}}}}}}));
      s.data(chunk(json::object(), "tool_calls"));
      s.data({{"choices", json::array()}, {"usage", {{"prompt_tokens", 50}, {"completion_tokens", 9}}}});
      s.raw("data: [DONE]\n\n");
      s.end();
    }
    return s.ok;
  }
  if (scenario == "429") {
    if (attempt == 1)
      return write_all(fd, response(429, "application/json", R"({"error":{"message":"Rate limit reached"}})",
                                    "Retry-After: 1\r\n")) &&
             true;
    Sse s(fd);
    anthropic ? anthropic_message(s, false) : openai_text(s, "after the rate limit", "stop");
    return s.ok;
  }
  if (scenario == "500") {
    if (attempt == 1) return write_all(fd, response(500, "application/json", R"({"error":{"message":"internal"}})"));
    Sse s(fd);
    anthropic ? anthropic_message(s, false) : openai_text(s, "after the 500", "stop");
    return s.ok;
  }
  if (scenario == "always503")
    return write_all(fd, response(503, "application/json", R"({"error":{"message":"overloaded"}})"));
  if (scenario == "retry-after-long")
    return write_all(
        fd, response(429, "application/json", R"({"error":{"message":"slow down"}})", "Retry-After: 3600\r\n"));
  if (scenario == "401")
    return write_all(fd, response(401, "application/json",
                                  R"({"error":{"message":"Incorrect API key provided: sk-test-SECRET-123"}})"));
  if (scenario == "reset") {  // reads the request, then resets the connection (RST, not FIN)
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    return false;
  }
  if (scenario == "stall") {
    Sse s(fd);
    s.data(chunk({{"role", "assistant"}, {"content", "partial"}}));
    for (int i = 0; i < 300 && s.ok; ++i) sleep_ms(100);  // then nothing (the client gives up first)
    return false;
  }
  if (scenario == "truncated") {
    std::string events = "data: " + chunk({{"content", "cut "}}).dump() +
                         "\n\ndata: " + chunk({{"content", "off"}}).dump() + "\n\ndata: {\"choi";
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                      std::to_string(events.size() + 500) + "\r\n\r\n" + events);
    return false;
  }
  if (scenario == "no-done") {  // a clean end of body, but without a finish_reason or [DONE]
    Sse s(fd);
    s.data(chunk({{"content", "no end"}}));
    s.end();
    return s.ok;
  }
  if (scenario == "big") {  // 10 MB of one stream (keep-alive comments: no tokens, only bytes)
    Sse s(fd);
    s.data(chunk({{"role", "assistant"}, {"content", "start"}}));
    std::string piece = ": " + std::string(1000, 'x') + "\n";
    std::string block;
    while (block.size() < (1u << 20)) block += piece;
    for (int i = 0; i < 10 && s.ok; ++i) s.raw(block);
    s.end();
    return false;
  }
  if (scenario == "malformed") {
    Sse s(fd);
    s.data(chunk({{"content", "fine so far"}}));
    s.raw("data: {\"choices\": [{\"delta\": {\"content\": \"oops\"\n\n");
    s.raw("data: [DONE]\n\n");
    s.end();
    return s.ok;
  }
  if (scenario == "unknown-finish") {
    Sse s(fd);
    if (anthropic) {
      s.event("message_start", {{"type", "message_start"}, {"message", {{"usage", {{"input_tokens", 5}}}}}});
      s.event("content_block_start",
              {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", "hm"}}}});
      s.event("message_delta", {{"type", "message_delta"},
                                {"delta", {{"stop_reason", "brand_new_reason"}}},
                                {"usage", {{"output_tokens", 1}}}});
      s.event("message_stop", {{"type", "message_stop"}});
      s.end();
    } else {
      openai_text(s, "strange", "brand_new_reason");
    }
    return s.ok;
  }
  if (scenario == "budget") {  // ignores max_tokens: 1000 one-token deltas
    Sse s(fd);
    if (anthropic) {
      s.event("message_start", {{"type", "message_start"}, {"message", {{"usage", {{"input_tokens", 30}}}}}});
      s.event("content_block_start",
              {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
      for (int i = 0; i < 1000 && s.ok; ++i)
        s.event("content_block_delta",
                {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", "tok "}}}});
      s.event(
          "message_delta",
          {{"type", "message_delta"}, {"delta", {{"stop_reason", "end_turn"}}}, {"usage", {{"output_tokens", 1000}}}});
      s.event("message_stop", {{"type", "message_stop"}});
    } else {
      for (int i = 0; i < 1000 && s.ok; ++i) s.data(chunk({{"content", "tok "}}));
      s.data(chunk(json::object(), "stop"));
      s.data({{"choices", json::array()}, {"usage", {{"prompt_tokens", 30}, {"completion_tokens", 1000}}}});
      s.raw("data: [DONE]\n\n");
    }
    s.end();
    return s.ok;
  }
  if (scenario == "overrun" || scenario == "overrun-big") {
    // Streams exactly max_tokens deltas (each of a few tokens' text, as a server that packs tokens
    // does), then reports 80 output tokens more than max_tokens. "overrun-big" reports that usage and
    // then pads the stream with 20 MiB of keep-alive comments, past the response size limit.
    const long cap = body.value("max_completion_tokens", body.value("max_tokens", 0L));
    const long in =
        long(body.value("tools", json::array()).dump().size() + body.value("messages", json::array()).dump().size());
    const bool big = scenario == "overrun-big";
    Sse s(fd);
    if (anthropic) {
      s.event("message_start",
              {{"type", "message_start"}, {"message", {{"usage", {{"input_tokens", in}, {"output_tokens", 1}}}}}});
      s.event("content_block_start",
              {{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
      for (long i = 0; i < cap && s.ok; ++i)
        s.event(
            "content_block_delta",
            {{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", "ab cd "}}}});
      s.event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
      s.event("message_delta", {{"type", "message_delta"},
                                {"delta", {{"stop_reason", "max_tokens"}}},
                                {"usage", {{"output_tokens", cap + 80}}}});
    } else {
      for (long i = 0; i < cap && s.ok; ++i) s.data(chunk({{"content", "ab cd "}}));
      s.data(chunk(json::object(), "length"));
      s.data({{"choices", json::array()}, {"usage", {{"prompt_tokens", in}, {"completion_tokens", cap + 80}}}});
    }
    if (big) {
      std::string block;
      while (block.size() < (1u << 20)) block += ": " + std::string(1000, 'x') + "\n";
      for (int i = 0; i < 20 && s.ok; ++i) s.raw(block);
      s.end();
      return false;
    }
    if (anthropic)
      s.event("message_stop", {{"type", "message_stop"}});
    else
      s.raw("data: [DONE]\n\n");
    s.end();
    return s.ok;
  }
  if (scenario == "stream-error") {  // Anthropic: 200, then an overloaded error event; then fine
    Sse s(fd);
    if (attempt == 1) {
      s.event("message_start", {{"type", "message_start"}, {"message", {{"usage", {{"input_tokens", 5}}}}}});
      s.event("error", {{"type", "error"}, {"error", {{"type", "overloaded_error"}, {"message", "Overloaded"}}}});
      s.end();
    } else {
      anthropic_message(s, false);
    }
    return s.ok;
  }
  if (scenario == "bad-args") {
    Sse s(fd);
    s.data(chunk(
        {{"tool_calls", {{{"index", 0}, {"id", "c"}, {"function", {{"name", "grep"}, {"arguments", "{not json"}}}}}}}));
    s.data(chunk(json::object(), "tool_calls"));
    s.raw("data: [DONE]\n\n");
    s.end();
    return s.ok;
  }
  return write_all(fd, response(404, "text/plain", "unknown scenario " + scenario));
}

std::string query_param(const std::string& q, const std::string& name) {
  size_t pos = 0;
  while (pos <= q.size()) {
    size_t amp = q.find('&', pos);
    if (amp == std::string::npos) amp = q.size();
    std::string kv = q.substr(pos, amp - pos);
    if (kv.rfind(name + "=", 0) == 0) {
      std::string v = kv.substr(name.size() + 1), out;
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == '%' && i + 2 < v.size()) {
          out.push_back(char(std::stoi(v.substr(i + 1, 2), nullptr, 16)));
          i += 2;
        } else {
          out.push_back(v[i] == '+' ? ' ' : v[i]);
        }
      }
      return out;
    }
    pos = amp + 1;
  }
  return "";
}

bool web(int fd, const Req& r) {
  const std::string& p = r.path;
  if (p == "/web/page.html") {
    std::string html = R"(<!doctype html><html><head><title>Fake  Page</title>
<style>body { color: red }</style><script>var secret = "do not show";</script></head>
<body><h1>Main   heading</h1><p>First paragraph with
   <a href="/web/other.html">a relative link</a> and <a href="https://example.org/x">absolute</a>.</p>
<noscript>enable js</noscript><ul><li>one</li><li>two</li></ul><h2>Second</h2><p>Caf&eacute; &amp; more</p></body></html>)";
    return write_all(fd, response(200, "text/html; charset=utf-8", html));
  }
  if (p == "/web/plain.txt") return write_all(fd, response(200, "text/plain", "just text\n"));
  if (p == "/web/binary") return write_all(fd, response(200, "application/octet-stream", std::string(100, '\0')));
  if (p == "/web/redirect") {
    std::string to = query_param(r.query, "to");
    return write_all(fd, "HTTP/1.1 302 Found\r\nLocation: " + to + "\r\nContent-Length: 0\r\n\r\n");
  }
  if (p == "/web/redirect-loop")
    return write_all(fd, "HTTP/1.1 302 Found\r\nLocation: /web/redirect-loop\r\nContent-Length: 0\r\n\r\n");
  if (p == "/web/big") {  // 10 MB, no Content-Length (read until close)
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n");
    std::string block(1 << 20, 'a');
    for (int i = 0; i < 10; ++i)
      if (!write_all(fd, block)) break;
    return false;
  }
  if (p == "/web/stall") {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nsome");
    for (int i = 0; i < 300; ++i) sleep_ms(100);
    return false;
  }
  if (p == "/web/slow") {  // answers after ?ms= milliseconds, counting how many of ?token= it holds at once
    const std::string token = query_param(r.query, "token");
    {
      std::lock_guard lk(mu);
      auto& h = held[token];
      h.second = std::max(h.second, ++h.first);
    }
    sleep_ms(std::atoi(query_param(r.query, "ms").c_str()));
    {
      std::lock_guard lk(mu);
      --held[token].first;
    }
    return write_all(fd, response(200, "text/plain", "slow\n"));
  }
  if (p == "/web/held-max") {  // the most /web/slow requests of ?token= held at once
    std::lock_guard lk(mu);
    return write_all(fd, response(200, "text/plain", std::to_string(held[query_param(r.query, "token")].second)));
  }
  if (p == "/web/search") {
    if (query_param(r.query, "format") != "json")
      return write_all(fd, response(400, "text/plain", "format=json required"));
    json res = {
        {"query", query_param(r.query, "q")},
        {"results", json::array({{{"url", "https://example.org/a"},
                                  {"title", "Result A"},
                                  {"content", "About " + query_param(r.query, "q")}},
                                 {{"url", "https://example.org/b"}, {"title", "Result B"}, {"content", "More"}}})}};
    return write_all(fd, response(200, "application/json", res.dump()));
  }
  return write_all(fd, response(404, "text/plain", "not found"));
}

void serve(int fd) {
  std::string buf;
  Req r;
  while (read_request(fd, buf, r)) {
    bool keep = true;
    if (r.path.rfind("/inspect/", 0) == 0) {
      std::lock_guard lk(mu);
      json j = seen[r.path.substr(9)];
      keep = write_all(fd, response(200, "application/json", j.is_null() ? "[]" : j.dump()));
    } else if (r.path.rfind("/script/", 0) == 0 && r.method == "POST") {
      json turns = json::parse(r.body, nullptr, false);
      if (!turns.is_array()) {
        keep = write_all(fd, response(400, "text/plain", "a script is a JSON array of turns"));
      } else {
        std::lock_guard lk(mu);
        scripts[r.path.substr(8)] = std::move(turns);
        keep = write_all(fd, response(200, "application/json", "{}"));
      }
    } else if (r.path.rfind("/s/", 0) == 0) {
      auto a = r.path.find('/', 3), b = a == std::string::npos ? a : r.path.find('/', a + 1);
      if (b == std::string::npos)
        keep = write_all(fd, response(404, "text/plain", "bad path"));
      else
        keep = model(fd, r, r.path.substr(3, a - 3), r.path.substr(a + 1, b - a - 1));
    } else {
      keep = web(fd, r);
    }
    if (!keep) break;
    r = Req{};
  }
  ::close(fd);
}

int listen_on() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 64) != 0) {
    std::perror("bind/listen");
    std::_Exit(1);
  }
  return s;
}

int port_of(int s) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

}  // namespace

int main() {
  int l1 = listen_on(), l2 = listen_on();
  port2 = port_of(l2);
  std::printf("%d %d\n", port_of(l1), port2);
  std::fflush(stdout);
  std::thread([] {  // exit with the test
    char c;
    while (::read(0, &c, 1) != 0) {
    }
    std::_Exit(0);
  })
      .detach();
  pollfd fds[2] = {{l1, POLLIN, 0}, {l2, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) continue;
    for (auto& p : fds) {
      if (!(p.revents & POLLIN)) continue;
      int c = ::accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) std::thread(serve, c).detach();
    }
  }
}
