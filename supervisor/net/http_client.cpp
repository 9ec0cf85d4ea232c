// libcurl's multi_socket API on an Asio loop (after curl's own asiohiper example, minus its globals).
//
// curl tells us which sockets to watch (socket callback) and when to wake it (timer callback); we wait
// with posix::stream_descriptor::async_wait and a steady_timer and hand every event back through
// curl_multi_socket_action. We open and close the sockets ourselves (OPENSOCKET/CLOSESOCKETFUNCTION)
// so the address check runs on the very address about to be connected to, before connect(2).
//
// Rule kept throughout: no curl_multi_* call and no user completion handler runs inside a curl
// callback. Completions are posted; cancel() inside on_body is deferred to the write callback.
#include "net/http.hpp"

#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

namespace supervisor::http {

namespace asio = boost::asio;

boost::asio::io_context::id Client::id;

std::string Response::header(std::string_view name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (it->first == name) return it->second;
  return "";
}

const char* to_string(Failure f) noexcept {
  switch (f) {
    case Failure::none:
      return "none";
    case Failure::connect:
      return "connect";
    case Failure::timeout:
      return "timeout";
    case Failure::stalled:
      return "stalled";
    case Failure::truncated:
      return "truncated";
    case Failure::too_large:
      return "too_large";
    case Failure::refused:
      return "refused";
    case Failure::aborted:
      return "aborted";
    case Failure::other:
      return "other";
  }
  return "other";
}

std::string printable(std::string_view s, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  std::size_t i = 0;
  while (i < s.size() && out.size() < max_bytes) {
    unsigned char c = s[i];
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && n == 2) ok = c >= 0xC2;
    if (ok && n == 3) {
      unsigned char c1 = s[i + 1];
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && n == 4) {
      unsigned char c1 = s[i + 1];
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (!ok) {
      out.push_back('?');
      ++i;
      continue;
    }
    if (n == 1 && (c < 0x20 || c == 0x7F) && c != '\n' && c != '\t')
      out.push_back(' ');
    else
      out.append(s.substr(i, n));
    i += n;
  }
  if (i < s.size()) out += "...";
  return out;
}

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("curl_global_init failed");
  });
}

struct Watch {
  explicit Watch(asio::io_context& io, int fd) : d(io, fd) {}
  asio::posix::stream_descriptor d;
  int want = 0;  // CURL_POLL_IN / OUT / INOUT
  bool read_pending = false, write_pending = false;
  bool live = true;
};

}  // namespace

struct Client::Impl {
  struct Transfer {
    Id id = 0;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    Request req;
    std::function<void(Response)> done;
    Response resp;
    char errbuf[CURL_ERROR_SIZE] = {};
    bool cancelled = false;
    bool too_large = false;
    bool aborted = false;
    std::string refused;  // last refusal by check_address
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_byte = started;
    std::unique_ptr<asio::steady_timer> stall;  // watches last_byte
    Impl* impl = nullptr;
  };

  asio::io_context& io;
  CURLM* multi = nullptr;
  asio::steady_timer timer;
  std::map<Id, std::unique_ptr<Transfer>> transfers;
  std::map<int, std::shared_ptr<Watch>> watches;
  Id next_id = 0;
  int in_user_callback = 0;
  std::uint64_t opened = 0;

