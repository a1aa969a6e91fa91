// The core's one logger (include/ringcomm/debug.h says what the levels and subsystems mean).
//
//   RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d: shared memory (%s)", peer, why);
//
// The macro tests the level and the subsystem before it evaluates a single argument: a line
// that is not wanted costs two relaxed loads and a branch, and no formatting. A line that is
// wanted is written whole, with one write, prefixed "host:pid:rank [SUBSYS] ", to stderr or to
// RINGCOMM_DEBUG_FILE.
#pragma once

#include <atomic>
#include <cstdint>

#include "ringcomm/debug.h"

namespace ringcomm::log {

// Set by configureObservability(); read on every check.
extern std::atomic<int> gLevel;
extern std::atomic<uint32_t> gSubsystems;

// Warnings pass the subsystem filter: a user who narrowed INFO to one subsystem still wants to
// hear that /dev/shm is too small.
inline bool enabled(LogLevel level, uint32_t subsystem) {
  const int wanted = static_cast<int>(level);
  if (wanted > gLevel.load(std::memory_order_relaxed)) return false;
  return level == LogLevel::Warn || (gSubsystems.load(std::memory_order_relaxed) & subsystem) != 0;
}

// Formats and writes one line (printf's format); call through RINGCOMM_LOG.
void write(LogLevel level, uint32_t subsystem, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

// The rank this process's lines carry (the first one set wins; -1 before).
int rank();

}  // namespace ringcomm::log

#define RINGCOMM_LOG(level, subsystem, ...)                                        \
  do {                                                                             \
    if (::ringcomm::log::enabled((level), (subsystem))) {                          \
      ::ringcomm::log::write((level), (subsystem), __VA_ARGS__);                   \
    }                                                                              \
  } while (false)
