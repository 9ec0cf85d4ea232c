#include "provider_stream.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cmath>

namespace supervisor::detail {

using nlohmann::json;
using namespace std::chrono;

namespace {

// Counting before the server reports usage: one token per delta (how every server streams), or one
// per 8 bytes if a server packs several tokens into one delta, whichever is more. The byte rule stays
// below the real count for ordinary text, so an honest stream is not cut before the server's own cap.
std::uint64_t count(std::uint64_t deltas, std::uint64_t bytes) { return std::max(deltas, (bytes + 7) / 8); }

bool retryable_status(long s) {
  return s == 408 || s == 409 || s == 425 || s == 429 || s == 529 || (s >= 500 && s <= 599 && s != 501);
}

std::optional<milliseconds> parse_retry_after(const http::Response& r) {
  if (std::string ms = r.header("retry-after-ms"); !ms.empty()) {
    char* end = nullptr;
    double v = std::strtod(ms.c_str(), &end);
    if (end != ms.c_str() && v >= 0 && v < 1e9) return milliseconds(static_cast<std::int64_t>(v));
  }
  std::string ra = r.header("retry-after");
  if (ra.empty()) return std::nullopt;
  if (std::all_of(ra.begin(), ra.end(), [](unsigned char c) { return std::isdigit(c); }) && ra.size() < 10)
    return seconds(std::stoll(ra));
  time_t when = curl_getdate(ra.c_str(), nullptr);  // an HTTP-date
  if (when < 0) return std::nullopt;
  const auto now = system_clock::to_time_t(system_clock::now());
  return seconds(std::max<std::int64_t>(0, static_cast<std::int64_t>(when - now)));
}

std::string server_message(const std::string& body) {
  json j = protocol::nesting_within(body) ? json::parse(body, nullptr, false) : json(json::value_t::discarded);
  if (!j.is_discarded()) {
    const json* m = nullptr;
    if (j.is_object()) {
      if (auto e = j.find("error"); e != j.end()) {
        if (e->is_string())
          m = &*e;
        else if (e->is_object() && e->contains("message"))
          m = &(*e)["message"];
      }
      if (!m && j.contains("message")) m = &j["message"];
      if (!m && j.contains("detail")) m = &j["detail"];
    }
    if (m) return printable(m->is_string() ? m->get<std::string>() : m->dump(), 300);
  }
  return printable(body, 200);
}

}  // namespace

bool StreamState::admit(std::size_t bytes, bool reasoning) {
  if (cut) return false;
  if (out_cap && count(out_deltas + 1, out_bytes + bytes) > out_cap) {
    cut = true;
    return false;
  }
  if (reasoning && thinking_cap && count(reasoning_deltas + 1, reasoning_bytes + bytes) > thinking_cap) {
    cut = true;
    return false;
  }
  ++out_deltas;
  out_bytes += bytes;
  if (reasoning) {
    ++reasoning_deltas;
    reasoning_bytes += bytes;
  }
  return true;
}

json parse_arguments(const std::string& text, const std::string& tool, std::string& err) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  json j = protocol::nesting_within(text) ? json::parse(text, nullptr, false) : json(json::value_t::discarded);
  if (j.is_discarded() || !j.is_object()) {
    err = "the model's arguments for tool '" + printable(tool, 80) + "' are not a JSON object: " + printable(text, 120);
    return json::object();
  }
  return j;
}

std::string content_text(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (c.is_array()) {  // [{type:"text", text}] parts
    std::string out;
    for (const auto& p : c)
      if (p.is_object() && p.contains("text") && p["text"].is_string())
        out += p["text"].get<std::string>();
      else if (p.is_string())
        out += p.get<std::string>();
    return out;
  }
  return c.dump(-1, ' ', false, json::error_handler_t::replace);
}

StreamingProvider::StreamingProvider(boost::asio::io_context& io, ProviderConfig cfg, std::string key)
    : cfg_(std::move(cfg)),
      key_(std::move(key)),
      io_(io),
      client_(http::Client::of(io)),
      timer_(io),
      rng_(std::random_device{}()) {}

StreamingProvider::~StreamingProvider() {
  if (transfer_) client_.cancel(transfer_);
}

std::string StreamingProvider::where() const { return cfg_.name + " (" + cfg_.base_url + ")"; }

std::string StreamingProvider::scrub(std::string s) const {
  if (key_.size() >= 4)
    for (auto p = s.find(key_); p != std::string::npos; p = s.find(key_, p)) s.replace(p, key_.size(), "[key]");
  return s;
}

