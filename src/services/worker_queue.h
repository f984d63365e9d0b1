// Threads of a service's own for work that must not run on the progress thread (disk, tokenizing).
// Each item runs on a worker and returns its continuation, which the queue posts to the progress
// thread. The item is destroyed before that post, so the continuation is the last owner of what
// both captured (a client's region, its connection): those are released on the progress thread,
// as the channel needs.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "outboard/service.h"

namespace outboard::services {

class WorkerQueue {
 public:
  using Work = std::function<std::function<void()>()>;

  WorkerQueue() = default;
  WorkerQueue(const WorkerQueue&) = delete;
  WorkerQueue& operator=(const WorkerQueue&) = delete;
  ~WorkerQueue() { stop(); }

  /// Posts continuations to `host`, with `threads` workers, started by the first push() (an agent
  /// whose clients never use the service runs none).
  void attach(ServiceHost& host, uint32_t threads);

  /// Queues `work` unless `limit` items already wait for a worker: false then.
  [[nodiscard]] bool push(Work work, size_t limit);

  /// Items waiting for a worker.
  size_t waiting();

  /// Stops and joins the workers once the items they run are done; items still waiting are dropped.
  void stop();

 private:
  void run();

  ServiceHost* host_ = nullptr;
  uint32_t threads_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace outboard::services
