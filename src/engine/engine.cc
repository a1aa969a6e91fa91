#include "engine/engine.h"

#include <memory>

#include "common/trace.h"

namespace ringcomm::engine {
namespace {

void completeAll(std::vector<std::pair<WorkPtr, std::exception_ptr>>& finished) {
  for (auto& [work, error] : finished) work->complete(error);
}

}  // namespace

Engine::Engine(std::function<PollResult(bool)> poller) : poller_(std::move(poller)) {
  std::lock_guard<std::mutex> lock(mutex_);
  threads_.emplace_back([this] { loop(); });
}

Engine::~Engine() { stop(); }

std::vector<std::pair<WorkPtr, std::exception_ptr>> Engine::runExclusive(Item* item,
                                                                         bool mayBlock,
                                                                         bool& pending) {
  std::vector<std::pair<WorkPtr, std::exception_ptr>> finished;
  if (item != nullptr) {
    std::exception_ptr error;
    try {
      item->task(item->work);
    } catch (...) {
      error = std::current_exception();
    }
    if (error || !item->deferred) finished.emplace_back(item->work, error);
  }
  if (poller_) {
    PollResult poll = poller_(mayBlock);
    pending = poll.pending;
    for (auto& done : poll.finished) finished.push_back(std::move(done));
  }
  return finished;
}

void Engine::handOn(bool pending) {
  pending_ = pending;
  busy_ = false;
  ensureRunner();
  if (stopping_ && queue_.empty()) {
    // Stopping, and the queue has run dry: every waiting thread may exit now, and only this
    // tells them. stop()'s own wake-up may have come while this task ran with more queued behind
    // it, and sent them back to wait; stop() joins them.
    wake_.notify_all();
  } else if (!queue_.empty() || pending_) {
    // Wake a waiting thread only when there is work for it: a needless wake-up costs a small
    // collective's caller several microseconds on a busy core.
    wake_.notify_one();
  }
}

void Engine::ensureRunner() {
  if ((queue_.empty() && !pending_) || busy_ || idleThreads_ > 0 || stopping_) return;
  threads_.emplace_back([this] { loop(); });
}

WorkPtr Engine::submit(std::function<void()> task, bool runInCaller) {
  return enqueue(Item{[task = std::move(task)](const WorkPtr&) { task(); },
                      std::make_shared<Work>(), false},
                 runInCaller);
}

WorkPtr Engine::submitDeferred(std::function<void(const WorkPtr&)> task) {
  return enqueue(Item{std::move(task), std::make_shared<Work>(), true}, false);
}

WorkPtr Engine::enqueue(Item item, bool runInCaller) {
  WorkPtr work = item.work;
  std::unique_lock<std::mutex> lock(mutex_);
  if (runInCaller && queue_.empty() && !busy_) {
    busy_ = true;
    bool pending = pending_;
    lock.unlock();
    auto finished = runExclusive(&item, false, pending);
    lock.lock();
    handOn(pending);
    lock.unlock();
    completeAll(finished);
    return work;
  }
  queue_.push_back(std::move(item));
  ensureRunner();
  wake_.notify_one();
  return work;
}

void Engine::loop() {
  trace::nameThisThread("engine");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ++idleThreads_;
    wake_.wait(lock, [this] {
      return (!busy_ && (!queue_.empty() || pending_)) || (stopping_ && queue_.empty());
    });
    --idleThreads_;
    if (queue_.empty() && (stopping_ || busy_ || !pending_)) return;  // stopping, all run
    busy_ = true;
    bool pending = pending_;
    std::vector<std::pair<WorkPtr, std::exception_ptr>> finished;
    if (!queue_.empty()) {
      Item item = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      finished = runExclusive(&item, false, pending);
    } else {
      // Only deferred work is left: let the poller wait a moment for it.
      lock.unlock();
      finished = runExclusive(nullptr, true, pending);
    }
    lock.lock();
    // The callbacks below may wait for work queued behind this one: hand the queue on first.
    handOn(pending);
    lock.unlock();
    completeAll(finished);
    lock.lock();
  }
}

bool Engine::stop() {
  std::vector<std::thread> threads;
  bool joinedAll = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (auto& thread : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();  // stop() from a callback on an engine thread: it exits on its own
      joinedAll = false;
    } else if (thread.joinable()) {
      thread.join();
    }
  }
  return joinedAll;
}

}  // namespace ringcomm::engine
