// Non-blocking HTTP for the supervisor: one libcurl multi handle per io_context, driven by the Asio
// loop through CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION and curl_multi_socket_action, the way
// libcurl's authors intend for event-driven programs. Nothing here ever blocks the loop: DNS runs on
// curl's resolver thread, sockets are waited on by the reactor, timeouts are Asio timers.
//
// Threading: every member must be called on the io_context's thread. Completion handlers run on that
// thread, posted (never from inside a curl callback), exactly once per start() unless cancel() came
// first (then never). `on_body` runs inside curl's write callback: it may call cancel() but must not
// start transfers or run the io_context.
//
// Lifetime: the client is an io_context service (one per io_context, created on first use, destroyed
// with the io_context). Transfers still running at shutdown are dropped without their handlers.
//
// Errors: a transfer's failure is a value (Response::error) given to its callback; start() throws
// std::invalid_argument only for a request curl refuses outright.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace supervisor::http {

struct Request {
  std::string method = "GET";        // GET or POST
  std::string url;                   // http:// or https:// only
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent for POST
  std::string user_agent = "subagent-supervisor";
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds total_timeout{60'000};
  // No byte received for this long (counted from the start, then from the last byte): the transfer
  // fails with Failure::stalled. Measured by the client's own timer, not curl's low-speed window
  // (which averages over its whole period and fired seconds late).
  std::chrono::milliseconds stall_timeout{30'000};
  std::size_t max_body_bytes = 8u << 20;  // the transfer fails once the body passes this
  bool proxy_from_environment = true;     // false: never use http_proxy & co (web_fetch)
  // Called with every address curl is about to connect to (after DNS, before connect(2), also for
  // each Happy Eyeballs attempt). Return "" to allow, or why it is refused: the socket is never
  // created and the transfer fails with Failure::refused. Empty function: everything allowed.
  std::function<std::string(const boost::asio::ip::tcp::endpoint&)> check_address;
  // Body bytes as they arrive, with the final response's status. Returning false aborts the transfer
  // (Failure::aborted). Without it the body is collected in Response::body.
  std::function<bool(long status, std::string_view chunk)> on_body;
};

enum class Failure {
  none,       // the exchange completed (whatever the HTTP status)
  connect,    // DNS, connect, TLS handshake, or the connection dropped before a response
  timeout,    // total timeout
  stalled,    // no byte for stall_timeout
  truncated,  // the connection closed before the announced end of the body
  too_large,  // body over max_body_bytes
  refused,    // check_address refused every address
  aborted,    // on_body returned false
  other,
};

struct Response {
  Failure failure = Failure::none;
  std::string error;                                         // what failed, for people; never holds request headers
  long status = 0;                                           // HTTP status of the final response (0: none)
  std::vector<std::pair<std::string, std::string>> headers;  // of the final response; names lowercase
  std::string body;                                          // when Request::on_body was empty
  std::uint64_t body_bytes = 0;                              // received, whether collected or streamed
  std::string connected_ip;                                  // the address actually connected to
  std::chrono::milliseconds elapsed{0};

  bool completed() const noexcept { return failure == Failure::none; }
  // Value of the last header named `name` (lowercase), or "".
  std::string header(std::string_view name) const;
};

const char* to_string(Failure f) noexcept;

// Text from a server made safe to show and to put in JSON: bytes that are not well-formed UTF-8
// become '?', control characters other than \n and \t become ' ', and it is cut (on a character
// boundary, "..." appended) after max_bytes.
std::string printable(std::string_view s, std::size_t max_bytes);

class Client : public boost::asio::io_context::service {
 public:
  using Id = std::uint64_t;
  static boost::asio::io_context::id id;

  explicit Client(boost::asio::io_context& io);
  ~Client() override;

  // The client of `io` (created on first use).
  static Client& of(boost::asio::io_context& io) { return boost::asio::use_service<Client>(io); }

  // Starts a transfer. Throws std::invalid_argument for a request curl refuses outright.
  Id start(Request req, std::function<void(Response)> done);
  // Aborts a transfer; its handler is never called. Unknown or finished ids are ignored.
  void cancel(Id id) noexcept;
  std::size_t active() const noexcept;
  // Connections opened so far (to observe connection reuse).
  std::uint64_t connections_opened() const noexcept;

 private:
  void shutdown() override;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace supervisor::http
