// What the debug log's and the trace's hooks cost per call, off and on, in a tight loop
// (bench/RESULTS.md, "Logging and tracing off"). Build and run from the repository root:
//
//   g++ -O3 -DNDEBUG -std=c++17 -Iinclude -Isrc bench/observability_overhead.cc \
//       src/common/log.cc src/common/trace.cc src/common/config.cc src/common/types.cc \
//       src/bootstrap/store.cc src/common/socket.cc -lpthread -o /tmp/observability_overhead
//   /tmp/observability_overhead        # tracing off
//   /tmp/observability_overhead on     # tracing on (RINGCOMM_TRACE set; nothing is written)
#include <chrono>
#include <cstdio>

#include "common/log.h"
#include "common/trace.h"
#include "ringcomm/config.h"

namespace {

volatile int sink;

template <typename Body>
double nanosecondsPerCall(Body body, int calls) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) body(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         calls;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringcomm;
  const bool on = argc > 1;
  Config config;
  if (on) config.traceFile = "/dev/null";  // recorded, never written: no communicator shuts down
  configureObservability(config, 0);
  const int calls = 20'000'000;
  for (int round = 0; round < 5; ++round) {
    const double empty = nanosecondsPerCall([](int i) { sink = i; }, calls);
    const double span = nanosecondsPerCall(
        [](int i) {
          trace::Span span(trace::Phase::Reduce);
          sink = i;
        },
        on ? calls / 20 : calls);
    const double log = nanosecondsPerCall(
        [](int i) {
          RINGCOMM_LOG(LogLevel::Info, kLogAlgo, "%d", i);  // RINGCOMM_DEBUG=WARN: not written
          sink = i;
        },
        calls);
    std::printf("trace %s: loop %.2f ns/call; with a Span %.2f; with an INFO line at WARN %.2f\n",
                on ? "on" : "off", empty, span, log);
  }
}
