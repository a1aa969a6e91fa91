#include "engine/engine.h"

namespace ringcomm::engine {

Engine::Engine() {
  std::lock_guard<std::mutex> lock(mutex_);
  threads_.emplace_back([this] { loop(); });
}

Engine::~Engine() { stop(); }

std::exception_ptr Engine::run(Item& item) {
  try {
    item.task();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Engine::ensureRunner() {
  if (queue_.empty() || busy_ || idleThreads_ > 0 || stopping_) return;
  threads_.emplace_back([this] { loop(); });
}

WorkPtr Engine::submit(std::function<void()> task, bool runInCaller) {
  Item item{std::move(task), std::make_shared<Work>()};
  WorkPtr work = item.work;
  std::unique_lock<std::mutex> lock(mutex_);
  if (runInCaller && queue_.empty() && !busy_) {
    busy_ = true;
    lock.unlock();
    std::exception_ptr error = run(item);
    lock.lock();
    busy_ = false;
    ensureRunner();
    wake_.notify_one();
    lock.unlock();
    item.work->complete(error);
    return work;
  }
  queue_.push_back(std::move(item));
  ensureRunner();
  wake_.notify_one();
  return work;
}

void Engine::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ++idleThreads_;
    wake_.wait(lock, [this] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
    --idleThreads_;
    if (queue_.empty()) return;  // stopping, and everything submitted has run
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error = run(item);
    lock.lock();
    busy_ = false;
    // The callbacks below may wait for work queued behind this one: hand the queue on first.
    ensureRunner();
    wake_.notify_one();
    lock.unlock();
    item.work->complete(error);
    lock.lock();
  }
}

void Engine::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (auto& thread : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();  // stop() from a callback on an engine thread: it exits on its own
    } else if (thread.joinable()) {
      thread.join();
    }
  }
}

}  // namespace ringcomm::engine
