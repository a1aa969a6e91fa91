// The recorder behind trace.h, and its two views: the Chrome trace format (RINGCOMM_TRACE) and
// Horovod's timeline format (startHorovodTimeline / stopHorovodTimeline).
#include "common/trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/process.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace trace {

std::atomic<bool> gOn{false};

namespace {

// Rows of the Chrome view for the tensor queue's per-name phases: one per name, after the
// threads' rows.
constexpr uint32_t kTensorRowBase = 1000;

std::atomic<uint32_t> threadsSeen{0};
thread_local uint32_t tThread = 0;

uint32_t thisThread() {
  if (tThread == 0) tThread = threadsSeen.fetch_add(1) + 1;
  return tThread;
}

struct HorovodTimeline {
  bool active = false;
  std::string path;
  bool markCycles = false;
  int64_t start = 0;
};

struct Recorder {
  std::mutex mutex;
  std::vector<Event> events;
  size_t maxEvents = 1u << 20;
  uint64_t dropped = 0;
  std::map<uint32_t, std::string> threadNames;
  int rank = -1;
  std::string host;
  bool configured = false;
  std::string traceFile;  // RINGCOMM_TRACE
  bool traceClaimed = false;
  HorovodTimeline horovod;

  // Called with the mutex held.
  void updateOn() { gOn.store(!traceFile.empty() || horovod.active, std::memory_order_relaxed); }
};

Recorder& recorder() {
  static Recorder* instance = new Recorder();  // never destroyed: threads may record during exit
  return *instance;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char code[8];
      std::snprintf(code, sizeof(code), "\\u%04x", u);
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

// Steady-clock nanoseconds to Unix-epoch microseconds, text with nanosecond digits: ranks on
// one host share the clock; across hosts the wall clocks' agreement (NTP) aligns them.
struct EpochClock {
  int64_t offset;  // system - steady, nanoseconds
  EpochClock() {
    const int64_t system = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    offset = system - now();
  }
  std::string micros(int64_t steady) const {
    const int64_t ns = steady + offset;
    char text[40];
    std::snprintf(text, sizeof(text), "%" PRId64 ".%03d", ns / 1000, static_cast<int>(ns % 1000));
    return text;
  }
};

std::string microsText(int64_t ns) {
  char text[40];
  std::snprintf(text, sizeof(text), "%" PRId64 ".%03d", ns / 1000,
                static_cast<int>(std::max<int64_t>(ns, 0) % 1000));
  return text;
}

bool tensorPhase(Phase phase) {
  return phase == Phase::Negotiate || phase == Phase::RankReady || phase == Phase::Queue ||
         phase == Phase::Tensor;
}

// This rank's events as Chrome trace objects, comma-separated (no brackets): rank 0 joins the
// ranks' parts into one array.
std::string chromePart(const std::vector<Event>& events, const std::map<uint32_t, std::string>& names,
                       int rank, const std::string& host, uint64_t dropped) {
  const EpochClock clock;
  const std::string pid = std::to_string(std::max(rank, 0));
  std::string out;
  auto add = [&out](const std::string& object) {
    if (!out.empty()) out += ",\n";
    out += object;
  };
  add("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
      ", \"args\": {\"name\": \"rank " + pid + " (" + escaped(host) + ", pid " +
      std::to_string(getpid()) + ")\"}}");
  add("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
      ", \"args\": {\"sort_index\": " + pid + "}}");
  if (dropped > 0) {
    add("{\"name\": \"process_labels\", \"ph\": \"M\", \"pid\": " + pid +
        ", \"args\": {\"labels\": \"" + std::to_string(dropped) +
        " events dropped (RINGCOMM_TRACE_MAX_EVENTS)\"}}");
  }
  for (const auto& [thread, name] : names) {
    add("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid +
        ", \"tid\": " + std::to_string(thread) + ", \"args\": {\"name\": \"" + escaped(name) +
        "\"}}");
  }
  std::unordered_map<std::string, uint32_t> tensorRows;
  for (const Event& e : events) {
    uint32_t tid = e.thread;
    if (tensorPhase(e.phase)) {
      auto [it, added] = tensorRows.emplace(e.label, kTensorRowBase + tensorRows.size());
      tid = it->second;
      if (added) {
        add("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " +
            std::to_string(tid) + ", \"args\": {\"name\": \"tensor " + escaped(e.label) +
            "\"}}");
      }
    }
    std::string name = nameOf(e.phase);
    if (e.phase == Phase::Collective && e.detail != nullptr) name = e.detail;
    if (e.phase == Phase::RankReady) name = "rank " + std::to_string(e.rank) + " ready";
    std::string args;
    auto arg = [&args](const std::string& member) {
      args += (args.empty() ? "" : ", ") + member;
    };
    if (!e.label.empty() && e.phase != Phase::RankReady) {
      arg("\"name\": \"" + escaped(e.label) + "\"");
    }
    if (e.detail != nullptr && e.phase != Phase::Collective) {
      arg("\"detail\": \"" + escaped(e.detail) + "\"");
    }
    if (e.bytes > 0) arg("\"bytes\": " + std::to_string(e.bytes));
    if (e.rank >= 0 && e.phase == Phase::Wait) arg("\"peer\": " + std::to_string(e.rank));
    if (e.id >= 0) {
      arg(std::string(tensorPhase(e.phase) ? "\"request\": " : "\"sequence\": ") +
          std::to_string(e.id));
    }
    if (e.group >= 0) arg("\"run\": " + std::to_string(e.group));
    if (!e.args.empty()) arg(e.args);
    std::string object = "{\"name\": \"" + escaped(name) + "\", \"cat\": \"" +
                         (tensorPhase(e.phase) || e.phase == Phase::FusionIn ||
                                  e.phase == Phase::FusionOut || e.phase == Phase::Cycle
                              ? "queue"
                              : "collective") +
                         "\", \"pid\": " + pid + ", \"tid\": " + std::to_string(tid) +
                         ", \"ts\": " + clock.micros(e.start);
    if (e.instant) {
      object += ", \"ph\": \"i\", \"s\": \"t\"";
    } else {
      object += ", \"ph\": \"X\", \"dur\": " + microsText(e.duration);
    }
    if (!args.empty()) object += ", \"args\": {" + args + "}";
    add(object + "}");
  }
  return out;
}

std::string chromeFile(const std::vector<std::string>& parts, const std::vector<int>& missing) {
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  for (const std::string& part : parts) {
    if (part.empty()) continue;
    if (!first) out += ",\n";
    out += part;
    first = false;
  }
  out += "\n],\n\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"producer\": \"ringcomm\", "
         "\"ranks\": " + std::to_string(parts.size()) + ", \"missing_ranks\": [";
  for (size_t i = 0; i < missing.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(missing[i]);
  }
  out += "]}}\n";
  return out;
}

bool writeFile(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) return false;
    file << text;
    if (!file.good()) return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

// ---- Horovod's view ---------------------------------------------------------------------------
// One row (a "process") per tensor name; per request: NEGOTIATE_<OP> with a tick per rank as its
// announcement arrived, then <OP> with the activities QUEUE, MEMCPY_IN_FUSION_BUFFER, the
// collective itself (RINGCOMM_<OP>) and MEMCPY_OUT_FUSION_BUFFER; CYCLE_START markers if asked.
// Horovod's file is rank 0's, as here: rank 0 sees every rank's announcements.
std::string horovodFile(const std::vector<Event>& events, int64_t begin, int64_t end,
                        bool markCycles) {
  struct Record {
    int64_t ts;
    std::string json;
  };
  std::vector<Record> records;
  std::unordered_map<std::string, int> rows;
  std::vector<std::string> rowOrder;
  auto rowOf = [&](const std::string& name) {
    auto [it, added] = rows.emplace(name, static_cast<int>(rows.size()) + 1);
    if (added) rowOrder.push_back(name);
    return it->second;
  };
  auto micros = [begin](int64_t t) { return std::to_string((t - begin) / 1000); };
  auto phase = [&](int row, char ph, const std::string& name, int64_t t,
                   const std::string& args = "") {
    std::string json = std::string("{\"ph\": \"") + ph + "\"";
    if (ph != 'E') json += ", \"name\": \"" + escaped(name) + "\"";
    json += ", \"ts\": " + micros(t) + ", \"pid\": " + std::to_string(row);
    if (ph == 'X') json += ", \"dur\": 0";
    if (!args.empty()) json += ", \"args\": {" + args + "}";
    records.push_back(Record{t, json + "}"});
  };

  std::unordered_map<int64_t, std::vector<const Event*>> byRequest;
  std::unordered_map<int64_t, const Event*> fusionIn;
  std::unordered_map<int64_t, const Event*> fusionOut;
  std::vector<const Event*> order;  // requests, by when their first event began
  for (const Event& e : events) {
    if (e.start < begin || e.start + e.duration > end) continue;
    if (e.phase == Phase::FusionIn) fusionIn[e.group] = &e;
    if (e.phase == Phase::FusionOut) fusionOut[e.group] = &e;
    if (e.phase == Phase::Cycle && markCycles) {
      records.push_back(Record{e.start, "{\"ph\": \"i\", \"name\": \"CYCLE_START\", \"ts\": " +
                                            micros(e.start) + ", \"s\": \"g\"}"});
    }
    if (tensorPhase(e.phase) && e.id >= 0) {
      auto& list = byRequest[e.id];
      if (list.empty()) order.push_back(&e);
      list.push_back(&e);
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Event* a, const Event* b) { return a->start < b->start; });
  for (const Event* head : order) {
    const std::vector<const Event*>& list = byRequest[head->id];
    const Event* negotiate = nullptr;
    const Event* queued = nullptr;
    const Event* tensor = nullptr;
    std::vector<const Event*> ready;
    for (const Event* e : list) {
      if (e->phase == Phase::Negotiate) negotiate = e;
      if (e->phase == Phase::Queue) queued = e;
      if (e->phase == Phase::Tensor) tensor = e;
      if (e->phase == Phase::RankReady) ready.push_back(e);
    }
    const int row = rowOf(head->label);
    const std::string op = head->detail != nullptr ? head->detail : "OPERATION";
    if (negotiate != nullptr) {
      phase(row, 'B', "NEGOTIATE_" + op, negotiate->start);
      for (const Event* r : ready) phase(row, 'X', std::to_string(r->rank), r->start);
      phase(row, 'E', "", negotiate->start + negotiate->duration);
    }
    if (tensor == nullptr) continue;  // failed, or still running when the timeline stopped
    const int64_t top = queued != nullptr ? queued->start : tensor->start;
    phase(row, 'B', op, top);
    if (queued != nullptr) {
      phase(row, 'B', "QUEUE", queued->start);
      phase(row, 'E', "", queued->start + queued->duration);
    }
    int64_t collectiveBegin = tensor->start;
    int64_t collectiveEnd = tensor->start + tensor->duration;
    auto in = fusionIn.find(tensor->group);
    auto out = fusionOut.find(tensor->group);
    if (in != fusionIn.end()) {
      phase(row, 'B', "MEMCPY_IN_FUSION_BUFFER", in->second->start);
      collectiveBegin = in->second->start + in->second->duration;
      phase(row, 'E', "", collectiveBegin);
    }
    if (out != fusionOut.end()) collectiveEnd = out->second->start;
    phase(row, 'B', "RINGCOMM_" + op, collectiveBegin);
    phase(row, 'E', "", collectiveEnd);
    if (out != fusionOut.end()) {
      phase(row, 'B', "MEMCPY_OUT_FUSION_BUFFER", out->second->start);
      phase(row, 'E', "", out->second->start + out->second->duration);
    }
    phase(row, 'E', "", tensor->start + tensor->duration, tensor->args);
  }
  std::stable_sort(records.begin(), records.end(),
                   [](const Record& a, const Record& b) { return a.ts < b.ts; });

  const int64_t startEpochMicros =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count() -
      (now() - begin) / 1000;
  std::string text = "[\n";
  text += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": "
          "{\"start_time_since_epoch_in_micros\": " + std::to_string(startEpochMicros) + "}},\n";
  text += "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": "
          "{\"sort_index\": 0}}";
  for (size_t i = 0; i < rowOrder.size(); ++i) {
    const std::string pid = std::to_string(i + 1);
    text += ",\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
            ", \"args\": {\"name\": \"" + escaped(rowOrder[i]) + "\"}}";
    text += ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
            ", \"args\": {\"sort_index\": " + pid + "}}";
  }
  for (const Record& record : records) text += ",\n" + record.json;
  text += "\n]\n";
  return text;
}

// Called with the recorder's mutex held: drops the events nobody wants any more.
void forgetUnwanted(Recorder& r) {
  if (!r.traceFile.empty()) return;
  if (r.horovod.active) {
    r.events.erase(std::remove_if(r.events.begin(), r.events.end(),
                                  [&](const Event& e) { return e.start < r.horovod.start; }),
                   r.events.end());
    return;
  }
  r.events.clear();
  r.events.shrink_to_fit();
  r.dropped = 0;
}

}  // namespace

const char* nameOf(Phase phase) {
  switch (phase) {
    case Phase::Collective:
      return "collective";
    case Phase::ReduceScatter:
      return "reduce_scatter";
    case Phase::Gather:
      return "gather";
    case Phase::Wait:
      return "wait";
    case Phase::Stage:
      return "stage";
    case Phase::Reduce:
      return "reduce";
    case Phase::Copy:
      return "copy";
    case Phase::Codec:
      return "codec";
    case Phase::Negotiate:
      return "negotiate";
    case Phase::RankReady:
      return "ready";
    case Phase::Queue:
      return "queue";
    case Phase::FusionIn:
      return "fusion_copy_in";
    case Phase::FusionOut:
      return "fusion_copy_out";
    case Phase::Tensor:
      return "run";
    case Phase::Cycle:
      return "cycle";
  }
  return "?";
}

int64_t now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(Event event) {
  event.thread = thisThread();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!gOn.load(std::memory_order_relaxed)) return;  // switched off meanwhile
  if (r.events.size() >= r.maxEvents) {
    ++r.dropped;
    return;
  }
  r.events.push_back(std::move(event));
}

