// web_fetch / web_search against the loopback fake server; the SSRF list, redirects, HTML to text.
#include "web/web_tools.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "net/http.hpp"
#include "web/address_filter.hpp"
#include "web/html_text.hpp"
#include "fake_model_server.hpp"
#include "test_util.hpp"

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using test::FakeServer;
using test::run_until;

[[maybe_unused]] json inspect(boost::asio::io_context& io, const FakeServer& srv, const std::string& token) {
  supervisor::http::Request rq;
  rq.url = srv.base() + "/inspect/" + token;
  std::optional<supervisor::http::Response> resp;
  supervisor::http::Client::of(io).start(rq, [&](supervisor::http::Response r) { resp = std::move(r); });
  REQUIRE(run_until(io, [&] { return resp.has_value(); }));
  return json::parse(resp->body);
}

using supervisor::WebTools;
using supervisor::WebToolsConfig;

struct Result {
  bool ok = false;
  std::string content;
};

Result run_tool(boost::asio::io_context& io, WebTools& w, const std::string& tool, const json& args,
                const std::string& child = "child1") {
  std::optional<Result> res;
  w.run(child, tool, args, [&](bool ok, std::string content) { res = Result{ok, std::move(content)}; });
  REQUIRE(run_until(io, [&] { return res.has_value(); }));
  return *res;
}

Result fetch(boost::asio::io_context& io, WebTools& w, const std::string& url) {
  return run_tool(io, w, "web_fetch", {{"url", url}});
}

WebToolsConfig test_config(const FakeServer& srv) {
  WebToolsConfig c;
  c.allow_loopback_ports_for_tests_only = {static_cast<std::uint16_t>(srv.port())};
  c.stall_timeout = 1s;
  c.fetch_timeout = 10s;
  return c;
}

}  // namespace

TEST_CASE("html_to_text: readable text, no script, links made absolute, <base> honoured, the title apart") {
  std::string title;
  const std::string text = supervisor::html_to_text(
      "<html><head><title>Retries\nin  depth</title><style>p{color:red}</style>"
      "<script>steal(document.cookie)</script></head><body><h2>Backoff</h2>"
      "<p>See <a href=\"/docs/retry.html\">the guide</a> and <a href=\"#top\">top</a>.</p>"
      "<ul><li>one</li><li>two</li></ul><noscript>enable js</noscript>"
      "<a href=\"javascript:alert(1)\">js</a></body></html>",
      "https://example.org/a/page.html", title);
  CHECK(title == "Retries in depth");
  CHECK(text.find("## Backoff") != std::string::npos);
  CHECK(text.find("the guide (https://example.org/docs/retry.html)") != std::string::npos);
  CHECK(text.find("- one") != std::string::npos);
  CHECK(text.find("- two") != std::string::npos);
  CHECK(text.find("steal") == std::string::npos);
  CHECK(text.find("color:red") == std::string::npos);
  CHECK(text.find("enable js") == std::string::npos);
  CHECK(text.find("#top") == std::string::npos);
  CHECK(text.find("javascript:") == std::string::npos);  // only http(s) targets are shown

  // <base href> changes what relative links resolve against.
  const std::string based = supervisor::html_to_text(
      "<html><head><base href=\"https://mirror.example.net/x/\"></head>"
      "<body><a href=\"y.html\">y</a></body></html>",
      "https://example.org/", title);
  CHECK(based.find("y (https://mirror.example.net/x/y.html)") != std::string::npos);
  CHECK(title.empty());
}

