#include "server/service/blocking_pool.h"

namespace attnserve::service {

BlockingPool::BlockingPool(int threads, int max_queued) : max_queued_(size_t(max_queued)) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

BlockingPool::~BlockingPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

bool BlockingPool::Run(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tasks_.size() >= max_queued_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void BlockingPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace attnserve::service
