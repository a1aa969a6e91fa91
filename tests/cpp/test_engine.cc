// The progress engine's stop(): it runs what is queued, then every one of the engine's threads
// ends, however many there are and whatever they were doing when it was called.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "check.h"
#include "engine/engine.h"

using namespace ringcomm;

namespace {

// Holds the threads that pass() until open() is called.
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lock(mutex_);
    opened_.wait(lock, [this] { return open_; });
  }
  // pass() with a limit: whether the gate opened within it.
  bool passWithin(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    return opened_.wait_for(lock, limit, [this] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

// The engine keeps a thread free to take the queue while another runs a task's completion
// callbacks: three tasks whose callbacks wait, queued together, leave it three threads or more,
// idle once the callbacks end.
void startThreeThreads(engine::Engine& engine) {
  Gate firstMayEnd;
  Gate callbacksMayEnd;
  std::atomic<int> inCallbacks{0};
  std::atomic<int> doneWithCallbacks{0};
  std::vector<WorkPtr> works{engine.submit([&] { firstMayEnd.pass(); }, false),
                             engine.submit([] {}, false), engine.submit([] {}, false)};
  for (const WorkPtr& work : works) {
    work->onCompletion([&](std::exception_ptr) {
      ++inCallbacks;
      callbacksMayEnd.pass();
      ++doneWithCallbacks;  // the last use of this frame's variables
    });
  }
  firstMayEnd.open();  // only now: no callback may run here, on the caller's thread
  while (inCallbacks.load() < 3) std::this_thread::yield();
  callbacksMayEnd.open();
  while (doneWithCallbacks.load() < 3) std::this_thread::yield();
}

}  // namespace

// stop() called while a task runs with another queued behind it: its wake-up finds nothing for
// the idle threads to do yet, and they wait again. The queue runs dry after that, and they must
// hear of it (they waited forever once, and stop() with them).
TEST(engineStopEndsThreadsThatWaitedOutTheQueue) {
  // Leaked if stop() hangs: its thread goes on using it.
  auto* engine = new engine::Engine();
  startThreeThreads(*engine);
  // Shared with the engine's threads, which outlive this test where stop() hangs.
  auto running = std::make_shared<Gate>();
  auto mayEnd = std::make_shared<Gate>();
  auto stopped = std::make_shared<Gate>();
  engine->submit(
      [running, mayEnd] {
        running->open();
        mayEnd->pass();
      },
      false);
  running->pass();
  WorkPtr queued = engine->submit([] {}, false);
  std::thread([engine, stopped] {
    engine->stop();
    stopped->open();
  }).detach();
  // Time for stop() to tell the idle threads before the running task ends (had it not by then,
  // this would test less, never fail).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  mayEnd->open();
  CHECK(stopped->passWithin(std::chrono::seconds(5)));
  CHECK(queued->isCompleted());
  delete engine;
}