  explicit Impl(asio::io_context& ctx) : io(ctx), timer(ctx) {
    global_init();
    multi = curl_multi_init();
    if (!multi) throw std::runtime_error("curl_multi_init failed");
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &Impl::on_socket);
    curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &Impl::on_timer);
    curl_multi_setopt(multi, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 32L);
  }

  ~Impl() { shutdown(); }

  void shutdown() {
    if (!multi) return;
    timer.cancel();
    for (auto& [tid, t] : transfers) destroy(*t);
    transfers.clear();
    curl_multi_cleanup(multi);  // closes cached connections through on_close
    multi = nullptr;
    for (auto& [fd, w] : watches) {
      w->live = false;
      w->d.release();
    }
    watches.clear();
  }

  void destroy(Transfer& t) {
    if (t.stall) t.stall->cancel();
    curl_multi_remove_handle(multi, t.easy);
    curl_easy_cleanup(t.easy);
    curl_slist_free_all(t.headers);
    t.easy = nullptr;
    t.headers = nullptr;
  }

  // ---- curl -> us -------------------------------------------------------------------------------

  static int on_socket(CURL*, curl_socket_t s, int what, void* userp, void*) {
    auto* self = static_cast<Impl*>(userp);
    if (what == CURL_POLL_REMOVE) {
      self->forget(s);
      return 0;
    }
    auto it = self->watches.find(s);
    if (it == self->watches.end()) it = self->watches.emplace(s, std::make_shared<Watch>(self->io, s)).first;
    it->second->want = what;
    self->arm(s, it->second);
    return 0;
  }

  static int on_timer(CURLM*, long timeout_ms, void* userp) {
    auto* self = static_cast<Impl*>(userp);
    if (timeout_ms < 0) {
      self->timer.cancel();
      return 0;
    }
    self->timer.expires_after(std::chrono::milliseconds(timeout_ms));
    self->timer.async_wait([self](boost::system::error_code ec) {
      if (!ec && self->multi) self->action(CURL_SOCKET_TIMEOUT, 0);
    });
    return 0;
  }

  static curl_socket_t on_open(void* clientp, curlsocktype purpose, curl_sockaddr* a) {
    auto* t = static_cast<Transfer*>(clientp);
    if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKET_BAD;
    if (t->req.check_address) {
      asio::ip::tcp::endpoint ep;
      if (a->family == AF_INET && a->addrlen >= sizeof(sockaddr_in)) {
        sockaddr_in sin;
        std::memcpy(&sin, &a->addr, sizeof sin);
        asio::ip::address_v4::bytes_type b;
        std::memcpy(b.data(), &sin.sin_addr, 4);
        ep = {asio::ip::address_v4(b), ntohs(sin.sin_port)};
      } else if (a->family == AF_INET6 && a->addrlen >= sizeof(sockaddr_in6)) {
        sockaddr_in6 sin6;
        std::memcpy(&sin6, &a->addr, sizeof sin6);
        asio::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), &sin6.sin6_addr, 16);
        ep = {asio::ip::address_v6(b, sin6.sin6_scope_id), ntohs(sin6.sin6_port)};
      } else {
        t->refused = "not an IPv4 or IPv6 address";
        return CURL_SOCKET_BAD;
      }
      std::string why = t->req.check_address(ep);
      if (!why.empty()) {
        t->refused = ep.address().to_string() + " " + why;
        return CURL_SOCKET_BAD;
      }
    }
    int fd = ::socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd < 0) return CURL_SOCKET_BAD;
    ++t->impl->opened;
    return fd;
  }

  static int on_close(void* clientp, curl_socket_t s) {
    auto* self = static_cast<Impl*>(clientp);
    self->forget(s);
    return ::close(s);  // never retried on EINTR: the descriptor is gone either way
  }

  static size_t on_header(char* p, size_t size, size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    t->last_byte = std::chrono::steady_clock::now();
    std::string_view line(p, size * n);
    if (line.substr(0, 5) == "HTTP/") {
      t->resp.headers.clear();  // a new response (after 100 Continue or a proxy CONNECT)
      return size * n;
    }
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return size * n;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
      value.remove_suffix(1);
    if (t->resp.headers.size() < 200) t->resp.headers.emplace_back(std::move(name), std::string(value));
    return size * n;
  }

  static size_t on_write(char* p, size_t size, size_t n, void* ud) {
    auto* t = static_cast<Transfer*>(ud);
    const size_t len = size * n;
    if (t->cancelled) return 0;
    t->last_byte = std::chrono::steady_clock::now();
    t->resp.body_bytes += len;
    if (t->resp.body_bytes > t->req.max_body_bytes) {
      t->too_large = true;
      return 0;
    }
    if (!t->req.on_body) {
      t->resp.body.append(p, len);
      return len;
    }
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    ++t->impl->in_user_callback;
    bool keep = t->req.on_body(status, std::string_view(p, len));
    --t->impl->in_user_callback;
    if (t->cancelled) {
      t->req.on_body = nullptr;  // safe now: it has returned
      return 0;
    }
    if (!keep) {
      t->aborted = true;
      return 0;
    }
    return len;
  }

  static int on_progress(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<Transfer*>(ud)->cancelled ? 1 : 0;
  }

  // ---- the stall timer ---------------------------------------------------------------------------

  // Wakes at last_byte + stall_timeout; a byte that arrived meanwhile moves the wake-up on. When the
  // time really passed, the transfer ends as stalled right here (outside any curl callback).
  void arm_stall(Transfer& t) {
    t.stall->expires_at(t.last_byte + t.req.stall_timeout);
    t.stall->async_wait([this, tid = t.id](boost::system::error_code ec) {
      if (ec || !multi) return;
      auto it = transfers.find(tid);
      if (it == transfers.end()) return;
      Transfer& x = *it->second;
      if (std::chrono::steady_clock::now() < x.last_byte + x.req.stall_timeout) {
        arm_stall(x);
        return;
      }
      std::unique_ptr<Transfer> owned = std::move(it->second);
      transfers.erase(it);
      stalled(*owned);
    });
  }

  void stalled(Transfer& t) {
    Response& r = t.resp;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &r.status);
    char* ip = nullptr;
    if (curl_easy_getinfo(t.easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip) r.connected_ip = ip;
    r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t.started);
    r.failure = Failure::stalled;
    r.error = "the transfer stalled (no data for " + std::to_string(t.req.stall_timeout.count()) + " ms)";
    destroy(t);
    if (t.cancelled || !t.done) return;
    asio::post(io, [done = std::move(t.done), resp = std::move(r)]() mutable { done(std::move(resp)); });
  }

  // ---- us -> curl -------------------------------------------------------------------------------

  void arm(int fd, const std::shared_ptr<Watch>& w) {
    if ((w->want & CURL_POLL_IN) && !w->read_pending) {
      w->read_pending = true;
      w->d.async_wait(asio::posix::descriptor_base::wait_read,
                      [this, fd, weak = std::weak_ptr<Watch>(w)](boost::system::error_code ec) {
                        auto w2 = weak.lock();
                        if (!w2) return;
                        w2->read_pending = false;
                        if (ec || !w2->live || !(w2->want & CURL_POLL_IN)) return;
                        action(fd, CURL_CSELECT_IN);
                        if (w2->live) arm(fd, w2);
                      });
    }
    if ((w->want & CURL_POLL_OUT) && !w->write_pending) {
      w->write_pending = true;
      w->d.async_wait(asio::posix::descriptor_base::wait_write,
                      [this, fd, weak = std::weak_ptr<Watch>(w)](boost::system::error_code ec) {
                        auto w2 = weak.lock();
                        if (!w2) return;
                        w2->write_pending = false;
                        if (ec || !w2->live || !(w2->want & CURL_POLL_OUT)) return;
                        action(fd, CURL_CSELECT_OUT);
                        if (w2->live) arm(fd, w2);
                      });
    }
  }

  void forget(int fd) {
    auto it = watches.find(fd);
    if (it == watches.end()) return;
    it->second->live = false;
    it->second->d.release();  // deregisters from the reactor; pending waits end with operation_aborted
    watches.erase(it);
  }

  void action(curl_socket_t s, int ev) {
    int running = 0;
    curl_multi_socket_action(multi, s, ev, &running);
    reap();
  }

  void reap() {
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      char* priv = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
      auto it = transfers.find(static_cast<Id>(reinterpret_cast<std::uintptr_t>(priv)));
      if (it == transfers.end()) continue;
      std::unique_ptr<Transfer> t = std::move(it->second);
      transfers.erase(it);
      finish(*t, m->data.result);
    }
  }

  void finish(Transfer& t, CURLcode rc) {
    Response& r = t.resp;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &r.status);
    char* ip = nullptr;
    if (curl_easy_getinfo(t.easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip) r.connected_ip = ip;
    r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t.started);
    std::string detail = t.errbuf[0] ? t.errbuf : curl_easy_strerror(rc);
    if (rc == CURLE_OK) {
      r.failure = Failure::none;
    } else if (t.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
      r.failure = Failure::too_large;
      r.error = "the response is larger than " + std::to_string(t.req.max_body_bytes) + " bytes";
    } else if (t.aborted) {
      r.failure = Failure::aborted;
      r.error = "aborted by the receiver";
    } else if (!t.refused.empty() && (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)) {
      r.failure = Failure::refused;
      r.error = "refused to connect: " + t.refused;
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
      // curl's own timeouts are the connect and the total one; the stall timer is ours.
      const bool total = r.elapsed + std::chrono::milliseconds(200) >= t.req.total_timeout;
      r.failure = total ? Failure::timeout : Failure::connect;
      r.error = total ? "no complete response within " + std::to_string(t.req.total_timeout.count()) + " ms"
                      : "timed out: " + detail;
    } else if (rc == CURLE_PARTIAL_FILE ||
               (r.status != 0 && (rc == CURLE_RECV_ERROR || rc == CURLE_HTTP2_STREAM || rc == CURLE_HTTP2))) {
      r.failure = Failure::truncated;
      r.error = "the connection closed before the end of the response: " + detail;
    } else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY ||
               rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING ||
               rc == CURLE_SSL_CONNECT_ERROR) {
      r.failure = Failure::connect;
      r.error = detail;
    } else {
      r.failure = Failure::other;
      r.error = detail;
    }
    destroy(t);
    if (t.cancelled || !t.done) return;
    asio::post(io, [done = std::move(t.done), resp = std::move(r)]() mutable { done(std::move(resp)); });
  }
};

