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
// Lifetimes: work that has not started is cancelled (never run; what it captured is destroyed on the
// cancelling thread) and work that is running is waited for, by whichever ends first of
//   - the group (~OffloadGroup, on the loop thread: its results are dropped), and
//   - the io_context (its destructor: results already posted are destroyed with its other handlers).
// So a loop object may be destroyed before its io_context, and an io_context may be destroyed with
// work in flight, even work whose `done` holds a strong reference to the group's owner: no worker
// ever touches an io_context that is gone, and nothing a job captured is destroyed on a worker.
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
#include <vector>

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

// One run(): created on the loop thread, started by a worker or cancelled, never both. Its fields
// are guarded by offload_mutex().
struct OffloadTicket;
// What one OffloadGroup, or one io_context, has in flight.
struct OffloadSet {
  std::size_t running = 0;
  std::vector<std::shared_ptr<OffloadTicket>> queued;
  bool open = true;  // false once its group or io_context is ending: nothing more is queued in it
};
using OffloadGuard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;
struct OffloadTicket {
  std::unique_ptr<OffloadGuard> guard;  // io.run() waits for the result
  std::shared_ptr<void> job;            // the work and `done`, with what they captured
  std::shared_ptr<OffloadSet> group, loop;
  bool cancelled = false;
};

// Registers a ticket in its group and in its io_context's set (or cancels it at once if either is
// ending), then hands `job` to the process-wide pool (4 threads: the work is mostly waiting for
// git, the disk and the kernel, not computing).
void submit(boost::asio::io_context& io, const std::shared_ptr<OffloadTicket>& t, std::function<void()> job);
// On a worker: takes the ticket's job and guard out and counts it running, or returns false if it
// was cancelled.
bool begin(OffloadTicket& t, std::shared_ptr<void>& job, std::unique_ptr<OffloadGuard>& guard);
// On a worker, once the result is posted (or dropped): no longer running.
void end(OffloadTicket& t);
// Cancels what `set` has queued and waits until none of its work runs. The cancelled jobs and
// guards are destroyed on the calling thread, after the lock is released.
void drain(OffloadSet& set);

}  // namespace detail

class OffloadGroup {
 public:
  OffloadGroup() : set_(std::make_shared<detail::OffloadSet>()) {}
  // On the loop thread, while the io_context of every run() is still alive (or already gone: then
  // its destructor did the same).
  ~OffloadGroup() {
    *alive_on_loop_ = false;
    detail::drain(*set_);
  }
  OffloadGroup(const OffloadGroup&) = delete;
  OffloadGroup& operator=(const OffloadGroup&) = delete;

  template <class Work, class Done>
  void run(boost::asio::io_context& io, Work work, Done done) {
    using R = std::invoke_result_t<Work&>;
    struct Job {
      Work work;
      Done done;
    };
    auto ticket = std::make_shared<detail::OffloadTicket>();
    ticket->guard = std::make_unique<detail::OffloadGuard>(io.get_executor());
    ticket->job = std::make_shared<Job>(Job{std::move(work), std::move(done)});
    ticket->group = set_;
    detail::submit(io, ticket, [&io, ticket, alive = alive_on_loop_] {
      std::shared_ptr<void> erased;
      std::unique_ptr<detail::OffloadGuard> guard;
      if (!detail::begin(*ticket, erased, guard)) return;
      auto job = std::static_pointer_cast<Job>(std::move(erased));
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
      // `io` is alive here: its destructor (like the group's) waits while this job counts as
      // running. The job, and what `done` captured, moves to the loop: nothing of the owner's is
      // destroyed on a worker.
      boost::asio::post(io, [alive, outcome, job = std::move(job)]() mutable {
        if (*alive) job->done(std::move(*outcome));
      });
      guard.reset();
      detail::end(*ticket);
    });
  }

 private:
  std::shared_ptr<detail::OffloadSet> set_;
  std::shared_ptr<bool> alive_on_loop_ = std::make_shared<bool>(true);  // read and written on the loop only
};

}  // namespace supervisor
