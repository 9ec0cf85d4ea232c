// The loopback fake model/web server (tests/programs/fake_model_server.cpp) as the HTTP tests use it,
// and a loop runner for them.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <doctest/doctest.h>
#include <string>

#include "test_util.hpp"

namespace test {

// The loopback fake server (tests/programs/fake_model_server.cpp), ended when this object goes.
class FakeServer {
 public:
  FakeServer() {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::string prog = test::program("fake_model_server").string();
      ::execl(prog.c_str(), prog.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
    ::close(out[0]);
    REQUIRE_MESSAGE(std::sscanf(line.c_str(), "%d %d", &port_, &port2_) == 2, "fake server did not start: " << line);
  }
  ~FakeServer() {
    ::close(stdin_);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  int port() const { return port_; }
  int port2() const { return port2_; }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Base URL of a model scenario with fresh per-test state.
  std::string scenario(const std::string& name, const std::string& token) const {
    return base() + "/s/" + name + "/" + token;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int port_ = 0, port2_ = 0;
};

template <class Pred>
inline bool run_until(boost::asio::io_context& io, Pred done,
                      std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(50));
  }
  return done();
}

}  // namespace test
