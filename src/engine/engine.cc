#include "engine/engine.h"

namespace ringcomm::engine {

Engine::Engine() : thread_([this] { loop(); }) {}

Engine::~Engine() { stop(); }

void Engine::run(Item& item) {
  std::exception_ptr error;
  try {
    item.task();
  } catch (...) {
    error = std::current_exception();
  }
  item.work->complete(error);
}

WorkPtr Engine::submit(std::function<void()> task, bool runInCaller) {
  Item item{std::move(task), std::make_shared<Work>()};
  WorkPtr work = item.work;
  std::unique_lock<std::mutex> lock(mutex_);
  if (runInCaller && queue_.empty() && !busy_) {
    busy_ = true;
    lock.unlock();
    run(item);
    lock.lock();
    busy_ = false;
    if (!queue_.empty()) wake_.notify_all();
    return work;
  }
  queue_.push_back(std::move(item));
  wake_.notify_all();
  return work;
}

void Engine::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty() && !busy_); });
    if (queue_.empty()) return;  // stopping, and everything submitted has run
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    run(item);
    lock.lock();
    busy_ = false;
  }
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

}  // namespace ringcomm::engine
