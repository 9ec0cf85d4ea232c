// The worker pool behind OffloadGroup, and the io_context service that drains a loop's work when
// the loop is destroyed (offload.hpp).
#include "offload/offload.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <boost/asio/execution_context.hpp>
#include <boost/asio/thread_pool.hpp>

namespace supervisor::detail {

namespace {

// One lock for all offloaded work: tickets are few and coarse (a handful per spawn), and one lock
// makes "started or cancelled, never both" simple to see.
std::mutex& offload_mutex() {
  static std::mutex mu;
  return mu;
}
std::condition_variable& offload_idle() {
  static std::condition_variable cv;
  return cv;
}

// Owned by each io_context that has had work offloaded. Its shutdown() runs in the io_context's
// destructor before any handler is destroyed, while posting still works.
class LoopService : public boost::asio::execution_context::service {
 public:
  static boost::asio::execution_context::id id;
  explicit LoopService(boost::asio::execution_context& ctx)
      : boost::asio::execution_context::service(ctx), set_(std::make_shared<OffloadSet>()) {}
  const std::shared_ptr<OffloadSet>& set() const noexcept { return set_; }

 private:
  void shutdown() override { drain(*set_); }
  std::shared_ptr<OffloadSet> set_;
};
boost::asio::execution_context::id LoopService::id;

// Creates threads that never take SIGINT or SIGTERM (they inherit this mask): the front ends let
// Asio's signal_set take them on the loop, and once it is gone (it restores the default action as
// it goes, before the exit ignores them) a signal taken by a worker would kill the supervisor.
template <class Make>
auto with_exit_signals_blocked(Make make) {
  sigset_t both, old;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &both, &old);
  auto made = make();
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return made;
}

void post_to_pool(std::function<void()> job) {
  // Never destroyed: worker threads may still finish a job while static destructors run at exit.
  static auto* pool = with_exit_signals_blocked([] { return new boost::asio::thread_pool(4); });
  // The workers run at the process's own priority, as does what they fork (git): they do a spawn's
  // and an apply's critical path. At nice 10 (tried, 27f78bb) a machine busy with other work at
  // nice 0 starved them: an implementation child's worktree took 8x longer beside four busy loops
  // (0.5 s quiet, 4.0 s; 1.3 s at nice 0) and a hub test ran past its 30 s under `ctest -j2` in CI.
  boost::asio::post(*pool, std::move(job));
}

void unlink(OffloadTicket& t) {
  for (OffloadSet* s : {t.group.get(), t.loop.get()})
    if (s) std::erase_if(s->queued, [&](const auto& q) { return q.get() == &t; });
}

}  // namespace

void submit(boost::asio::io_context& io, const std::shared_ptr<OffloadTicket>& t, std::function<void()> job) {
  t->loop = boost::asio::use_service<LoopService>(io).set();
  {
    std::lock_guard lock(offload_mutex());
    if (t->group->open && t->loop->open) {
      t->group->queued.push_back(t);
      t->loop->queued.push_back(t);
      post_to_pool(std::move(job));
      return;
    }
    t->cancelled = true;
  }
  t->guard.reset();  // outside the lock: what the job captured may own another group
  t->job.reset();
}

bool begin(OffloadTicket& t, std::shared_ptr<void>& job, std::unique_ptr<OffloadGuard>& guard) {
  std::lock_guard lock(offload_mutex());
  if (t.cancelled) return false;
  unlink(t);
  job = std::move(t.job);
  guard = std::move(t.guard);
  ++t.group->running;
  ++t.loop->running;
  return true;
}

void end(OffloadTicket& t) {
  std::lock_guard lock(offload_mutex());
  --t.group->running;
  --t.loop->running;
  offload_idle().notify_all();
}

void drain(OffloadSet& set) {
  std::vector<std::shared_ptr<void>> jobs;
  std::vector<std::unique_ptr<OffloadGuard>> guards;
  {
    std::unique_lock lock(offload_mutex());
    set.open = false;
    auto queued = std::move(set.queued);
    set.queued.clear();
    for (auto& t : queued) {
      t->cancelled = true;
      unlink(*t);
      jobs.push_back(std::move(t->job));
      guards.push_back(std::move(t->guard));
    }
    offload_idle().wait(lock, [&] { return set.running == 0; });
  }
  // Destroyed here, on the caller's thread, with the lock released (a job may hold a strong
  // reference to an object whose own group drains in its destructor).
  guards.clear();
  jobs.clear();
}

}  // namespace supervisor::detail
