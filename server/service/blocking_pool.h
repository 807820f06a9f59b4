// A few threads for handler work that may wait on the session store (a Redis round trip,
// a file read, a spill to make room), so gRPC's callback threads never block on I/O.
// Handlers start their reactor, hand the work here, and the work finishes the reactor.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attnserve::service {

class BlockingPool {
 public:
  // Starts `threads` workers; at most `max_queued` tasks wait at once.
  BlockingPool(int threads, int max_queued);
  // Runs every queued task, then joins the workers.
  ~BlockingPool();
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Queues `task`; false (and `task` not run) when max_queued tasks already wait.
  bool Run(std::function<void()> task);

 private:
  void Work();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace attnserve::service