void nameThisThread(const char* name) {
  const uint32_t thread = thisThread();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.threadNames[thread] = name;
}

void configure(const Config& config, int rank) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (rank >= 0 && r.rank < 0) r.rank = rank;
  if (r.configured) return;
  r.configured = true;
  r.host = hostName();
  r.maxEvents = config.traceMaxEvents;
  r.traceFile = config.traceFile;
  if (!r.traceFile.empty()) {
    r.events.reserve(std::min<size_t>(r.maxEvents, 1u << 16));
  }
  r.updateOn();
}

bool claimTraceFile() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.traceFile.empty() || r.traceClaimed) return false;
  r.traceClaimed = true;
  return true;
}

TracePart takeTracePart(int rank) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  TracePart taken;
  taken.path = r.traceFile;
  taken.json = chromePart(r.events, r.threadNames, rank, r.host, r.dropped);
  // A later communicator of this process (init() again) writes the file again, with these
  // events and its own.
  r.traceClaimed = false;
  return taken;
}

bool writeTraceFile(const std::string& path, const std::vector<std::string>& parts,
                    const std::vector<int>& missing) {
  return writeFile(path, chromeFile(parts, missing));
}

}  // namespace trace

void startHorovodTimeline(const std::string& path, bool markCycles) {
  if (path.empty()) throw InvalidArgument("start_timeline: the file path is empty");
  if (horovodTimelineActive()) stopHorovodTimeline();
  trace::Recorder& r = trace::recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.horovod = trace::HorovodTimeline{true, path, markCycles, trace::now()};
  r.updateOn();
  RINGCOMM_LOG(LogLevel::Info, kLogTrace, "Horovod timeline started (%s%s)", path.c_str(),
               markCycles ? ", marking cycles" : "");
}

bool horovodTimelineActive() {
  trace::Recorder& r = trace::recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.horovod.active;
}

void stopHorovodTimeline() {
  trace::Recorder& r = trace::recorder();
  std::vector<trace::Event> events;
  trace::HorovodTimeline timeline;
  int rank = 0;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.horovod.active) return;
    timeline = r.horovod;
    rank = r.rank;
    r.horovod.active = false;
    if (rank <= 0) events = r.events;  // only rank 0 writes Horovod's file
    trace::forgetUnwanted(r);
    r.updateOn();
  }
  if (rank > 0) return;
  const std::string text =
      trace::horovodFile(events, timeline.start, trace::now(), timeline.markCycles);
  if (!trace::writeFile(timeline.path, text)) {
    RINGCOMM_LOG(LogLevel::Warn, kLogTrace, "could not write the Horovod timeline to %s",
                 timeline.path.c_str());
  } else {
    RINGCOMM_LOG(LogLevel::Info, kLogTrace, "wrote the Horovod timeline to %s",
                 timeline.path.c_str());
  }
}

}  // namespace ringcomm
