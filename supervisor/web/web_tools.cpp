// web_fetch and web_search, brokered by the supervisor (see web_tools.hpp for the address rules).
#include "web/web_tools.hpp"

#include <curl/curl.h>
#include <gumbo.h>

#include <algorithm>
#include <ctime>

#include "protocol/messages.hpp"
#include "net/http.hpp"

namespace supervisor {

using nlohmann::json;
namespace ip = boost::asio::ip;

// ---- addresses -----------------------------------------------------------------------------------

namespace {

std::optional<std::string> v4_reason(std::uint32_t a) {
  auto in = [a](std::uint32_t net, int bits) { return (a >> (32 - bits)) == (net >> (32 - bits)); };
  if (a == 0xA9FEA9FE) return "is the cloud metadata address";  // 169.254.169.254
  if (in(0x00000000, 8)) return "is unspecified (0.0.0.0/8)";
  if (in(0x7F000000, 8)) return "is loopback";
  if (in(0x0A000000, 8) || in(0xAC100000, 12) || in(0xC0A80000, 16)) return "is private (RFC 1918)";
  if (in(0x64400000, 10)) return "is shared address space (CGNAT, 100.64.0.0/10)";
  if (in(0xA9FE0000, 16)) return "is link-local";
  if (in(0xC0000000, 24)) return "is reserved (192.0.0.0/24)";
  if (in(0xC0000200, 24) || in(0xC6336400, 24) || in(0xCB007100, 24)) return "is a documentation address";
  if (in(0xC6120000, 15)) return "is a benchmarking address (198.18.0.0/15)";
  if (in(0xE0000000, 4)) return "is multicast";
  if (in(0xF0000000, 4)) return "is reserved or broadcast (240.0.0.0/4)";
  return std::nullopt;
}

std::uint32_t v4_at(const ip::address_v6::bytes_type& b, int off) {
  return (std::uint32_t(b[off]) << 24) | (std::uint32_t(b[off + 1]) << 16) | (std::uint32_t(b[off + 2]) << 8) |
         b[off + 3];
}

std::optional<std::string> v6_reason(const ip::address_v6& a) {
  const auto b = a.to_bytes();
  auto prefix = [&b](std::initializer_list<unsigned> p, int bits) {
    int i = 0;
    for (unsigned byte : p) {
      int take = std::min(8, bits - i * 8);
      if (take <= 0) break;
      unsigned mask = (0xFFu << (8 - take)) & 0xFFu;
      if ((b[i] & mask) != (byte & mask)) return false;
      ++i;
    }
    return true;
  };
  if (a.is_unspecified()) return "is unspecified (::)";
  if (a.is_loopback()) return "is loopback";
  if (a.is_v4_mapped()) {
    if (auto r = v4_reason(v4_at(b, 12))) return "embeds an IPv4 address that " + *r;
    return std::nullopt;
  }
  if (prefix({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {  // IPv4-compatible (deprecated)
    if (auto r = v4_reason(v4_at(b, 12))) return "embeds an IPv4 address that " + *r;
  }
  if (prefix({0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {  // NAT64
    if (auto r = v4_reason(v4_at(b, 12))) return "embeds (NAT64) an IPv4 address that " + *r;
  }
  if (prefix({0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48)) return "is local-use NAT64 (64:ff9b:1::/48)";
  if (prefix({0x20, 0x02}, 16)) {  // 6to4
    if (auto r = v4_reason(v4_at(b, 2))) return "embeds (6to4) an IPv4 address that " + *r;
  }
  if (prefix({0x20, 0x01, 0x00, 0x00}, 32)) return "is Teredo (2001::/32), which hides the real address";
  if (prefix({0x20, 0x01, 0x0d, 0xb8}, 32)) return "is a documentation address";
  if (prefix({0x01, 0x00, 0, 0, 0, 0, 0, 0}, 64)) return "is a discard-only address (100::/64)";
  if (prefix({0xfd, 0x00, 0x0e, 0xc2}, 32) && v4_at(b, 4) == 0 && v4_at(b, 8) == 0 && v4_at(b, 12) == 0x254)
    return "is the cloud metadata address";
  if (prefix({0xfc}, 7)) return "is unique-local (fc00::/7, private)";
  if (prefix({0xfe, 0x80}, 10)) return "is link-local";
  if (prefix({0xfe, 0xc0}, 10)) return "is site-local (deprecated, private)";
  if (prefix({0xff}, 8)) return "is multicast";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> non_public_reason(const ip::address& a) {
  if (a.is_v4()) return v4_reason(a.to_v4().to_uint());
  return v6_reason(a.to_v6());
}

// ---- HTML → text ---------------------------------------------------------------------------------

namespace {

struct CurlUrl {
  CURLU* h = curl_url();
  ~CurlUrl() { curl_url_cleanup(h); }
  CurlUrl() = default;
  CurlUrl(const CurlUrl&) = delete;
  CurlUrl& operator=(const CurlUrl&) = delete;
  std::string get(CURLUPart part, unsigned flags = 0) const {
    char* s = nullptr;
    if (curl_url_get(h, part, &s, flags) != CURLUE_OK || !s) return "";
    std::string out = s;
    curl_free(s);
    return out;
  }
};

// `ref` resolved against `base`; "" unless the result is http(s).
std::string resolve(const std::string& base, const std::string& ref) {
  CurlUrl u;
  if (!base.empty() && curl_url_set(u.h, CURLUPART_URL, base.c_str(), 0) != CURLUE_OK) return "";
  if (curl_url_set(u.h, CURLUPART_URL, ref.c_str(), 0) != CURLUE_OK) return "";
  std::string scheme = u.get(CURLUPART_SCHEME);
  if (scheme != "http" && scheme != "https") return "";
  return u.get(CURLUPART_URL);
}

class TextBuilder {
 public:
  explicit TextBuilder(std::string base) : base_(std::move(base)) {}

  void walk(const GumboNode* n, int depth) {
    if (depth > 400 || out_.size() > kMax) return;  // pathological nesting or size: stop descending
    switch (n->type) {
      case GUMBO_NODE_TEXT:
      case GUMBO_NODE_CDATA:
      case GUMBO_NODE_WHITESPACE:
        text(n->v.text.text);
        return;
      case GUMBO_NODE_ELEMENT:
      case GUMBO_NODE_TEMPLATE:
        element(n, depth);
        return;
      case GUMBO_NODE_DOCUMENT:
        children(&n->v.document.children, depth);
        return;
      default:
        return;  // comments
    }
  }

  std::string take() {
    while (!out_.empty() && (out_.back() == ' ' || out_.back() == '\n')) out_.pop_back();
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kMax = 8u << 20;

  void children(const GumboVector* v, int depth) {
    for (unsigned i = 0; i < v->length; ++i) walk(static_cast<const GumboNode*>(v->data[i]), depth + 1);
  }

  void element(const GumboNode* n, int depth) {
    const GumboElement& e = n->v.element;
    switch (e.tag) {
      case GUMBO_TAG_SCRIPT:
      case GUMBO_TAG_STYLE:
      case GUMBO_TAG_NOSCRIPT:
      case GUMBO_TAG_TEMPLATE:
      case GUMBO_TAG_SVG:
      case GUMBO_TAG_MATH:
      case GUMBO_TAG_IFRAME:
      case GUMBO_TAG_OBJECT:
      case GUMBO_TAG_EMBED:
      case GUMBO_TAG_CANVAS:
      case GUMBO_TAG_HEAD:
      case GUMBO_TAG_SELECT:
        return;
      case GUMBO_TAG_BR:
        newline(1);
        return;
      case GUMBO_TAG_HR:
        newline(2);
        return;
      case GUMBO_TAG_IMG:
        if (const GumboAttribute* alt = gumbo_get_attribute(&e.attributes, "alt"); alt && *alt->value) {
          text("[image: ");
          text(alt->value);
          text("]");
        }
        return;
      default:
        break;
    }
    int heading = 0;
    switch (e.tag) {
      case GUMBO_TAG_H1:
        heading = 1;
        break;
      case GUMBO_TAG_H2:
        heading = 2;
        break;
      case GUMBO_TAG_H3:
        heading = 3;
        break;
      case GUMBO_TAG_H4:
        heading = 4;
        break;
      case GUMBO_TAG_H5:
        heading = 5;
        break;
      case GUMBO_TAG_H6:
        heading = 6;
        break;
      default:
        break;
    }
    if (heading) {
      newline(2);
      raw(std::string(heading, '#') + " ");
      children(&e.children, depth);
      newline(2);
      return;
    }
    if (e.tag == GUMBO_TAG_A) {
      const std::size_t before = out_.size();
      children(&e.children, depth);
      const GumboAttribute* href = gumbo_get_attribute(&e.attributes, "href");
      if (href && *href->value && href->value[0] != '#') {
        std::string target = resolve(base_, href->value);
        std::string shown = out_.substr(before);
        if (!target.empty() && shown.find(target) == std::string::npos && target.size() < 500)
          text(" (" + target + ")");
      }
      return;
    }
    if (e.tag == GUMBO_TAG_PRE) {
      newline(2);
      ++pre_;
      children(&e.children, depth);
      --pre_;
      newline(2);
      return;
    }
    if (e.tag == GUMBO_TAG_LI) {
      newline(1);
      raw("- ");
      children(&e.children, depth);
      newline(1);
      return;
    }
    if (e.tag == GUMBO_TAG_TD || e.tag == GUMBO_TAG_TH) {
      space_ = true;
      children(&e.children, depth);
      text(" |");
      return;
    }
    const int block = block_lines(e.tag);
    if (block) newline(block);
    children(&e.children, depth);
    if (block) newline(block);
  }

  static int block_lines(GumboTag t) {
    switch (t) {
      case GUMBO_TAG_P:
      case GUMBO_TAG_BLOCKQUOTE:
      case GUMBO_TAG_TABLE:
      case GUMBO_TAG_UL:
      case GUMBO_TAG_OL:
      case GUMBO_TAG_DL:
      case GUMBO_TAG_FIGURE:
      case GUMBO_TAG_SECTION:
      case GUMBO_TAG_ARTICLE:
        return 2;
      case GUMBO_TAG_DIV:
      case GUMBO_TAG_TR:
      case GUMBO_TAG_DT:
      case GUMBO_TAG_DD:
      case GUMBO_TAG_HEADER:
      case GUMBO_TAG_FOOTER:
      case GUMBO_TAG_MAIN:
      case GUMBO_TAG_NAV:
      case GUMBO_TAG_ASIDE:
      case GUMBO_TAG_FORM:
      case GUMBO_TAG_FIGCAPTION:
      case GUMBO_TAG_ADDRESS:
      case GUMBO_TAG_CAPTION:
      case GUMBO_TAG_BODY:
      case GUMBO_TAG_DETAILS:
      case GUMBO_TAG_SUMMARY:
        return 1;
      default:
        return 0;
    }
  }

  void newline(int n) {
    if (out_.empty()) return;
    lines_ = std::max(lines_, n);
    space_ = false;
  }

  void flush() {
    if (lines_) {
      while (!out_.empty() && out_.back() == ' ') out_.pop_back();
      int have = 0;
      for (auto it = out_.rbegin(); it != out_.rend() && *it == '\n' && have < 2; ++it) ++have;
      for (int i = have; i < lines_; ++i) out_.push_back('\n');
      lines_ = 0;
    } else if (space_ && !out_.empty() && out_.back() != '\n' && out_.back() != ' ') {
      out_.push_back(' ');
    }
    space_ = false;
  }

  void raw(const std::string& s) {
    flush();
    out_ += s;
  }

  void text(const char* s) { text(std::string_view(s)); }
  void text(std::string_view s) {
    if (pre_) {
      flush();
      out_.append(s);
      return;
    }
    for (char c : s) {
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f') {
        space_ = true;
        continue;
      }
      flush();
      out_.push_back(c);
    }
  }

  std::string base_;
  std::string out_;
  int lines_ = 0;
  bool space_ = false;
  int pre_ = 0;
};

const GumboNode* find_tag(const GumboNode* n, GumboTag tag, int depth) {
  if (depth > 50 || n->type != GUMBO_NODE_ELEMENT) {
    if (n->type != GUMBO_NODE_DOCUMENT) return nullptr;
  }
  if (n->type == GUMBO_NODE_ELEMENT && n->v.element.tag == tag) return n;
  const GumboVector* kids = n->type == GUMBO_NODE_DOCUMENT ? &n->v.document.children : &n->v.element.children;
  for (unsigned i = 0; i < kids->length; ++i)
    if (auto* f = find_tag(static_cast<const GumboNode*>(kids->data[i]), tag, depth + 1)) return f;
  return nullptr;
}

}  // namespace

std::string html_to_text(const std::string& html, const std::string& base_url, std::string& title) {
  GumboOutput* out = gumbo_parse_with_options(&kGumboDefaultOptions, html.data(), html.size());
  title.clear();
  std::string base = base_url;
  if (const GumboNode* t = find_tag(out->document, GUMBO_TAG_TITLE, 0)) {
    TextBuilder tb("");
    for (unsigned i = 0; i < t->v.element.children.length; ++i)
      tb.walk(static_cast<const GumboNode*>(t->v.element.children.data[i]), 0);
    title = http::printable(tb.take(), 300);
  }
  if (const GumboNode* b = find_tag(out->document, GUMBO_TAG_BASE, 0))
    if (const GumboAttribute* href = gumbo_get_attribute(&b->v.element.attributes, "href"))
      if (std::string r = resolve(base_url, href->value); !r.empty()) base = r;
  TextBuilder tb(base);
  tb.walk(out->document, 0);
  gumbo_destroy_output(&kGumboDefaultOptions, out);
  return tb.take();
}

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