TEST_CASE("addresses that are not public are named, public ones pass") {
  auto reason = [](const char* a) { return supervisor::non_public_reason(boost::asio::ip::make_address(a)); };
  for (const char* a : {"127.0.0.1",
                        "127.8.9.10",
                        "::1",
                        "10.0.0.1",
                        "172.16.5.4",
                        "172.31.255.255",
                        "192.168.1.1",
                        "169.254.169.254",
                        "169.254.1.1",
                        "100.64.0.1",
                        "0.0.0.0",
                        "224.0.0.1",
                        "255.255.255.255",
                        "240.0.0.1",
                        "::",
                        "fc00::1",
                        "fd12:3456::1",
                        "fd00:ec2::254",
                        "fe80::1",
                        "ff02::1",
                        "::ffff:127.0.0.1",
                        "::ffff:10.1.2.3",
                        "::ffff:169.254.169.254",
                        "64:ff9b::a9fe:a9fe",
                        "2002:7f00:1::1",
                        "2001:0:1::1",
                        "198.18.0.1",
                        "192.0.2.1"}) {
    CAPTURE(a);
    CHECK(reason(a).has_value());
  }
  CHECK(*reason("169.254.169.254") == "is the cloud metadata address");
  CHECK(*reason("fd00:ec2::254") == "is the cloud metadata address");
  CHECK(reason("::ffff:127.0.0.1")->find("loopback") != std::string::npos);
  for (const char* a : {"93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700::1111", "2a00:1450:4001::1", "172.32.0.1",
                        "100.128.0.1", "::ffff:8.8.8.8", "64:ff9b::808:808"}) {
    CAPTURE(a);
    CHECK_FALSE(reason(a).has_value());
  }
}

TEST_CASE("the SSRF list is refused, without the test switch and with it (other ports)") {
  FakeServer srv;
  boost::asio::io_context io;
  const std::string p = std::to_string(srv.port()), p2 = std::to_string(srv.port2());
  // Twin: the same server, reached on the port the test switch allows, answers. So each refusal below
  // is the address policy, not a dead server.
  auto open = supervisor::make_web_tools(io, test_config(srv));
  auto ok = fetch(io, *open, "http://127.0.0.1:" + p + "/web/plain.txt");
  REQUIRE_MESSAGE(ok.ok, ok.content);
  CHECK(ok.content.find("just text") != std::string::npos);

  auto strict = supervisor::make_web_tools(io, WebToolsConfig{});
  CHECK(strict->config().allow_loopback_ports_for_tests_only.empty());  // off by default
  struct Case {
    std::string url, expect;
  } cases[] = {
      {"http://127.0.0.1:" + p + "/web/plain.txt", "127.0.0.1 is loopback"},
      {"http://[::1]:" + p + "/web/plain.txt", "::1 is loopback"},
      {"http://169.254.169.254/latest/meta-data/", "cloud metadata"},
      {"http://[fd00:ec2::254]/latest/meta-data/", "cloud metadata"},
      {"http://10.0.0.1/", "10.0.0.1 is private"},
      {"http://192.168.0.1/", "private"},
      {"http://[fe80::1%25eth0]/", "link-local"},
      {"http://0.0.0.0:" + p + "/", "unspecified"},
      {"http://2130706433:" + p + "/web/plain.txt", "127.0.0.1 is loopback"},  // decimal
      {"http://0x7f000001:" + p + "/web/plain.txt", "127.0.0.1 is loopback"},  // hex
      {"http://0177.0.0.1:" + p + "/web/plain.txt", "127.0.0.1 is loopback"},  // octal
      {"http://127.1:" + p + "/web/plain.txt", "127.0.0.1 is loopback"},       // short form
      {"http://[::ffff:127.0.0.1]:" + p + "/web/plain.txt", "loopback"},
      {"http://localhost:" + p + "/web/plain.txt", "refused to connect"},  // a name resolving to loopback
      {"file:///etc/passwd", "only http and https"},
      {"ftp://example.org/", "only http and https"},
      {"http://user:pw@example.org/", "credentials"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.url);
    auto r = fetch(io, *strict, c.url);
    CHECK_FALSE(r.ok);
    CHECK_MESSAGE(r.content.find(c.expect) != std::string::npos, r.content);
  }
  // With the switch on for the first port only, the second port on loopback is still refused.
  auto r = fetch(io, *open, "http://127.0.0.1:" + p2 + "/web/plain.txt");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("loopback") != std::string::npos);
  // Nothing was recorded as a source for the refusals.
  CHECK(strict->sources("child1").empty());
}

