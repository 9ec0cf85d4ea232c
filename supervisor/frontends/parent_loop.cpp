// The parent's side of a front end (parent_loop.hpp).
#include "frontends/parent_loop.hpp"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <functional>

#include <boost/asio/signal_set.hpp>

namespace supervisor {

void run_parent_loop(boost::asio::io_context& io, std::shared_ptr<ParentIo>& parent, std::size_t max_line,
                     ParentLoop loop) {
  parent = ParentIo::create(io, STDIN_FILENO, STDOUT_FILENO, max_line, {loop.on_message, loop.on_bad_line, [&loop] {
                                                                          if (loop.on_eof)
                                                                            loop.on_eof();
                                                                          else
                                                                            loop.on_end(loop.eof_reason);
                                                                        }});
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
