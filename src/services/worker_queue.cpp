#include "services/worker_queue.h"

namespace outboard::services {

void WorkerQueue::attach(ServiceHost& host, uint32_t threads) {
  std::lock_guard lock(mu_);
  host_ = &host;
  threads_ = threads;
}

bool WorkerQueue::push(Work work, size_t limit) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= limit) return false;
    if (workers_.empty())
      for (uint32_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { run(); });
    queue_.push_back(std::move(work));
  }
  cv_.notify_one();
  return true;
}

size_t WorkerQueue::waiting() {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void WorkerQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void WorkerQueue::run() {
  while (true) {
    Work work;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    auto next = work();
    work = nullptr;
    host_->post(std::move(next));
  }
}

}  // namespace outboard::services
