// The progress engine: runs a communicator's collectives one at a time, in the order they were
// submitted, and completes their Work handles.
//
// A caller that is going to wait at once (a blocking collective) may run its task on its own
// thread when the engine is idle; that saves two thread hand-offs, which is most of the latency
// of a small collective. Ordering is kept: the shortcut is taken only when nothing is queued or
// running.
//
// Point-to-point messages do not run to completion in their turn: a send or receive is posted
// and its Work completes later (a receive posted before the matching send must not hold up the
// send queued behind it). Such "deferred" tasks complete their own Work; the engine keeps calling
// the poller it was given, between tasks and while idle, until nothing is pending.
//
// Completing a Work runs its callbacks (a torch Future's `then` chain, say), and a callback may
// submit a collective and wait for it (DDP's PowerSGD hook does). So the thread that ran a task
// gives up the right to run the next one before it runs the callbacks, and the engine keeps a
// thread free to take the queue: one thread normally, another for each callback still running.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ringcomm/work.h"

namespace ringcomm::engine {

// What a poll of deferred work found: whether any is still pending, and what finished.
struct PollResult {
  bool pending = false;
  std::vector<std::pair<WorkPtr, std::exception_ptr>> finished;
};

class Engine {
 public:
  // poller(mayBlock): progresses deferred work; with mayBlock it may wait a moment for some.
  // It runs with the same exclusive right as a task.
  explicit Engine(std::function<PollResult(bool mayBlock)> poller = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  WorkPtr submit(std::function<void()> task, bool runInCaller);
  // The task completes the Work itself, later, through the poller (unless it throws).
  WorkPtr submitDeferred(std::function<void(const WorkPtr&)> task);
  // Runs what is queued, then stops the threads; deferred work still pending stays pending.
  // False when called on one of the engine's own threads (from a callback): that thread is left
  // to finish on its own, so what it uses must stay alive.
  bool stop();

 private:
  struct Item {
    std::function<void(const WorkPtr&)> task;
    WorkPtr work;
    bool deferred = false;
  };
  void loop();
  WorkPtr enqueue(Item item, bool runInCaller);
  // Runs the task (or a poll when item is null) holding the exclusive right; returns what to
  // complete once the right is handed on.
  // `pending` is updated from the poller (written back under the lock by the caller).
  std::vector<std::pair<WorkPtr, std::exception_ptr>> runExclusive(Item* item, bool mayBlock,
                                                                   bool& pending);
  // Called with the lock held once a task or poll has run: gives up the exclusive right (with
  // the poller's `pending`) and wakes the threads that now have something to do.
  void handOn(bool pending);
  // Called with the lock held: starts a thread if work is queued and no thread is free to run it.
  void ensureRunner();

  std::function<PollResult(bool)> poller_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;
  bool busy_ = false;     // a task or poll is running, on an engine thread or a caller's
  bool pending_ = false;  // the poller has deferred work outstanding
  bool stopping_ = false;
  int idleThreads_ = 0;  // engine threads waiting for work
  std::vector<std::thread> threads_;
};

}  // namespace ringcomm::engine
