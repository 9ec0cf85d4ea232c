// The worker pool behind OffloadGroup (offload.hpp).
#include "orchestration/offload.hpp"

#include <boost/asio/thread_pool.hpp>

namespace supervisor::detail {

void post_to_pool(std::function<void()> job) {
  // Never destroyed: worker threads may still finish a job while static destructors run at exit.
  static auto* pool = new boost::asio::thread_pool(4);
  boost::asio::post(*pool, std::move(job));
}

}  // namespace supervisor::detail