TEST_CASE("a redirect is re-checked: to loopback (by name or literal) it is refused at the target") {
  FakeServer srv;
  boost::asio::io_context io;
  const std::string p = std::to_string(srv.port()), p2 = std::to_string(srv.port2());
  auto w = supervisor::make_web_tools(io, test_config(srv));
  const std::string redirect = "http://127.0.0.1:" + p + "/web/redirect?to=";

  // The name passes the URL check; the connect-time check refuses the address it resolved to.
  auto r = fetch(io, *w, redirect + "http://localhost:" + p2 + "/web/plain.txt");
  CHECK_FALSE(r.ok);
  CHECK_MESSAGE(r.content.find("refused to connect") != std::string::npos, r.content);
  CHECK(r.content.find("loopback") != std::string::npos);

  r = fetch(io, *w, redirect + "http://127.0.0.1:" + p2 + "/web/plain.txt");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("refused the redirect") != std::string::npos);

  r = fetch(io, *w, redirect + "http://169.254.169.254/latest/meta-data/");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("cloud metadata") != std::string::npos);

  r = fetch(io, *w, redirect + "file:///etc/passwd");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("only http and https") != std::string::npos);

  // Twin: when the switch also allows the second port, the same redirect is followed.
  auto cfg = test_config(srv);
  cfg.allow_loopback_ports_for_tests_only.push_back(static_cast<std::uint16_t>(srv.port2()));
  auto both = supervisor::make_web_tools(io, cfg);
  r = fetch(io, *both, redirect + "http://localhost:" + p2 + "/web/plain.txt");
  CHECK_MESSAGE(r.ok, r.content);
  CHECK(r.content.find("URL: http://localhost:" + p2 + "/web/plain.txt") != std::string::npos);

  r = fetch(io, *w, "http://127.0.0.1:" + p + "/web/redirect-loop");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("more than 5 redirects") != std::string::npos);
}

TEST_CASE("HTML becomes readable text; the source is recorded per child") {
  FakeServer srv;
  boost::asio::io_context io;
  auto w = supervisor::make_web_tools(io, test_config(srv));
  const std::string url = "http://127.0.0.1:" + std::to_string(srv.port()) + "/web/page.html";
  auto r = fetch(io, *w, url);
  REQUIRE_MESSAGE(r.ok, r.content);
  CHECK(r.content.find("Title: Fake Page") != std::string::npos);
  CHECK(r.content.find("# Main heading") != std::string::npos);
  CHECK(r.content.find("## Second") != std::string::npos);
  CHECK(r.content.find("First paragraph with a relative link (http://127.0.0.1:" + std::to_string(srv.port()) +
                       "/web/other.html) and absolute (https://example.org/x).") != std::string::npos);
  CHECK(r.content.find("- one\n- two") != std::string::npos);
  CHECK(r.content.find("Café & more") != std::string::npos);
  CHECK(r.content.find("secret") == std::string::npos);
  CHECK(r.content.find("color") == std::string::npos);
  CHECK(r.content.find("enable js") == std::string::npos);

  auto src = w->sources("child1");
  REQUIRE(src.size() == 1);
  CHECK(src[0].url == url);
  CHECK(src[0].title == "Fake Page");
  CHECK(src[0].fetched_at.size() == 20);
  CHECK(w->sources_json("child1")[0]["title"] == "Fake Page");
  CHECK(w->sources("other").empty());
  w->forget("child1");
  CHECK(w->sources("child1").empty());
}

TEST_CASE("size, time and type caps") {
  FakeServer srv;
  boost::asio::io_context io;
  const std::string base = "http://127.0.0.1:" + std::to_string(srv.port());
  auto w = supervisor::make_web_tools(io, test_config(srv));
  auto r = fetch(io, *w, base + "/web/big");  // 10 MB against the 4 MiB default
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("larger than 4194304 bytes") != std::string::npos);
  r = fetch(io, *w, base + "/web/stall");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("stalled") != std::string::npos);
  r = fetch(io, *w, base + "/web/binary");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("is not text") != std::string::npos);
  r = fetch(io, *w, base + "/web/missing");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("HTTP 404") != std::string::npos);

  auto cfg = test_config(srv);
  cfg.max_text_bytes = 3;
  auto small = supervisor::make_web_tools(io, cfg);
  r = fetch(io, *small, base + "/web/plain.txt");
  CHECK(r.ok);
  CHECK(r.content.find("\njus\n\n[truncated at 3 bytes]") != std::string::npos);

  r = run_tool(io, *w, "web_fetch", {{"address", base}});
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("\"url\"") != std::string::npos);
}

