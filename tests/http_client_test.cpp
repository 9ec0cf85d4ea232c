// The libcurl multi handle on the Asio loop.
#include "net/http.hpp"

#include <boost/asio/steady_timer.hpp>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "fake_model_server.hpp"
#include "test_util.hpp"

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

using test::FakeServer;
using test::run_until;

using supervisor::http::Client;
using supervisor::http::Failure;
using supervisor::http::Request;
using supervisor::http::Response;

Response get(boost::asio::io_context& io, Request rq) {
  std::optional<Response> resp;
  Client::of(io).start(std::move(rq), [&](Response r) { resp = std::move(r); });
  REQUIRE(run_until(io, [&] { return resp.has_value(); }));
  return *resp;
}

}  // namespace

TEST_CASE("one client per io_context; connections are reused across transfers") {
  FakeServer srv;
  boost::asio::io_context io, other;
  CHECK(&Client::of(io) == &Client::of(io));
  CHECK(&Client::of(io) != &Client::of(other));
  Request rq;
  rq.url = srv.base() + "/web/plain.txt";
  for (int i = 0; i < 3; ++i) {
    auto r = get(io, rq);
    REQUIRE_MESSAGE(r.completed(), r.error);
    CHECK(r.status == 200);
    CHECK(r.body == "just text\n");
    CHECK(r.header("content-type") == "text/plain");
    CHECK(r.connected_ip == "127.0.0.1");
  }
  CHECK(Client::of(io).connections_opened() == 1);
}

TEST_CASE("transfers run side by side and the loop stays free while one stalls") {
  FakeServer srv;
  boost::asio::io_context io;
  Request slow;
  slow.url = srv.base() + "/web/stall";
  slow.stall_timeout = std::chrono::seconds(2);
  std::optional<Response> stalled;
  Client::of(io).start(slow, [&](Response r) { stalled = std::move(r); });
  int ticks = 0;
  boost::asio::steady_timer t(io);
  std::function<void()> tick = [&] {
    t.expires_after(50ms);
    t.async_wait([&](boost::system::error_code ec) {
      if (!ec && ++ticks < 1000) tick();
    });
  };
  tick();
  int fast_done = 0;
  for (int i = 0; i < 5; ++i) {
    Request rq;
    rq.url = srv.base() + "/web/page.html";
    Client::of(io).start(rq, [&](Response r) { fast_done += r.completed() && r.status == 200; });
  }
  REQUIRE(run_until(io, [&] { return fast_done == 5; }));
  CHECK_FALSE(stalled.has_value());
  REQUIRE(run_until(io, [&] { return stalled.has_value(); }));
  t.cancel();
  CHECK(stalled->failure == Failure::stalled);
  CHECK(ticks >= 20);  // the timer kept firing: nothing blocked the loop
}

TEST_CASE("on_body streams the body; returning false or cancelling inside it aborts") {
  FakeServer srv;
  boost::asio::io_context io;
  Request rq;
  rq.url = srv.base() + "/web/big";
  rq.max_body_bytes = 20u << 20;
  std::uint64_t seen = 0;
  rq.on_body = [&](long status, std::string_view chunk) {
    CHECK(status == 200);
    seen += chunk.size();
    return seen < 100000;
  };
  auto r = get(io, rq);
  CHECK(r.failure == Failure::aborted);
  CHECK(r.body.empty());
  CHECK(seen >= 100000);
  CHECK(seen < (10u << 20));

  bool called = false;
  Client::Id id = 0;
  rq.on_body = [&](long, std::string_view) {
    Client::of(io).cancel(id);
    return true;
  };
  id = Client::of(io).start(rq, [&](Response) { called = true; });
  run_until(
      io, [&] { return Client::of(io).active() == 0; }, 5s);
  run_until(
      io, [] { return false; }, 200ms);
  CHECK(Client::of(io).active() == 0);
  CHECK_FALSE(called);
}

TEST_CASE("size cap, connect refusal by check_address, and POST bodies") {
  FakeServer srv;
  boost::asio::io_context io;
  Request rq;
  rq.url = srv.base() + "/web/big";
  rq.max_body_bytes = 1u << 20;
  auto r = get(io, rq);
  CHECK(r.failure == Failure::too_large);
  CHECK(r.body.size() <= (1u << 20));

  rq = Request{};
  rq.url = srv.base() + "/web/plain.txt";
  int asked = 0;
  rq.check_address = [&](const boost::asio::ip::tcp::endpoint& ep) {
    ++asked;
    CHECK(ep.port() == srv.port());
    return std::string("is not for you");
  };
  r = get(io, rq);
  CHECK(asked >= 1);
  CHECK(r.failure == Failure::refused);
  CHECK(r.error.find("127.0.0.1 is not for you") != std::string::npos);

  rq = Request{};
  rq.method = "POST";
  rq.url = srv.scenario("text", "post") + "/v1/chat/completions";
  rq.body = R"({"model":"m","messages":[]})";
  rq.headers = {"Content-Type: application/json"};
  r = get(io, rq);
  REQUIRE_MESSAGE(r.completed(), r.error);
  CHECK(r.status == 200);
  CHECK(r.body.find("data: [DONE]") != std::string::npos);
}