void StreamingProvider::start(ModelCall call, std::function<void(ModelReply)> done) {
  cancel();
  call_ = std::move(call);
  done_ = std::move(done);
  attempt_ = 0;
  attempt();
}

void StreamingProvider::cancel() {
  ++gen_;
  done_ = nullptr;
  timer_.cancel();
  if (transfer_) client_.cancel(std::exchange(transfer_, 0));
}

void StreamingProvider::attempt() {
  const auto now = steady_clock::now();
  if (now >= call_.deadline) {
    fail("provider_error", where() + ": the child's deadline passed before the model answered");
    return;
  }
  std::uint64_t out_cap =
      call_.max_tokens ? std::min(call_.max_tokens, cfg_.max_output_tokens) : cfg_.max_output_tokens;
  std::uint64_t thinking_cap = 0;
  Wire w;
  request_notes_ = json::object();
  derive_reasoning_ = false;
  try {
    w = build(call_, out_cap, thinking_cap);
  } catch (const std::exception& e) {
    fail("bad_response", where() + ": cannot build the request: " + e.what());
    return;
  }
  st_ = std::make_unique<StreamState>();
  st_->out_cap = out_cap;
  st_->thinking_cap = thinking_cap;
  st_->derive_reasoning = derive_reasoning_;
  dec_ = make_decoder();
  sse_.emplace(1u << 20);
  sse_mode_.reset();
  raw_.clear();

  http::Request rq;
  rq.method = "POST";
  rq.url = w.url;
  rq.headers = std::move(w.headers);
  rq.headers.push_back("Content-Type: application/json");
  rq.headers.push_back("Accept: text/event-stream");
  rq.body = w.body.dump(-1, ' ', false, json::error_handler_t::replace);
  request_bytes_ = rq.body.size();
  rq.user_agent = std::string("subagent-supervisor/") + SUBAGENT_VERSION;
  const auto left = duration_cast<milliseconds>(call_.deadline - now);
  rq.total_timeout = std::max(milliseconds(1), std::min(cfg_.request_timeout, left));
  rq.connect_timeout = std::max(milliseconds(1), std::min(cfg_.connect_timeout, rq.total_timeout));
  rq.stall_timeout = cfg_.stall_timeout;
  rq.max_body_bytes = cfg_.max_response_bytes;
  rq.on_body = [this](long status, std::string_view chunk) { return on_body(status, chunk); };
  std::weak_ptr<char> life = life_;
  const auto g = gen_;
  try {
    transfer_ = client_.start(std::move(rq), [this, life, g](http::Response r) {
      if (life.expired() || g != gen_) return;
      transfer_ = 0;
      on_done(std::move(r));
    });
  } catch (const std::exception& e) {
    fail("provider_error", where() + ": " + scrub(e.what()));
  }
}

bool StreamingProvider::on_body(long status, std::string_view chunk) {
  if (status < 200 || status > 299 || (sse_mode_ && !*sse_mode_)) {
    if (raw_.size() < (1u << 20)) raw_.append(chunk.substr(0, (1u << 20) - raw_.size()));
    return true;
  }
  if (!sse_mode_) {
    auto p = chunk.find_first_not_of(" \t\r\n");
    if (p == std::string_view::npos) return true;
    sse_mode_ = chunk[p] != '{' && chunk[p] != '[';
    if (!*sse_mode_) return on_body(status, chunk);
  }
  StreamState& st = *st_;
  bool ok = sse_->feed(chunk, [&](const SseEvent& ev) {
    ++st.events;
    dec_->on_event(ev, st);
    return !st.cut && st.error_code.empty();
  });
  if (!ok) st.fail("bad_response", sse_->error());
  return !st.cut && st.error_code.empty();
}