TEST_CASE("domain allow and deny lists") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = test_config(srv);
  cfg.deny_domains = {"bad.example"};
  auto w = supervisor::make_web_tools(io, cfg);
  auto r = fetch(io, *w, "https://www.bad.example/x");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("deny list") != std::string::npos);
  cfg.deny_domains.clear();
  cfg.allow_domains = {"docs.example"};
  auto a = supervisor::make_web_tools(io, cfg);
  r = fetch(io, *a, "https://example.com/");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("not on the allow list") != std::string::npos);
  r = fetch(io, *a, "https://notdocs.example/");
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("not on the allow list") != std::string::npos);
  // Twin: an allowed domain gets past the list (and then fails only on the loopback address).
  cfg.allow_domains = {"localhost"};
  cfg.allow_loopback_ports_for_tests_only = {static_cast<std::uint16_t>(srv.port())};
  auto l = supervisor::make_web_tools(io, cfg);
  r = fetch(io, *l, "http://localhost:" + std::to_string(srv.port()) + "/web/plain.txt");
  CHECK_MESSAGE(r.ok, r.content);
}

TEST_CASE("web_search asks the SearxNG-compatible endpoint for JSON") {
  FakeServer srv;
  boost::asio::io_context io;
  auto cfg = test_config(srv);
  cfg.search_endpoint = "http://127.0.0.1:" + std::to_string(srv.port()) + "/web/search";
  auto w = supervisor::make_web_tools(io, cfg);
  auto r = run_tool(io, *w, "web_search", {{"query", "kernel sandbox & seccomp"}});
  REQUIRE_MESSAGE(r.ok, r.content);
  CHECK(r.content.find("1. Result A\n   https://example.org/a\n   About kernel sandbox & seccomp") !=
        std::string::npos);
  CHECK(r.content.find("2. Result B") != std::string::npos);
  auto none = supervisor::make_web_tools(io, WebToolsConfig{});
  r = run_tool(io, *none, "web_search", {{"query", "x"}});
  CHECK_FALSE(r.ok);
  CHECK(r.content.find("not configured") != std::string::npos);
  CHECK(w->handles("web_search"));
  CHECK(w->handles("web_fetch"));
  CHECK_FALSE(w->handles("read_file"));
}

// A child may send all its web requests without waiting for answers. At most
// max_in_flight_per_child (4) of them run at once; the rest wait their turn, and every one is
// answered. The twin: the same ten requests from ten children run together (the bound is per child).
TEST_CASE("one child's fetches run at most four at a time, the rest in order; other children are not held back") {
  FakeServer srv;
  boost::asio::io_context io;
  auto w = supervisor::make_web_tools(io, test_config(srv));
  REQUIRE(w->config().max_in_flight_per_child == 4);
  auto held_max = [&](const std::string& token) {
    supervisor::http::Request rq;
    rq.url = srv.base() + "/web/held-max?token=" + token;
    std::optional<supervisor::http::Response> resp;
    supervisor::http::Client::of(io).start(rq, [&](supervisor::http::Response r) { resp = std::move(r); });
    REQUIRE(run_until(io, [&] { return resp.has_value(); }));
    return std::atoi(resp->body.c_str());
  };
  auto flood = [&](const std::string& token, bool one_child) {
    std::vector<std::string> answers;  // "i", or "i what it said" when it was not the page
    int ok = 0;
    for (int i = 0; i < 10; ++i)
      w->run(one_child ? "child1" : "child" + std::to_string(i), "web_fetch",
             {{"url", srv.base() + "/web/slow?ms=300&token=" + token + "&i=" + std::to_string(i)}},
             [&, i](bool good, std::string content) {
               ok += good;
               answers.push_back(std::to_string(i) + (content.find("slow") != std::string::npos ? "" : " " + content));
             });
    REQUIRE(run_until(io, [&] { return answers.size() == 10; }));
    CHECK(ok == 10);
    for (const auto& a : answers) CHECK_MESSAGE(a.find(' ') == std::string::npos, a);
  };
  flood("one", true);
  CHECK(held_max("one") == 4);
  flood("many", false);
  CHECK(held_max("many") > 4);

  // forget() drops the waiting calls as well as those in flight: none of them is ever answered.
  int answered = 0;
  for (int i = 0; i < 10; ++i)
    w->run("child2", "web_fetch", {{"url", srv.base() + "/web/slow?ms=200&token=gone&i=" + std::to_string(i)}},
           [&](bool, std::string) { ++answered; });
  w->forget("child2");
  run_until(
      io, [&] { return answered > 0; }, 1500ms);
  CHECK(answered == 0);
}
