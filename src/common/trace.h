// The timeline: every collective's phases, and the tensor queue's, recorded into this process's
// memory while something wants them (RINGCOMM_TRACE, or Horovod's timeline), and written out
// only at the end - never any I/O on the path of a collective.
//
//   trace::Span span(trace::Phase::Reduce);     // times this scope, when tracing is on
//   if (span.active()) span.event().bytes = n;  // details cost only when on
//
// When nothing wants events, a Span is one relaxed load and a branch.
//
// Two views render the same events (trace.cc): the Chrome trace format (RINGCOMM_TRACE; one
// process row per rank, merged by rank 0 through the store at shutdown) and Horovod's timeline
// format (one row per tensor name, rank 0's events).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ringcomm/debug.h"

namespace ringcomm {

struct Config;

namespace trace {

// Phases, in the words the trace shows.
enum class Phase : uint8_t {
  Collective,     // a whole collective; detail: its kind ("allreduce")
  ReduceScatter,  // the reduce-scatter half of an all-reduce
  Gather,         // the all-gather half (or the direct schedule's copy of the others' slices)
  Wait,           // waiting for peers (their data, or their progress); rank: the peer
  Stage,          // copying device buffers through host memory, or into a shared-memory slot
  Reduce,         // reduction kernels
  Copy,           // plain copies (input to output)
  Codec,          // fp16/bf16 encoding and decoding of the wire format
  // The tensor queue. id: the request's serial number (one per submission), label: its name.
  Negotiate,  // submission (or the first rank's announcement) to readiness on every rank
  RankReady,  // instant: rank `rank`'s announcement of the name arrived
  Queue,      // ready to the start of its collective
  FusionIn,   // copies into the fusion buffer; group: the run
  FusionOut,  // copies out of it; group: the run
  Tensor,     // the request's collective, fused or not; group: the run, detail: "ALLREDUCE"...
  Cycle,      // instant: a queue cycle that had something to do began
};

const char* nameOf(Phase phase);

extern std::atomic<bool> gOn;
inline bool on() { return gOn.load(std::memory_order_relaxed); }

int64_t now();  // nanoseconds on the steady clock

struct Event {
  Phase phase = Phase::Collective;
  bool instant = false;
  int64_t start = 0;  // now()
  int64_t duration = 0;
  uint32_t thread = 0;  // set by record()
  int64_t id = -1;
  int64_t group = -1;
  int32_t rank = -1;
  uint64_t bytes = 0;
  const char* detail = nullptr;  // static text
  std::string label;
  std::string args;  // extra JSON members, already formatted: "\"dtype\": \"float32\""
};

// Keeps an event (up to Config::traceMaxEvents; later ones are counted).
void record(Event event);

inline void instant(Phase phase, int64_t at, Event event) {
  event.phase = phase;
  event.instant = true;
  event.start = at;
  record(std::move(event));
}

// Times its scope.
class Span {
 public:
  explicit Span(Phase phase, const char* detail = nullptr) {
    if (!on()) return;
    event_.emplace();
    event_->phase = phase;
    event_->detail = detail;
    event_->start = now();
  }
  ~Span() {
    if (!event_) return;
    event_->duration = now() - event_->start;
    record(std::move(*event_));
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool active() const { return event_.has_value(); }
  Event& event() { return *event_; }

 private:
  std::optional<Event> event_;
};

// Names the calling thread's row ("engine", "tensor queue").
void nameThisThread(const char* name);

// Called by configureObservability(): RINGCOMM_TRACE and the event limit, and the rank.
void configure(const Config& config, int rank);

// The communicator that takes RINGCOMM_TRACE's file: the first one of the process created
// while it is set (duplicates and later ones get false). At its shutdown it calls writeTrace()
// (bootstrap/trace_gather.h), which gathers every rank's part with these two.
bool claimTraceFile();

// This process's events as its part of the Chrome trace, and RINGCOMM_TRACE's file (empty when
// no trace is recorded); the file may be claimed again after.
struct TracePart {
  std::string path;
  std::string json;
};
TracePart takeTracePart(int rank);
// Writes the ranks' parts (in rank order; a missing rank's is empty and named in `missing`) as
// one Chrome trace file at `path`, through a temporary file renamed into place.
bool writeTraceFile(const std::string& path, const std::vector<std::string>& parts,
                    const std::vector<int>& missing);

}  // namespace trace
}  // namespace ringcomm
