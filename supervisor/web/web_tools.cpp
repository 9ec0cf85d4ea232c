// web_fetch and web_search, brokered by the supervisor (see web_tools.hpp for the address rules).
#include "web/web_tools.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <ctime>

#include "curl_url.hpp"
#include "net/http.hpp"
#include "protocol/messages.hpp"
#include "web/address_filter.hpp"
#include "web/html_text.hpp"

namespace supervisor {

using nlohmann::json;
namespace ip = boost::asio::ip;

using web_detail::CurlUrl;

// ---- the tools -----------------------------------------------------------------------------------

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool domain_matches(const std::string& host, std::string d) {
  d = lower(std::move(d));
  while (!d.empty() && (d.front() == '.' || d.front() == '*')) d.erase(0, 1);
  if (d.empty()) return false;
  return host == d || (host.size() > d.size() && host.compare(host.size() - d.size(), d.size(), d) == 0 &&
                       host[host.size() - d.size() - 1] == '.');
}

// Cuts at a UTF-8 boundary at or before max.
std::string cut_utf8(std::string s, std::size_t max, bool& cut) {
  cut = s.size() > max;
  if (!cut) return s;
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

}  // namespace

struct WebTools::Fetch {
  std::string child;
  std::string url;
  unsigned hops = 0;
  std::chrono::steady_clock::time_point deadline;
  std::function<void(bool, std::string)> done;
  std::uint64_t transfer = 0;
};

WebTools::WebTools(boost::asio::io_context& io, WebToolsConfig cfg) : io_(io), cfg_(std::move(cfg)) {
  for (auto& d : cfg_.allow_domains) d = lower(d);
  for (auto& d : cfg_.deny_domains) d = lower(d);
}

std::shared_ptr<WebTools> make_web_tools(boost::asio::io_context& io, WebToolsConfig cfg) {
  return std::make_shared<WebTools>(io, std::move(cfg));
}

bool WebTools::handles(const std::string& tool) const { return tool == "web_fetch" || tool == "web_search"; }

std::string WebTools::check_endpoint(const ip::tcp::endpoint& ep) const {
  auto why = non_public_reason(ep.address());
  if (!why) return "";
  if (ep.address().is_loopback() || (ep.address().is_v6() && ep.address().to_v6().is_v4_mapped() &&
                                     ip::make_address_v4(ip::v4_mapped, ep.address().to_v6()).is_loopback())) {
    const auto& ports = cfg_.allow_loopback_ports_for_tests_only;
    if (std::find(ports.begin(), ports.end(), ep.port()) != ports.end()) return "";
  }
  return *why;
}

// "" when `url` may be fetched (then `normalized` holds curl's normal form), else why not.
std::string WebTools::check_url(const std::string& url, std::string& normalized) const {
  if (url.size() > 4096) return "the URL is longer than 4096 bytes";
  CurlUrl u;
  if (CURLUcode rc = curl_url_set(u.h, CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK)
    return std::string("the URL cannot be parsed (") + curl_url_strerror(rc) + ")";
  const std::string scheme = lower(u.get(CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https") return "only http and https URLs are fetched (not " + scheme + ")";
  if (!u.get(CURLUPART_USER).empty() || !u.get(CURLUPART_PASSWORD).empty())
    return "URLs with credentials (user:password@) are not fetched";
  std::string host = lower(u.get(CURLUPART_HOST));
  while (!host.empty() && host.back() == '.') host.pop_back();
  if (host.empty()) return "the URL has no host";
  // IP literals, in whatever form curl accepted them (it normalises 2130706433, 0x7f.0.0.1, 0177.1).
  std::string literal = host;
  if (literal.front() == '[') literal = literal.substr(1, literal.find_first_of("%]") - 1);
  boost::system::error_code ec;
  ip::address a = ip::make_address(literal, ec);
  if (!ec) {
    if (auto why = non_public_reason(a)) {
      const auto& ports = cfg_.allow_loopback_ports_for_tests_only;
      std::string port = u.get(CURLUPART_PORT, CURLU_DEFAULT_PORT);
      bool test_ok = a.is_loopback() && !port.empty() &&
                     std::find(ports.begin(), ports.end(), static_cast<std::uint16_t>(std::stoul(port))) != ports.end();
      if (!test_ok) return "address " + a.to_string() + " " + *why;
    }
  } else if (host.find_first_not_of("0123456789.") == std::string::npos || host.rfind("0x", 0) == 0) {
    return "the host '" + host + "' looks like an encoded IP address curl did not normalise";
  }
  for (const auto& d : cfg_.deny_domains)
    if (domain_matches(host, d)) return "the domain " + host + " is on the deny list";
  if (!cfg_.allow_domains.empty() && std::none_of(cfg_.allow_domains.begin(), cfg_.allow_domains.end(),
                                                  [&](const std::string& d) { return domain_matches(host, d); }))
    return "the domain " + host + " is not on the allow list";
  normalized = u.get(CURLUPART_URL);
  if (auto hash = normalized.find('#'); hash != std::string::npos) normalized.resize(hash);
  return "";
}

void WebTools::run(const std::string& child_id, const std::string& tool, const json& args,
                   std::function<void(bool, std::string)> done) {
  Slots& slots = slots_[child_id];
  if (slots.running >= std::max(1u, cfg_.max_in_flight_per_child)) {
    slots.waiting.push_back({tool, args, std::move(done)});
    return;
  }
  ++slots.running;
  // `done` never runs within start() (every answer comes from the loop), so the next waiting call
  // starts from slot_freed() without recursion.
  start(child_id, tool, args,
        [self = shared_from_this(), child_id, done = std::move(done)](bool ok, std::string content) {
          done(ok, std::move(content));
          self->slot_freed(child_id);
        });
}

void WebTools::slot_freed(const std::string& child_id) {
  auto it = slots_.find(child_id);
  if (it == slots_.end()) return;  // forgotten
  Slots& slots = it->second;
  if (slots.running > 0) --slots.running;
  if (!slots.waiting.empty()) {
    Waiting next = std::move(slots.waiting.front());
    slots.waiting.pop_front();
    run(child_id, next.tool, next.args, std::move(next.done));
  } else if (slots.running == 0) {
    slots_.erase(it);
  }
}

void WebTools::start(const std::string& child_id, const std::string& tool, const json& args, Done done) {
  auto fail_soon = [this, &done](std::string msg) {
    boost::asio::post(io_, [done = std::move(done), msg = std::move(msg)] { done(false, msg); });
  };
  if (!args.is_object()) return fail_soon(tool + ": arguments must be an object");
  if (tool == "web_search") {
    auto q = args.find("query");
    if (q == args.end() || !q->is_string() || q->get_ref<const std::string&>().empty())
      return fail_soon("web_search: \"query\" (a non-empty string) is required");
    if (q->get_ref<const std::string&>().size() > 1000)
      return fail_soon("web_search: the query is longer than 1000 bytes");
    search(child_id, q->get<std::string>(), std::move(done));
    return;
  }
  if (tool != "web_fetch") return fail_soon("unknown brokered tool " + tool);
  auto u = args.find("url");
  if (u == args.end() || !u->is_string()) return fail_soon("web_fetch: \"url\" (a string) is required");
  std::string normalized;
  if (std::string why = check_url(u->get<std::string>(), normalized); !why.empty())
    return fail_soon("web_fetch refused " + http::printable(u->get<std::string>(), 300) + ": " + why);
  auto f = std::make_shared<Fetch>();
  f->child = child_id;
  f->url = normalized;
  f->deadline = std::chrono::steady_clock::now() + cfg_.fetch_timeout;
  f->done = std::move(done);
  fetch_hop(std::move(f));
}

void WebTools::fetch_hop(std::shared_ptr<Fetch> f) {
  using namespace std::chrono;
  const auto left = duration_cast<milliseconds>(f->deadline - steady_clock::now());
  if (left <= milliseconds(0)) {
    auto done = std::move(f->done);
    boost::asio::post(io_, [done = std::move(done), url = f->url, t = cfg_.fetch_timeout] {
      done(false, "web_fetch " + url + ": no answer within " + std::to_string(t.count()) + " ms");
    });
    return;
  }
  http::Request rq;
  rq.url = f->url;
  rq.headers = {"Accept: text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1"};
  rq.user_agent = cfg_.user_agent;
  rq.connect_timeout = std::min(cfg_.connect_timeout, left);
  rq.total_timeout = left;
  rq.stall_timeout = cfg_.stall_timeout;
  rq.max_body_bytes = cfg_.max_fetch_bytes;
  rq.proxy_from_environment = false;
  auto self = shared_from_this();
  rq.check_address = [self](const ip::tcp::endpoint& ep) { return self->check_endpoint(ep); };
  f->transfer = http::Client::of(io_).start(std::move(rq), [self, f](http::Response r) {
    for (auto [it, end] = self->in_flight_.equal_range(f->child); it != end; ++it)
      if (it->second == f->transfer) {
        self->in_flight_.erase(it);
        break;
      }
    const std::string where = "web_fetch " + f->url;
    if (!r.completed()) {
      f->done(false, where + ": " + http::printable(r.error, 500));
      return;
    }
    if (r.status >= 300 && r.status < 400 && r.status != 304) {
      std::string loc = r.header("location");
      if (loc.empty()) {
        f->done(false, where + ": HTTP " + std::to_string(r.status) + " without a Location");
        return;
      }
      if (++f->hops > self->cfg_.max_redirects) {
        f->done(false, where + ": more than " + std::to_string(self->cfg_.max_redirects) + " redirects");
        return;
      }
      // Relative locations resolve against the current URL; the target is checked like a new request.
      CurlUrl u;
      curl_url_set(u.h, CURLUPART_URL, f->url.c_str(), 0);
      if (curl_url_set(u.h, CURLUPART_URL, loc.c_str(), 0) != CURLUE_OK) {
        f->done(false, where + ": unusable redirect Location " + http::printable(loc, 300));
        return;
      }
      std::string normalized;
      if (std::string why = self->check_url(u.get(CURLUPART_URL), normalized); !why.empty()) {
        f->done(false, where + ": refused the redirect to " + http::printable(loc, 300) + ": " + why);
        return;
      }
      f->url = normalized;
      self->fetch_hop(f);
      return;
    }
    if (r.status < 200 || r.status > 299) {
      f->done(false, where + ": HTTP " + std::to_string(r.status));
      return;
    }
    const std::string type = lower(r.header("content-type"));
    std::string title, text;
    const bool html =
        type.find("html") != std::string::npos || (type.empty() && r.body.find("<html") != std::string::npos);
    if (html) {
      text = html_to_text(r.body, f->url, title);
    } else if (type.empty() || type.rfind("text/", 0) == 0 || type.find("json") != std::string::npos ||
               type.find("xml") != std::string::npos) {
      text = r.body;
    } else {
      f->done(false, where + ": content type " + http::printable(type, 100) + " is not text");
      return;
    }
    bool cut = false;
    text = cut_utf8(http::printable(text, std::string::npos), self->cfg_.max_text_bytes, cut);
    auto& list = self->sources_[f->child];
    if (list.size() < self->cfg_.max_sources_per_child) list.push_back({f->url, title, utc_now()});
    std::string out = "URL: " + f->url + "\n";
    if (!title.empty()) out += "Title: " + title + "\n";
    out += "\n" + text;
    if (cut) out += "\n\n[truncated at " + std::to_string(self->cfg_.max_text_bytes) + " bytes]";
    f->done(true, std::move(out));
  });
  in_flight_.emplace(f->child, f->transfer);
}

void WebTools::search(const std::string& child_id, const std::string& query, Done done) {
  if (cfg_.search_endpoint.empty()) {
    boost::asio::post(io_, [done = std::move(done)] {
      done(false, "web_search is not configured on this supervisor (no search endpoint); use web_fetch on known URLs");
    });
    return;
  }
  char* q = curl_easy_escape(nullptr, query.data(), static_cast<int>(query.size()));
  http::Request rq;
  rq.url = cfg_.search_endpoint + (cfg_.search_endpoint.find('?') == std::string::npos ? "?" : "&") +
           "q=" + (q ? q : "") + "&format=json";
  curl_free(q);
  rq.headers = {"Accept: application/json"};
  rq.user_agent = cfg_.user_agent;
  rq.connect_timeout = cfg_.connect_timeout;
  rq.total_timeout = cfg_.fetch_timeout;
  rq.stall_timeout = cfg_.stall_timeout;
  rq.max_body_bytes = cfg_.max_fetch_bytes;
  rq.proxy_from_environment = false;  // the endpoint is the operator's, often on this machine
  auto self = shared_from_this();
  auto id = std::make_shared<std::uint64_t>(0);
  *id =
      http::Client::of(io_).start(std::move(rq), [self, child_id, id, query, done = std::move(done)](http::Response r) {
        for (auto [it, end] = self->in_flight_.equal_range(child_id); it != end; ++it)
          if (it->second == *id) {
            self->in_flight_.erase(it);
            break;
          }
        if (!r.completed())
          return done(false, "web_search: the search backend failed: " + http::printable(r.error, 300));
        if (r.status != 200)
          return done(false, "web_search: the search backend answered HTTP " + std::to_string(r.status));
        json j =
            protocol::nesting_within(r.body) ? json::parse(r.body, nullptr, false) : json(json::value_t::discarded);
        if (j.is_discarded() || !j.is_object() || !j.contains("results") || !j["results"].is_array())
          return done(false, "web_search: the search backend's answer is not SearxNG JSON (no \"results\" array)");
        std::string out = "Search results for: " + query + "\n";
        unsigned n = 0;
        for (const auto& res : j["results"]) {
          if (n >= self->cfg_.max_search_results) break;
          if (!res.is_object() || !res.contains("url") || !res["url"].is_string()) continue;
          ++n;
          out += "\n" + std::to_string(n) + ". " + http::printable(res.value("title", "(no title)"), 200) + "\n   " +
                 http::printable(res["url"].get<std::string>(), 500) + "\n";
          if (std::string c = res.value("content", ""); !c.empty()) out += "   " + http::printable(c, 500) + "\n";
        }
        if (n == 0) out += "\n(no results)\n";
        done(true, std::move(out));
      });
  in_flight_.emplace(child_id, *id);
}

std::vector<WebSource> WebTools::sources(const std::string& child_id) const {
  auto it = sources_.find(child_id);
  return it == sources_.end() ? std::vector<WebSource>{} : it->second;
}

json WebTools::sources_json(const std::string& child_id) const {
  json a = json::array();
  for (const auto& s : sources(child_id))
    a.push_back({{"url", s.url}, {"title", s.title}, {"fetched_at", s.fetched_at}});
  return a;
}

void WebTools::forget(const std::string& child_id) {
  slots_.erase(child_id);
  auto [it, end] = in_flight_.equal_range(child_id);
  for (auto i = it; i != end; ++i) http::Client::of(io_).cancel(i->second);
  in_flight_.erase(it, end);
  sources_.erase(child_id);
}

}  // namespace supervisor
