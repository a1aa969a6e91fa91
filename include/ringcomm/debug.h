// What the core can say about itself: the debug log (RINGCOMM_DEBUG, like NCCL_DEBUG) and the
// timeline of every collective's phases (RINGCOMM_TRACE, and Horovod's timeline as a view of the
// same events). Both are per process and configured from Config (config.h) when the first
// communicator of the process is created; both cost a relaxed load and a branch when off.
//
// Python code logs through logMessage(), so that one logger, one prefix and one file carry both.
#pragma once

#include <cstdint>
#include <string>

#include "ringcomm/export.h"

namespace ringcomm {

struct Config;

// RINGCOMM_DEBUG: NONE (or OFF) says nothing, WARN (the default) only what a user should act
// on, INFO the decisions taken and why, TRACE every collective.
enum class LogLevel : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

// RINGCOMM_DEBUG_SUBSYS: which parts of the core may log (a comma list of names; ALL; a leading
// ^ excludes the listed ones, as NCCL_DEBUG_SUBSYS does). Warnings pass the filter always.
enum LogSubsystem : uint32_t {
  kLogInit = 1u << 0,       // creation: rendezvous, host identity, configuration in force
  kLogStore = 1u << 1,      // the rendezvous store
  kLogAuth = 1u << 2,       // the job's secret and the handshakes that prove it
  kLogTransport = 1u << 3,  // shared memory or TCP to each peer, and why
  kLogAlgo = 1u << 4,       // the schedule chosen per collective and size, with estimates
  kLogCuda = 1u << 5,       // device buffers: IPC or staged, and why
  kLogQueue = 1u << 6,      // the tensor queue: negotiation, fusion, stalls
  kLogTrace = 1u << 7,      // the trace and timeline files
  kLogAll = 0xffffffffu,
};

RINGCOMM_API LogLevel parseLogLevel(const std::string& text);
RINGCOMM_API const char* toString(LogLevel level);
RINGCOMM_API uint32_t parseLogSubsystems(const std::string& text);
RINGCOMM_API const char* logSubsystemName(LogSubsystem subsystem);

// Settles the level, the subsystems and the file from `config`, and the rank of this process's
// lines (`rank` < 0: not known yet). The first call with a rank wins the rank; later calls
// (duplicates, more communicators) change nothing else either.
RINGCOMM_API void configureObservability(const Config& config, int rank);

// For the Python side: whether a line would be written, and writing it (subsystem by name).
RINGCOMM_API bool logEnabled(LogLevel level, const std::string& subsystem);
RINGCOMM_API void logMessage(LogLevel level, const std::string& subsystem,
                             const std::string& text);

// Horovod's timeline (horovod.torch's start_timeline/stop_timeline, HOROVOD_TIMELINE): from
// now on the trace records this rank's events; stop renders those recorded since the start in
// Horovod's format to `path` on rank 0 (the other ranks' readiness is in rank 0's view of the
// negotiation), and stops recording unless RINGCOMM_TRACE still wants the events. Starting
// while a timeline is open replaces it (the open one is written first).
RINGCOMM_API void startHorovodTimeline(const std::string& path, bool markCycles);
RINGCOMM_API void stopHorovodTimeline();
RINGCOMM_API bool horovodTimelineActive();

}  // namespace ringcomm
