// The research preset's brokered tools, run by the supervisor on a child's behalf (BrokeredTools):
//   web_fetch {url}    GET one http(s) page, as readable text
//   web_search {query} ask a SearxNG-compatible JSON endpoint
//
// web_fetch refuses, by default, every address that is not public: loopback, RFC 1918, ULA, link-local,
// CGNAT, multicast, unspecified, reserved, cloud metadata (169.254.169.254, fd00:ec2::254), and IPv6
// forms that embed such an IPv4 address. The check runs twice: on IP literals in the URL (however
// encoded: curl normalises 2130706433, 0x7f.1, 0177.0.0.1), and on the address curl is about to
// connect to (http::Request::check_address, before connect(2)), so DNS answers, DNS rebinding and
// redirects cannot get round it. Redirects are followed here, one hop at a time, each URL re-checked.
// Proxies from the environment are never used for web_fetch (a proxy would hide the real address).
//
// Threading: one object serves many children; call it on the io_context's thread only.
//
// Errors: none thrown from run(); a refused address, a bad URL or a failed fetch is done(false, why).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include "web/brokered_tools.hpp"

namespace supervisor {

struct WebToolsConfig {
  // Domain lists (from the research policy). A domain matches itself and its subdomains. A non-empty
  // allow list admits only its domains; the deny list always wins.
  std::vector<std::string> allow_domains;
  std::vector<std::string> deny_domains;
  std::size_t max_fetch_bytes = 4u << 20;           // raw body; larger pages fail
  std::size_t max_text_bytes = 100'000;             // text handed to the model; longer text is cut
  std::chrono::milliseconds fetch_timeout{30'000};  // a whole fetch, redirects included
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::seconds stall_timeout{15};
  unsigned max_redirects = 5;
  std::string search_endpoint;  // e.g. http://127.0.0.1:8888/search ("" : web_search is unavailable)
  unsigned max_search_results = 8;
  std::size_t max_sources_per_child = 200;
  // One child's brokered calls (fetches and searches) running at once; more wait in order. A child
  // may send all its tool requests without waiting for answers: without this bound one research
  // child could hold up to max_tool_calls fetches of max_fetch_bytes each in the supervisor.
  unsigned max_in_flight_per_child = 4;
  std::string user_agent = "subagent-supervisor-research/0.1";

  // TESTS ONLY. Loopback (127.0.0.0/8, ::1) connections to these ports are allowed, nothing else.
  // Never filled from a policy file, the command line or the environment: only test code sets it.
  std::vector<std::uint16_t> allow_loopback_ports_for_tests_only;
};

struct WebSource {
  std::string url;         // the final URL, after redirects
  std::string title;       // <title>, or "" when the page has none
  std::string fetched_at;  // UTC, RFC 3339 ("2025-01-31T12:00:00Z")
};

class WebTools final : public BrokeredTools, public std::enable_shared_from_this<WebTools> {
 public:
  WebTools(boost::asio::io_context& io, WebToolsConfig cfg);

  bool handles(const std::string& tool) const override;
  // `done(ok, content)` runs on the io thread; it may run after the child is gone (sessions ignore it).
  void run(const std::string& child_id, const std::string& tool, const nlohmann::json& args,
           std::function<void(bool ok, std::string content)> done) override;

  // Pages a child fetched successfully, oldest first (for its envelope).
  std::vector<WebSource> sources(const std::string& child_id) const;
  nlohmann::json sources_json(const std::string& child_id) const;  // [{url, title, fetched_at}]
  // Aborts the child's fetches in flight and those waiting for a slot (their `done` is never
  // called) and drops its sources.
  void forget(const std::string& child_id);

  const WebToolsConfig& config() const noexcept { return cfg_; }

 private:
  struct Fetch;
  using Done = std::function<void(bool ok, std::string content)>;
  void start(const std::string& child_id, const std::string& tool, const nlohmann::json& args, Done done);
  void slot_freed(const std::string& child_id);
  void fetch_hop(std::shared_ptr<Fetch> f);
  void search(const std::string& child_id, const std::string& query, Done done);
  std::string check_url(const std::string& url, std::string& normalized) const;
  std::string check_endpoint(const boost::asio::ip::tcp::endpoint& ep) const;

  boost::asio::io_context& io_;
  WebToolsConfig cfg_;
  std::map<std::string, std::vector<WebSource>> sources_;
  std::multimap<std::string, std::uint64_t> in_flight_;  // child id -> http transfer id
  struct Waiting {
    std::string tool;
    nlohmann::json args;
    Done done;
  };
  struct Slots {
    unsigned running = 0;         // calls started and not yet answered
    std::deque<Waiting> waiting;  // past max_in_flight_per_child, in the order they came
  };
  std::map<std::string, Slots> slots_;  // child id -> its calls; gone when it has none
};

// The usual way to make one (BrokeredTools is held by shared_ptr in SessionConfig::brokered).
std::shared_ptr<WebTools> make_web_tools(boost::asio::io_context& io, WebToolsConfig cfg);

}  // namespace supervisor
