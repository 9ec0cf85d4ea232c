// The parent's side of a front end (parent_loop.hpp).
#include "frontends/parent_loop.hpp"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <functional>

#include <boost/asio/signal_set.hpp>

namespace supervisor {

void RequestGate::submit(std::function<void()> f) {
  if (!holding_ && waiting_.empty()) return f();
  waiting_.push_back(std::move(f));
}

void RequestGate::hold() {
  holding_ = true;
  if (paused_) return;
  paused_ = true;
  if (on_hold) on_hold(true);
}

void RequestGate::release() {
  holding_ = false;
  if (releasing_) return;  // the release further up the stack goes on
  releasing_ = true;
  struct Done {
    bool& releasing;
    ~Done() { releasing = false; }
  } done{releasing_};
  while (!holding_ && !waiting_.empty()) {
    auto f = std::move(waiting_.front());
    waiting_.pop_front();
    f();
  }
  if (holding_ || !paused_) return;
  paused_ = false;
  if (on_hold) on_hold(false);
}

void run_parent_loop(boost::asio::io_context& io, std::shared_ptr<ParentIo>& parent, std::size_t max_line,
                     ParentLoop loop) {
  auto eof = [&loop] {
    if (loop.on_eof)
      loop.on_eof();
    else
      loop.on_end(loop.eof_reason);
  };
  ParentIo::Handlers handlers{loop.on_message, loop.on_bad_line, eof};
  if (RequestGate* gate = loop.gate) {
    handlers.on_message = [&loop, gate](const nlohmann::json& m) { gate->submit([&loop, m] { loop.on_message(m); }); };
    handlers.on_bad_line = [&loop, gate](const std::string& e) { gate->submit([&loop, e] { loop.on_bad_line(e); }); };
    handlers.on_eof = [gate, eof] { gate->submit(eof); };
    gate->on_hold = [&parent](bool holding) {
      if (!parent) return;
      if (holding)
        parent->pause_reading();
      else
        parent->resume_reading();
    };
  }
  parent = ParentIo::create(io, STDIN_FILENO, STDOUT_FILENO, max_line, std::move(handlers));
  {
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    // The first signal ends the front end; later ones (Codex sends SIGTERM twice) are taken and
    // ignored while the shutdown runs, so the process still exits 0 after reporting every child.
    bool ending = false;
    std::function<void()> arm = [&] {
      signals.async_wait([&](boost::system::error_code ec, int sig) {
        if (ec) return;
        if (!ending) {
          ending = true;
          loop.on_end(sig == SIGINT ? "the supervisor got SIGINT" : "the supervisor got SIGTERM");
        }
        arm();
      });
    };
    arm();
    parent->start();
    io.run();
    // Destroying the signal set restores the default action (death by signal): hold the signals
    // back on this thread until they are ignored for the rest of the exit.
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &both, nullptr);
  }
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
}

void end_front_end(boost::asio::io_context& io, Operations* ops, const std::shared_ptr<ParentIo>& parent,
                   const std::string& why) {
  auto finish = [&io, parent] { parent->flush([&io] { io.stop(); }); };
  if (!ops) return finish();
  ops->shutdown(why, finish);
}

}  // namespace supervisor
