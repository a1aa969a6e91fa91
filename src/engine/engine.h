// The progress engine: runs a communicator's collectives one at a time, in the order they were
// submitted, and completes their Work handles.
//
// A caller that is going to wait at once (a blocking collective) may run its task on its own
// thread when the engine is idle; that saves two thread hand-offs, which is most of the latency
// of a small collective. Ordering is kept: the shortcut is taken only when nothing is queued or
// running.
//
// Completing a Work runs its callbacks (a torch Future's `then` chain, say), and a callback may
// submit a collective and wait for it (DDP's PowerSGD hook does). So the thread that ran a task
// gives up the right to run the next one before it runs the callbacks, and the engine keeps a
// thread free to take the queue: one thread normally, another for each callback still running.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ringcomm/work.h"

namespace ringcomm::engine {

class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  WorkPtr submit(std::function<void()> task, bool runInCaller);
  // Runs what is queued, then stops the threads. Idempotent.
  void stop();

 private:
  struct Item {
    std::function<void()> task;
    WorkPtr work;
  };
  void loop();
  static std::exception_ptr run(Item& item);
  // Called with the lock held: starts a thread if work is queued and no thread is free to run it.
  void ensureRunner();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;
  bool busy_ = false;  // a task is running, on an engine thread or a caller's
  bool stopping_ = false;
  int idleThreads_ = 0;  // engine threads waiting for work
  std::vector<std::thread> threads_;
};

}  // namespace ringcomm::engine