void StreamingProvider::on_done(http::Response r) {
  StreamState& st = *st_;
  std::string why_not;
  if (st.cut) {
    complete_ok();
    return;
  }
  if (!st.error_code.empty()) {
    if (st.retryable_error && st.out_deltas == 0 && retry(std::nullopt, why_not)) return;
    fail(st.error_code, where() + ": " + st.error_message + why_not);
    return;
  }
  if (!r.completed()) {
    const bool nothing_yet = r.status == 0 && st.events == 0;
    const bool transient =
        r.failure == http::Failure::connect ||
        (nothing_yet && (r.failure == http::Failure::stalled || r.failure == http::Failure::timeout));
    if (transient && nothing_yet && retry(std::nullopt, why_not)) return;
    switch (r.failure) {
      case http::Failure::too_large:
        fail("bad_response", where() + ": " + r.error);
        return;
      case http::Failure::truncated:
        fail("bad_response", where() + ": the response was truncated (" + scrub(r.error) + ")");
        return;
      case http::Failure::stalled:
        fail("provider_error", where() + ": the stream stalled: no data for " +
                                   std::to_string(cfg_.stall_timeout.count()) + " s (" + std::to_string(st.events) +
                                   " events received)");
        return;
      default:
        fail("provider_error", where() + ": " + scrub(r.error) + why_not);
        return;
    }
  }
  if (r.status < 200 || r.status > 299) {
    std::string msg = where() + ": HTTP " + std::to_string(r.status);
    if (std::string m = server_message(raw_); !m.empty()) msg += ": " + m;
    if (retryable_status(r.status) && retry(parse_retry_after(r), why_not)) return;
    fail("provider_error", scrub(msg) + why_not);
    return;
  }
  if (sse_mode_ && !*sse_mode_) {
    std::string m = server_message(raw_);
    json j = protocol::nesting_within(raw_) ? json::parse(raw_, nullptr, false) : json(json::value_t::discarded);
    if (!j.is_discarded() && j.is_object() && j.contains("error"))
      fail("provider_error", scrub(where() + ": " + m));
    else
      fail("bad_response", where() + ": expected an event stream (\"stream\": true) but got a plain JSON body");
    return;
  }
  if (!st.finished && (st.finish_reason.empty() || sse_->partial())) {
    fail("bad_response", where() + ": the stream ended before its final event (truncated after " +
                             std::to_string(st.events) + " events)");
    return;
  }
  complete_ok();
}

bool StreamingProvider::retry(std::optional<milliseconds> retry_after, std::string& why_not) {
  if (attempt_ >= cfg_.max_retries) {
    why_not = " (gave up after " + std::to_string(attempt_ + 1) + " attempts)";
    return false;
  }
  milliseconds delay;
  if (retry_after) {
    if (*retry_after > cfg_.max_retry_after) {
      why_not = " (Retry-After " + std::to_string(retry_after->count() / 1000) + " s is longer than the " +
                std::to_string(cfg_.max_retry_after.count() / 1000) + " s allowed)";
      return false;
    }
    delay = *retry_after + milliseconds(std::uniform_int_distribution<int>(0, 100)(rng_));
  } else {
    const double backoff = std::min<double>(
        static_cast<double>(cfg_.retry_max_delay.count()),
        static_cast<double>(cfg_.retry_base_delay.count()) * std::ldexp(1.0, static_cast<int>(attempt_)));
    // "Equal jitter": half fixed, half random, so retries from many children spread out.
    delay = milliseconds(
        static_cast<std::int64_t>(backoff / 2 + std::uniform_real_distribution<double>(0, backoff / 2)(rng_)));
  }
  if (steady_clock::now() + delay >= call_.deadline) {
    why_not = " (not retried: waiting " + std::to_string(delay.count()) + " ms would pass the child's deadline)";
    return false;
  }
  ++attempt_;
  timer_.expires_after(delay);
  std::weak_ptr<char> life = life_;
  timer_.async_wait([this, life, g = gen_](boost::system::error_code ec) {
    if (ec || life.expired() || g != gen_) return;
    attempt();
  });
  return true;
}

void StreamingProvider::finish(StreamState& st, ModelReply& reply) {
  reply.content = std::move(st.content);
  std::string err;
  int n = 0;
  for (auto& c : st.calls) {
    ++n;
    // A turn the server's token cap ended (finish_reason length) may stop inside a call's arguments, as
    // one the supervisor cut may: that call is dropped, not reported as a bad response.
    const bool cut = st.cut || st.finish_reason == "length";
    if (c.name.empty()) {
      if (cut) continue;
      err = "a tool call has no name";
      break;
    }
    std::string e;
    json args = parse_arguments(c.arguments, c.name, e);
    if (!e.empty()) {
      if (cut) continue;  // the cut landed inside this call's arguments: drop it
      err = e;
      break;
    }
    protocol::ToolCall tc;
    tc.id = c.id.empty() ? "call_" + std::to_string(n) : c.id;
    tc.name = std::move(c.name);
    tc.arguments = std::move(args);
    reply.tool_calls.push_back(std::move(tc));
  }
  if (!err.empty()) {
    reply.ok = false;
    reply.error_code = "bad_response";
    reply.error_message = err;
    return;
  }
  reply.ok = true;
  reply.finish_reason = st.cut ? "budget" : st.finish_reason;
}

