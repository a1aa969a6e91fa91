// The progress engine: a background thread that runs a communicator's collectives one at a time,
// in the order they were submitted, and completes their Work handles.
//
// A caller that is going to wait at once (a blocking collective) may run its task on its own
// thread when the engine is idle; that saves two thread hand-offs, which is most of the latency
// of a small collective. Ordering is kept: the shortcut is taken only when nothing is queued or
// running.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "ringcomm/work.h"

namespace ringcomm::engine {

class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  WorkPtr submit(std::function<void()> task, bool runInCaller);
  // Runs what is queued, then stops the thread. Idempotent.
  void stop();

 private:
  struct Item {
    std::function<void()> task;
    WorkPtr work;
  };
  void loop();
  static void run(Item& item);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;
  bool busy_ = false;  // a task is running, on the engine thread or a caller's
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringcomm::engine
