// Blocking work off the event loop (git steps, copies, tree walks, sandbox plans, policy files,
// transcript files): it runs on a small process-wide pool of worker threads and its result is posted
// back to the loop, so one slow child never delays another child's answer.
//
//   OffloadGroup jobs_;                                  // a member of the loop object that owns the work
//   jobs_.run(io_, [in = copy] { return slow(in); },    // on a worker: touches only what it captured
//             [this](Outcome<R> r) { ... });             // on the loop thread, unless the owner is gone
//
// Thread-safety: `work` runs on a worker thread and must use only what it captured by value (never
// loop-owned state); `done` runs on `io`'s thread, and not at all once the group is destroyed.
// ~OffloadGroup waits for work already running (its result is dropped) and cancels work not yet
// started, so a loop object can be destroyed before its io_context. `done` captures `this` or other
// plain handles, never a strong reference to the group's owner (that would keep the owner alive).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace supervisor {

// What a piece of offloaded work produced: its value, or the what() of the exception it threw.
template <class R>
struct Outcome {
  std::optional<R> value;
  std::string error;  // set when !value
  explicit operator bool() const noexcept { return value.has_value(); }
};
template <>
struct Outcome<void> {
  bool ok = false;
  std::string error;
  explicit operator bool() const noexcept { return ok; }
};

namespace detail {
// Runs `job` on the process-wide pool (4 threads: the work is mostly waiting for git, the disk and
// the kernel, not computing).
void post_to_pool(std::function<void()> job);
}  // namespace detail

class OffloadGroup {
 public:
  OffloadGroup() : state_(std::make_shared<State>()) {}
  // On the loop thread.
  ~OffloadGroup() {
    state_->alive_on_loop = false;
    std::unique_lock lock(state_->mu);
    state_->alive = false;
    state_->idle.wait(lock, [&] { return state_->running == 0; });
  }
  OffloadGroup(const OffloadGroup&) = delete;
  OffloadGroup& operator=(const OffloadGroup&) = delete;

  template <class Work, class Done>
  void run(boost::asio::io_context& io, Work work, Done done) {
    using R = std::invoke_result_t<Work&>;
    auto guard = boost::asio::make_work_guard(io);  // io.run() waits for the result
    struct Job {
      Work work;
      Done done;
    };
    auto job = std::make_shared<Job>(Job{std::move(work), std::move(done)});
    detail::post_to_pool([state = state_, &io, guard, job]() mutable {
      {
        std::lock_guard lock(state->mu);
        if (!state->alive) return;  // the owner is gone: never start its work
        ++state->running;
      }
      auto outcome = std::make_shared<Outcome<R>>();
      try {
        if constexpr (std::is_void_v<R>) {
          job->work();
          outcome->ok = true;
        } else {
          outcome->value.emplace(job->work());
        }
      } catch (const std::exception& e) {
        outcome->error = e.what();
      } catch (...) {
        outcome->error = "unknown error";
      }
      // Posted while `running` still counts this job: the owner's destructor (which runs before
      // the io_context's) waits for it, so `io` is alive here.
      // The job (and what `done` captured) moves to the loop: nothing of the owner's is ever
      // destroyed on a worker.
      boost::asio::post(io, [state, outcome, job = std::move(job)]() mutable {
        if (state->alive_on_loop) job->done(std::move(*outcome));
      });
      guard.reset();
      std::lock_guard lock(state->mu);
      --state->running;
      state->idle.notify_all();
    });
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable idle;
    std::size_t running = 0;
    bool alive = true;          // guarded by mu
    bool alive_on_loop = true;  // read and written on the loop thread only
  };
  std::shared_ptr<State> state_;
};

}  // namespace supervisor