void StreamingProvider::complete_ok() {
  StreamState& st = *st_;
  ModelReply reply;
  finish(st, reply);
  if (!reply.ok) reply.error_message = where() + ": " + reply.error_message;
  // Usage: what the server reported, else what was counted. A cut stream reports what was kept.
  const std::uint64_t counted = std::max(st.out_deltas, estimate_tokens(st.out_bytes));
  if (st.input_tokens)
    reply.usage.input_tokens = *st.input_tokens;
  else
    reply.usage.input_tokens = estimate_tokens(request_bytes_);
  if (st.output_tokens && !st.cut)
    reply.usage.output_tokens = *st.output_tokens;
  else
    reply.usage.output_tokens =
        std::min(st.cut ? count(st.out_deltas, st.out_bytes) : counted, st.out_cap ? st.out_cap : counted);
  const std::uint64_t seen_thinking = std::max(st.reasoning_deltas, estimate_tokens(st.reasoning_bytes));
  if (st.reasoning_tokens && !st.cut) {
    reply.usage.reasoning_tokens = *st.reasoning_tokens;
  } else if (st.derive_reasoning && st.output_tokens && !st.cut) {
    const std::uint64_t visible = estimate_tokens(st.out_bytes - st.reasoning_bytes);
    reply.usage.reasoning_tokens =
        std::max(seen_thinking, *st.output_tokens > visible ? *st.output_tokens - visible : 0);
  } else {
    reply.usage.reasoning_tokens = seen_thinking;
  }
  reply.usage.output_tokens = within_cap(reply.usage.output_tokens);
  reply.usage.reasoning_tokens = std::min(reply.usage.reasoning_tokens, reply.usage.output_tokens);
  reply.usage.cache_read_input_tokens = std::min(st.cache_read_tokens.value_or(0), reply.usage.input_tokens);
  reply.usage.cache_write_input_tokens =
      std::min(st.cache_write_tokens.value_or(0), reply.usage.input_tokens - reply.usage.cache_read_input_tokens);
  reply.request = request_notes_;
  reply.usage_estimated = !st.input_tokens || !st.output_tokens || st.cut;
  if (reply.ok) remember(st, reply);
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(reply));  // may destroy this provider: nothing after
}

std::uint64_t StreamingProvider::within_cap(std::uint64_t output_tokens) {
  // The server was sent max_tokens = the cap and the stream is cut there by the supervisor's count:
  // a server reporting more is counted at the cap (it was asked for no more), and the transcript
  // keeps what it reported. So a call's output never passes the cap the budgets gave it.
  if (!st_ || !st_->out_cap || output_tokens <= st_->out_cap) return output_tokens;
  request_notes_["output_tokens_reported"] = output_tokens;
  return st_->out_cap;
}

void StreamingProvider::fail(std::string code, std::string message) {
  // Every error names the provider and its host, whichever layer found it.
  if (message.rfind(where(), 0) != 0) message = where() + ": " + message;
  ModelReply reply;
  reply.ok = false;
  reply.error_code = std::move(code);
  reply.error_message = printable(scrub(std::move(message)), 2000);
  if (st_) {
    // Tokens the server did produce still count against the budget.
    reply.usage.input_tokens = st_->input_tokens.value_or(0);
    // What was delivered, or what the server reported if more, never past the call's cap.
    reply.usage.output_tokens =
        within_cap(std::max(st_->output_tokens.value_or(0), count(st_->out_deltas, st_->out_bytes)));
    reply.usage.reasoning_tokens =
        std::min(reply.usage.output_tokens, st_->reasoning_tokens.value_or(st_->reasoning_deltas));
    reply.usage.cache_read_input_tokens = std::min(reply.usage.input_tokens, st_->cache_read_tokens.value_or(0));
  }
  reply.request = request_notes_;
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) {
    // Errors found before any transfer started (in start()) must still arrive asynchronously.
    boost::asio::post(io_, [this, life = std::weak_ptr<char>(life_), g = gen_, done = std::move(done),
                            reply = std::move(reply)]() mutable {
      if (!life.expired() && g == gen_) done(std::move(reply));
    });
  }
}

}  // namespace supervisor::detail
