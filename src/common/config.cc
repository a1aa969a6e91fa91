// The one place that reads RINGCOMM_* environment variables.
#include "ringcomm/config.h"

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

// Our name first, then the name a Horovod job would have set.
const char* variable(const char* name, const char* horovodName) {
  const char* value = variable(name);
  return value != nullptr ? value : variable(horovodName);
}

double parseNumber(const char* name, const char* text) {
  try {
    size_t used = 0;
    double value = std::stod(text, &used);
    if (used == std::string(text).size() && value >= 0) return value;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(std::string(name) + " must be a non-negative number; got '" + text + "'");
}

}  // namespace

Config Config::fromEnvironment() {
  Config config;
  if (const char* v = variable("RINGCOMM_TIMEOUT")) {
    config.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(parseNumber("RINGCOMM_TIMEOUT", v) * 1000.0));
  }
  if (const char* v = variable("RINGCOMM_STALL_WARNING")) {
    config.stallWarning = std::chrono::milliseconds(
        static_cast<int64_t>(parseNumber("RINGCOMM_STALL_WARNING", v) * 1000.0));
  }
  if (const char* v = variable("RINGCOMM_TRANSPORT")) config.transport = parseTransportKind(v);
  if (const char* v = variable("RINGCOMM_ALGORITHM")) config.algorithm = parseAlgorithm(v);
  if (const char* v = variable("RINGCOMM_CUDA_PATH")) config.cudaPath = parseCudaPath(v);
  if (const char* v = variable("RINGCOMM_SOCKET_IFNAME")) config.socketInterface = v;
  if (const char* v = variable("RINGCOMM_LISTEN_ADDRESS")) config.listenAddress = v;
  if (const char* v = variable("RINGCOMM_HOSTID")) config.hostId = v;
  if (const char* v = variable("RINGCOMM_SPIN_COUNT")) {
    config.spinCount = static_cast<int>(parseNumber("RINGCOMM_SPIN_COUNT", v));
  }
  if (const char* v = variable("RINGCOMM_YIELD_COUNT")) {
    config.yieldCount = static_cast<int>(parseNumber("RINGCOMM_YIELD_COUNT", v));
  }
  if (const char* v = variable("RINGCOMM_SEGMENT_BYTES")) {
    config.segmentBytes = static_cast<size_t>(parseNumber("RINGCOMM_SEGMENT_BYTES", v));
  }
  if (const char* v = variable("RINGCOMM_SHM_SLOT_BYTES")) {
    config.shmSlotBytes = static_cast<size_t>(parseNumber("RINGCOMM_SHM_SLOT_BYTES", v));
  }
  if (const char* v = variable("RINGCOMM_SHM_RING_BYTES")) {
    config.shmRingBytes = static_cast<size_t>(parseNumber("RINGCOMM_SHM_RING_BYTES", v));
  }
  if (const char* v = variable("RINGCOMM_SOCKET_BUFFER_BYTES")) {
    config.socketBufferBytes = static_cast<int>(parseNumber("RINGCOMM_SOCKET_BUFFER_BYTES", v));
  }
  if (const char* v = variable("RINGCOMM_CYCLE_TIME", "HOROVOD_CYCLE_TIME")) {
    config.cycleTime = std::chrono::microseconds(
        static_cast<int64_t>(parseNumber("RINGCOMM_CYCLE_TIME", v) * 1000.0));
  }
  if (const char* v = variable("RINGCOMM_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD")) {
    config.fusionThresholdBytes =
        static_cast<size_t>(parseNumber("RINGCOMM_FUSION_THRESHOLD", v));
  }
  if (config.segmentBytes < 4096) throw InvalidArgument("RINGCOMM_SEGMENT_BYTES must be >= 4096");
  if (config.shmSlotBytes < 4096) throw InvalidArgument("RINGCOMM_SHM_SLOT_BYTES must be >= 4096");
  if (config.shmRingBytes < 4096) throw InvalidArgument("RINGCOMM_SHM_RING_BYTES must be >= 4096");
  return config;
}

}  // namespace ringcomm