Client::Client(asio::io_context& io) : asio::io_context::service(io), impl_(std::make_unique<Impl>(io)) {}
Client::~Client() = default;

void Client::shutdown() { impl_->shutdown(); }

Client::Id Client::start(Request req, std::function<void(Response)> done) {
  Impl& im = *impl_;
  if (!im.multi) throw std::logic_error("http::Client used after its io_context shut down");
  if (req.method != "GET" && req.method != "POST")
    throw std::invalid_argument("http: method " + req.method + " is not supported (GET or POST)");
  auto t = std::make_unique<Impl::Transfer>();
  t->id = ++im.next_id;
  t->impl = &im;
  t->req = std::move(req);
  t->done = std::move(done);
  CURL* e = curl_easy_init();
  if (!e) throw std::runtime_error("curl_easy_init failed");
  t->easy = e;
  const Request& q = t->req;
  curl_easy_setopt(e, CURLOPT_URL, q.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, reinterpret_cast<char*>(static_cast<std::uintptr_t>(t->id)));
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);  // callers follow redirects themselves, re-checking each
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(q.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<std::int64_t>(1, q.total_timeout.count())));
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(q.max_body_bytes));
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");  // whatever curl can decode; limits apply after decoding
  curl_easy_setopt(e, CURLOPT_USERAGENT, q.user_agent.c_str());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Impl::on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, &Impl::on_progress);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, t.get());
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &Impl::on_open);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, t.get());
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &Impl::on_close);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, &im);
  if (!q.proxy_from_environment) curl_easy_setopt(e, CURLOPT_PROXY, "");
  if (q.method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, q.body.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(q.body.size()));
  } else {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  }
  for (const auto& h : q.headers) t->headers = curl_slist_append(t->headers, h.c_str());
  if (q.method == "POST") t->headers = curl_slist_append(t->headers, "Expect:");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);

  const Id tid = t->id;
  Impl::Transfer* raw = t.get();
  t->stall = std::make_unique<asio::steady_timer>(im.io);
  im.transfers.emplace(tid, std::move(t));
  im.arm_stall(*raw);
  if (im.in_user_callback) {
    // curl_multi_add_handle must not run inside a curl callback; go round the loop once.
    asio::post(im.io, [&im, tid, raw] {
      auto it = im.multi ? im.transfers.find(tid) : im.transfers.end();
      if (it == im.transfers.end()) return;
      if (raw->cancelled || curl_multi_add_handle(im.multi, raw->easy) != CURLM_OK) {
        im.destroy(*raw);  // cancelled before it started (or refused): gone without its handler
        im.transfers.erase(it);
      }
    });
  } else if (CURLMcode mc = curl_multi_add_handle(im.multi, e); mc != CURLM_OK) {
    im.destroy(*raw);
    im.transfers.erase(tid);
    throw std::runtime_error(std::string("curl_multi_add_handle: ") + curl_multi_strerror(mc));
  }
  return tid;
}

void Client::cancel(Id tid) noexcept {
  Impl& im = *impl_;
  auto it = im.transfers.find(tid);
  if (it == im.transfers.end()) return;
  Impl::Transfer& t = *it->second;
  t.cancelled = true;
  t.done = nullptr;
  if (im.in_user_callback) return;  // the write/progress callback aborts it; reap() drops it
  im.destroy(t);
  im.transfers.erase(it);
}

std::size_t Client::active() const noexcept { return impl_->transfers.size(); }
std::uint64_t Client::connections_opened() const noexcept { return impl_->opened; }

}  // namespace supervisor::http
