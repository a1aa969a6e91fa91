// The one place that reads RINGCOMM_* environment variables (and the HOROVOD_* and CUDA ones that
// mean the same to ringcomm).
#include "ringcomm/config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <sys/stat.h>
#include <string>
#include <vector>

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

// A number, or "auto" for -1: the library picks the value when it knows what it depends on.
double parseNumberOrAuto(const char* name, const char* text) {
  if (std::string(text) == "auto") return -1;
  try {
    return parseNumber(name, text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(std::string(name) + " must be auto or a non-negative number; got '" +
                          text + "'");
  }
}

// RINGCOMM_SECRET_FILE: the secret is the file's contents without a trailing newline. A file that
// others may read is refused: the secret would not be one.
std::string readSecretFile(const char* path) {
  struct stat info {};
  if (stat(path, &info) != 0) {
    throw InvalidArgument(std::string("RINGCOMM_SECRET_FILE=") + path + ": " + std::strerror(errno));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw InvalidArgument(std::string("RINGCOMM_SECRET_FILE=") + path +
                          " may be read by other users; make it readable by its owner only "
                          "(chmod 600)");
  }
  std::ifstream file(path, std::ios::binary);
  std::string secret((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) {
    throw InvalidArgument(std::string("RINGCOMM_SECRET_FILE=") + path + " is empty");
  }
  return secret;
}

// Config::tuningDirectory when RINGCOMM_TUNING_DIR is not set: the XDG cache directory's.
std::string defaultTuningDirectory() {
  if (const char* cache = variable("XDG_CACHE_HOME")) return std::string(cache) + "/ringcomm";
  if (const char* home = variable("HOME")) return std::string(home) + "/.cache/ringcomm";
  return "";  // nowhere to look
}

bool parseSwitch(const char* name, const char* text) {
  const std::string value = text;
  if (value == "0") return false;
  if (value == "1") return true;
  throw InvalidArgument(std::string(name) + " must be 0 or 1; got '" + value + "'");
}

CrossMemory parseCrossMemory(const char* text) {
  const std::string value = text;
  if (value == "auto") return CrossMemory::Auto;
  if (value == "0") return CrossMemory::Off;
  if (value == "1") return CrossMemory::On;
  throw InvalidArgument("RINGCOMM_SHM_CMA must be auto, 0 or 1; got '" + value + "'");
}

WireProtection parseWireProtection(const char* text) {
  const std::string value = text;
  if (value == "auto") return WireProtection::Auto;
  if (value == "off") return WireProtection::Off;
  if (value == "integrity") return WireProtection::Integrity;
  if (value == "encrypt") return WireProtection::Encrypt;
  throw InvalidArgument("RINGCOMM_WIRE_PROTECTION must be auto, off, integrity or encrypt; got '" +
                        value + "'");
}

}  // namespace

std::chrono::milliseconds timeoutFromSeconds(double seconds, const std::string& what,
                                             bool zeroAllowed) {
  if (std::isnan(seconds) || seconds < 0 || (seconds == 0 && !zeroAllowed)) {
    std::ostringstream given;
    given << seconds;
    throw InvalidArgument(what + " must be a number of seconds " +
                          (zeroAllowed ? ">= 0" : "> 0") + " (inf: no deadline); got " +
                          given.str());
  }
  if (seconds >= static_cast<double>(kNoDeadline.count())) return kNoDeadline;
  // At least a millisecond: a positive timeout never rounds down to "none".
  const auto milliseconds = static_cast<int64_t>(std::ceil(seconds * 1000.0));
  return std::chrono::milliseconds(milliseconds);
}

namespace {

// fromEnvironment(), area by area; describedVariables() lists the same areas in the same order.

// Deadlines, and the paths collectives take: transport, schedule, device buffers.
void readCollectiveVariables(Config& config) {
  if (const char* v = variable("RINGCOMM_TIMEOUT")) {
    config.timeout =
        timeoutFromSeconds(parseNumber("RINGCOMM_TIMEOUT", v), "RINGCOMM_TIMEOUT", false);
  }
  if (const char* v = variable("RINGCOMM_STALL_WARNING")) {
    config.stallWarning = timeoutFromSeconds(parseNumber("RINGCOMM_STALL_WARNING", v),
                                             "RINGCOMM_STALL_WARNING (0: never)", true);
  }
  if (const char* v = variable("RINGCOMM_TRANSPORT")) config.transport = parseTransportKind(v);
  if (const char* v = variable("RINGCOMM_ALGORITHM")) config.algorithm = parseAlgorithm(v);
  if (const char* v = variable("RINGCOMM_CUDA_PATH")) config.cudaPath = parseCudaPath(v);
  if (const char* v = variable("RINGCOMM_CUDA_CHUNK_BYTES")) {
    const double bytes = parseNumber("RINGCOMM_CUDA_CHUNK_BYTES", v);
    if (!(bytes >= 4096 && bytes <= static_cast<double>(size_t{1} << 30))) {
      throw InvalidArgument(
          "RINGCOMM_CUDA_CHUNK_BYTES must be a number of bytes from 4096 to 1 GiB; got '" +
          std::string(v) + "'");
    }
    config.cudaChunkBytes = static_cast<size_t>(bytes);
  }
  if (const char* v = variable("CUDA_MPS_PIPE_DIRECTORY")) config.mpsPipeDirectory = v;
}

// The job's secret, and this host's identity and address.
void readJobVariables(Config& config) {
  if (const char* v = variable("RINGCOMM_SECRET")) config.secret = v;
  if (const char* v = variable("RINGCOMM_SECRET_FILE")) {
    if (!config.secret.empty()) {
      throw InvalidArgument("set RINGCOMM_SECRET or RINGCOMM_SECRET_FILE, not both");
    }
    config.secret = readSecretFile(v);
  }
  if (const char* v = variable("RINGCOMM_SOCKET_IFNAME")) config.socketInterface = v;
  if (const char* v = variable("RINGCOMM_LISTEN_ADDRESS")) config.listenAddress = v;
  if (const char* v = variable("RINGCOMM_HOSTID")) config.hostId = v;
}

// Within a host: how ranks wait, the ring's pipelining unit, shared memory.
void readHostVariables(Config& config) {
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
  if (const char* v = variable("RINGCOMM_SHM_CMA")) config.shmCrossMemory = parseCrossMemory(v);
  if (const char* v = variable("RINGCOMM_SHM_CMA_MIN_BYTES")) {
    config.shmCrossMemoryMinBytes =
        static_cast<size_t>(parseNumber("RINGCOMM_SHM_CMA_MIN_BYTES", v));
  }
  if (const char* v = variable("RINGCOMM_SHM_CMA_HUGE_PAGES")) {
    config.shmCrossMemoryHugePages = parseSwitch("RINGCOMM_SHM_CMA_HUGE_PAGES", v);
  }
  if (const char* v = variable("RINGCOMM_REDUCE_THREADS")) {
    const double threads = parseNumberOrAuto("RINGCOMM_REDUCE_THREADS", v);
    if (threads == 0 || threads > 64 || threads != static_cast<int>(threads)) {
      throw InvalidArgument("RINGCOMM_REDUCE_THREADS must be auto or a whole number from 1 to 64; "
                            "got '" + std::string(v) + "'");
    }
    config.reduceThreads = static_cast<int>(threads);
  }
  if (const char* v = variable("RINGCOMM_SHM_CMA_BUSY_CORES")) {
    config.shmCrossMemoryBusyCores = parseNumberOrAuto("RINGCOMM_SHM_CMA_BUSY_CORES", v);
  }
  if (const char* v = variable("RINGCOMM_SHM_CMA_OTHERS_CORES_FILE")) {
    config.shmCrossMemoryOthersCoresFile = v;
  }
}

// Between hosts: TCP links, and the network as the cost model takes it.
void readNetworkVariables(Config& config) {
  if (const char* v = variable("RINGCOMM_SOCKET_BUFFER_BYTES")) {
    config.socketBufferBytes = static_cast<int>(parseNumber("RINGCOMM_SOCKET_BUFFER_BYTES", v));
  }
  if (const char* v = variable("RINGCOMM_WIRE_PROTECTION")) {
    config.wireProtection = parseWireProtection(v);
  }
  if (const char* v = variable("RINGCOMM_LINKS")) {
    const std::string value = v;
    if (value != "on_first_use" && value != "at_start") {
      throw InvalidArgument("RINGCOMM_LINKS must be on_first_use or at_start; got '" + value + "'");
    }
    config.links = value == "at_start" ? LinkSetup::AtStart : LinkSetup::OnFirstUse;
  }
  if (const char* v = variable("RINGCOMM_LINK_TIMEOUT")) {
    config.linkTimeout = timeoutFromSeconds(parseNumber("RINGCOMM_LINK_TIMEOUT", v),
                                            "RINGCOMM_LINK_TIMEOUT", false);
  }
  if (const char* v = variable("RINGCOMM_LINK_LATENCY_US")) {
    config.linkLatency = std::chrono::microseconds(
        static_cast<int64_t>(parseNumber("RINGCOMM_LINK_LATENCY_US", v)));
  }
  if (const char* v = variable("RINGCOMM_LINK_GBITS")) {
    config.linkBandwidth = parseNumber("RINGCOMM_LINK_GBITS", v) * 1e9 / 8;
  }
}

// The tensor queue (Horovod's), logs, traces, and the tuning files.
void readQueueAndObservabilityVariables(Config& config) {
  if (const char* v = variable("RINGCOMM_CYCLE_TIME", "HOROVOD_CYCLE_TIME")) {
    config.cycleTime = std::chrono::microseconds(
        static_cast<int64_t>(parseNumber("RINGCOMM_CYCLE_TIME", v) * 1000.0));
  }
  if (const char* v = variable("RINGCOMM_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD")) {
    config.fusionThresholdBytes =
        static_cast<size_t>(parseNumber("RINGCOMM_FUSION_THRESHOLD", v));
  }
  if (const char* v = variable("RINGCOMM_DEBUG")) config.logLevel = parseLogLevel(v);
  if (const char* v = variable("RINGCOMM_DEBUG_SUBSYS")) {
    config.logSubsystems = parseLogSubsystems(v);
  }
  if (const char* v = variable("RINGCOMM_DEBUG_FILE")) config.logFile = v;
  if (const char* v = variable("RINGCOMM_TRACE")) config.traceFile = v;
  if (const char* v = variable("RINGCOMM_TRACE_MAX_EVENTS")) {
    config.traceMaxEvents = static_cast<size_t>(parseNumber("RINGCOMM_TRACE_MAX_EVENTS", v));
  }
  config.tuningDirectory = defaultTuningDirectory();
  if (const char* v = variable("RINGCOMM_TUNING_DIR")) {
    const std::string text = v;
    config.tuningDirectory = (text == "off" || text == "0") ? "" : text;
  }
  if (const char* v = variable("HOROVOD_TIMELINE")) config.horovodTimeline = v;
  if (const char* v = variable("HOROVOD_TIMELINE_MARK_CYCLES")) {
    const std::string text = v;
    config.horovodTimelineMarkCycles = !(text == "0" || text == "false" || text == "False");
  }
}

// Sizes the schedules cannot work with.
void checkSizes(const Config& config) {
  if (config.segmentBytes < 4096) throw InvalidArgument("RINGCOMM_SEGMENT_BYTES must be >= 4096");
  if (config.shmSlotBytes != 0 && config.shmSlotBytes < 4096) {
    throw InvalidArgument("RINGCOMM_SHM_SLOT_BYTES must be 0 (automatic) or >= 4096");
  }
  if (config.shmRingBytes < 4096) throw InvalidArgument("RINGCOMM_SHM_RING_BYTES must be >= 4096");
}

}  // namespace

Config Config::fromEnvironment() {
  Config config;
  readCollectiveVariables(config);
  readJobVariables(config);
  readHostVariables(config);
  readNetworkVariables(config);
  readQueueAndObservabilityVariables(config);
  checkSizes(config);
  return config;
}

namespace {

std::string seconds(std::chrono::milliseconds value) {
  if (value >= kNoDeadline) return "inf";
  std::ostringstream text;
  text << static_cast<double>(value.count()) / 1000.0;
  return text.str();
}

template <typename Number>
std::string number(Number value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// What describeEnvironment() lists: each variable fromEnvironment() reads (keep the two in step;
// tests/test_info.py checks that every RINGCOMM_ name in this file is here), the Horovod name it
// also answers to, and how to print the value in effect.
struct Described {
  const char* name;
  const char* horovodName;
  std::function<std::string(const Config&)> value;
  const char* meaning;
  // The default as a user reads it, where the value of a default Config does not say it (it
  // depends on the machine, or on who launched the job); nullptr: value(Config{}).
  const char* defaultText = nullptr;
};

// Deadlines, and the paths collectives take: transport, schedule, device buffers.
std::vector<Described> collectiveVariables() {
  return {
      {"RINGCOMM_TIMEOUT", nullptr, [](const Config& c) { return seconds(c.timeout); },
       "seconds any collective or the rendezvous may wait (inf: no deadline)", nullptr},
      {"RINGCOMM_STALL_WARNING", nullptr, [](const Config& c) { return seconds(c.stallWarning); },
       "seconds after which a waiting collective warns, once, which rank it waits for; 0: never",
       nullptr},
      {"RINGCOMM_TRANSPORT", nullptr, [](const Config& c) { return toString(c.transport); },
       "auto (shared memory within a host; between hosts UCX where both ends have RDMA, else "
       "TCP), tcp, shm, or ucx (every peer through UCX; UCX_TLS picks its lanes)",
       nullptr},
      {"RINGCOMM_ALGORITHM", nullptr, [](const Config& c) { return toString(c.algorithm); },
       "forces the all-reduce schedule: ring, tree, direct or hierarchical (auto: the tuning "
       "file's, else the cost model's)",
       nullptr},
      {"RINGCOMM_CUDA_PATH", nullptr, [](const Config& c) { return toString(c.cudaPath); },
       "how an all-reduce of CUDA buffers travels: auto, staged (through pinned host memory) or "
       "ipc (peers read each other's device memory); staged also keeps sends and receives of "
       "CUDA buffers off UCX's CUDA lanes",
       nullptr},
      {"RINGCOMM_CUDA_CHUNK_BYTES", nullptr,
       [](const Config& c) { return number(c.cudaChunkBytes); },
       "the staged path's pipeline unit in bytes: copies out of and back to the GPU overlap the "
       "host collective one chunk apart; each rank pins four chunks per GPU",
       nullptr},
      {"CUDA_MPS_PIPE_DIRECTORY", nullptr, [](const Config& c) { return c.mpsPipeDirectory; },
       "CUDA's own: where ringcomm looks for the MPS control daemon", nullptr},
  };
}

// The job's secret, and this host's identity and address.
std::vector<Described> jobVariables() {
  return {
      {"RINGCOMM_SECRET", nullptr,
       [](const Config& c) { return std::string(c.secret.empty() ? "" : "(set)"); },
       "the job's secret, the same on every host: every connection proves it before data moves",
       "made by the launcher"},
      {"RINGCOMM_SECRET_FILE", nullptr,
       [](const Config&) {
         const char* path = variable("RINGCOMM_SECRET_FILE");
         return std::string(path != nullptr ? path : "");
       },
       "a file holding the secret, readable by its owner only", ""},
      {"RINGCOMM_SOCKET_IFNAME", nullptr, [](const Config& c) { return c.socketInterface; },
       "the network interface to listen on", "the one that reaches the store"},
      {"RINGCOMM_LISTEN_ADDRESS", nullptr, [](const Config& c) { return c.listenAddress; },
       "the address to listen on", "the one that reaches the store"},
      {"RINGCOMM_HOSTID", nullptr, [](const Config& c) { return c.hostId; },
       "host identity: ranks with equal ids share memory",
       "hostname, boot id and network namespace"},
  };
}

// Within a host: how ranks wait, the ring's pipelining unit, shared memory.
std::vector<Described> hostVariables() {
  return {
      {"RINGCOMM_REDUCE_THREADS", nullptr,
       [](const Config& c) {
         return c.reduceThreads < 0 ? std::string("auto") : number(c.reduceThreads);
       },
       "threads of each rank that reduce a single-copy all-reduce of buffers all local ranks map "
       "(ringcomm.empty(), staged CUDA chunks); auto: cores per local rank, at most 4",
       nullptr},
      {"RINGCOMM_SPIN_COUNT", nullptr, [](const Config& c) { return number(c.spinCount); },
       "pure polls before a wait yields", nullptr},
      {"RINGCOMM_YIELD_COUNT", nullptr,
       [](const Config& c) {
         return c.yieldCount < 0 ? std::string("auto") : number(c.yieldCount);
       },
       "polls with sched_yield() before a wait sleeps",
       "auto: 16, or 1 when runnable threads outnumber the cores"},
      {"RINGCOMM_SEGMENT_BYTES", nullptr, [](const Config& c) { return number(c.segmentBytes); },
       "the ring schedule's pipelining unit, in bytes", nullptr},
      {"RINGCOMM_SHM_SLOT_BYTES", nullptr,
       [](const Config& c) {
         return c.shmSlotBytes == 0 ? std::string("auto") : number(c.shmSlotBytes);
       },
       "bytes a rank stages per round of the direct schedule (4 slots: all-reduces below the "
       "single-copy threshold, and broadcasts)",
       "auto: 512 KiB, or 2 MiB when local ranks outnumber the cores"},
      {"RINGCOMM_SHM_RING_BYTES", nullptr, [](const Config& c) { return number(c.shmRingBytes); },
       "capacity of each point-to-point shared-memory ring, in bytes", nullptr},
      {"RINGCOMM_SHM_CMA", nullptr,
       [](const Config& c) {
         return std::string(c.shmCrossMemory == CrossMemory::Auto  ? "auto"
                            : c.shmCrossMemory == CrossMemory::Off ? "0"
                                                                   : "1");
       },
       "cross-memory attach in the direct schedule: large all-reduces read each local peer's input "
       "and write the reduced slices into the peers' outputs (process_vm_readv/writev: one copy) "
       "instead of staging them. auto: when every local rank can (probed at setup); 0: never; 1: "
       "setup fails if a rank cannot",
       nullptr},
      {"RINGCOMM_SHM_CMA_MIN_BYTES", nullptr,
       [](const Config& c) {
         return c.shmCrossMemoryMinBytes == 0 ? std::string("auto")
                                              : number(c.shmCrossMemoryMinBytes);
       },
       "all-reduce size from which the direct schedule reads peers' buffers directly; smaller ones "
       "stay staged. The lowest local rank's value counts",
       "auto: 8 MiB"},
      {"RINGCOMM_SHM_CMA_HUGE_PAGES", nullptr,
       [](const Config& c) { return std::string(c.shmCrossMemoryHugePages ? "1" : "0"); },
       "1: a buffer such an all-reduce sees a second time is collapsed into transparent huge pages "
       "(MADV_COLLAPSE), which the kernel's copies pin twice as fast; 0: buffers stay as they are",
       nullptr},
      {"RINGCOMM_SHM_CMA_BUSY_CORES", nullptr,
       [](const Config& c) {
         return c.shmCrossMemoryBusyCores < 0 ? std::string("auto")
                                              : number(c.shmCrossMemoryBusyCores);
       },
       "when local ranks outnumber their cores more than 4 to 1 and other processes use at least "
       "this many cores' worth of CPU time, single-copy all-reduces stage through shared memory "
       "instead. auto: 0.6 of the job's cores, and only when every local rank shares one "
       "scheduling group; 0: always when so crowded",
       nullptr},
      {"RINGCOMM_SHM_CMA_OTHERS_CORES_FILE", nullptr,
       [](const Config& c) { return c.shmCrossMemoryOthersCoresFile; },
       "for tests: a file whose number stands in for the cores' worth of CPU time other processes "
       "used, which RINGCOMM_SHM_CMA_BUSY_CORES is compared with, read every half second instead "
       "of measuring it",
       "measured"},
  };
}

// Between hosts: TCP links, and the network as the cost model takes it.
std::vector<Described> networkVariables() {
  return {
      {"RINGCOMM_SOCKET_BUFFER_BYTES", nullptr,
       [](const Config& c) { return number(c.socketBufferBytes); },
       "SO_SNDBUF and SO_RCVBUF of TCP connections", nullptr},
      {"RINGCOMM_WIRE_PROTECTION", nullptr,
       [](const Config& c) {
         switch (c.wireProtection) {
           case WireProtection::Off: return std::string("off");
           case WireProtection::Integrity: return std::string("integrity");
           case WireProtection::Encrypt: return std::string("encrypt");
           default: return std::string("auto");
         }
       },
       "what guards TCP frames after the handshake: auto (every frame authenticated on links to "
       "other hosts that run at up to 2.5 Gbit/s, none on faster ones or within a host), "
       "integrity (authenticated on every TCP link), encrypt (encrypted and authenticated), off "
       "(the handshake only). AES-256-GCM under per-link keys, with a sequence number against "
       "replay; needs a build with OpenSSL. UCX links are never sealed: integrity and encrypt "
       "keep auto's links between hosts on TCP and refuse RINGCOMM_TRANSPORT=ucx",
       nullptr},
      {"RINGCOMM_LINKS", nullptr,
       [](const Config& c) {
         return std::string(c.links == LinkSetup::AtStart ? "at_start" : "on_first_use");
       },
       "when TCP links are made: on_first_use (to a peer when a message first goes to or comes "
       "from it: links to the peers the schedules use) or at_start (to every TCP peer at "
       "creation); the same on every rank",
       nullptr},
      {"RINGCOMM_LINK_TIMEOUT", nullptr, [](const Config& c) { return seconds(c.linkTimeout); },
       "seconds a TCP peer's host may stay silent (keepalive, unacknowledged data) before its link "
       "counts as dead, however long the collective may wait",
       nullptr},
      {"RINGCOMM_LINK_LATENCY_US", nullptr,
       [](const Config& c) {
         return c.linkLatency.count() == 0 ? std::string("auto") : number(c.linkLatency.count());
       },
       "the network between hosts as the cost model takes it: one message's latency, in "
       "microseconds; rank 0's value counts",
       "auto: rank 0's link file, else measured at creation"},
      {"RINGCOMM_LINK_GBITS", nullptr,
       [](const Config& c) {
         return c.linkBandwidth == 0 ? std::string("auto") : number(c.linkBandwidth * 8 / 1e9);
       },
       "what one host's link carries each way, in Gbit/s, as the cost model takes it; rank 0's "
       "value counts",
       "auto: rank 0's link file, else measured at creation"},
  };
}

// The tensor queue (Horovod's), logs, traces, and the tuning files.
std::vector<Described> queueAndObservabilityVariables() {
  return {
      {"RINGCOMM_CYCLE_TIME", "HOROVOD_CYCLE_TIME",  // milliseconds, as the variable says it
       [](const Config& c) { return number(static_cast<double>(c.cycleTime.count()) / 1000.0); },
       "milliseconds between the tensor queue's agreements (ringcomm.torch)", nullptr},
      {"RINGCOMM_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD",
       [](const Config& c) { return number(c.fusionThresholdBytes); },
       "most bytes of ready all-reduces the tensor queue fuses into one", nullptr},
      {"RINGCOMM_DEBUG", nullptr, [](const Config& c) { return std::string(toString(c.logLevel)); },
       "the log's level: NONE, WARN, INFO or TRACE", nullptr},
      {"RINGCOMM_DEBUG_SUBSYS", nullptr,
       [](const Config&) {
         const char* list = variable("RINGCOMM_DEBUG_SUBSYS");
         return std::string(list != nullptr ? list : "ALL");
       },
       "which parts log: INIT, STORE, AUTH, TRANSPORT, ALGO, CUDA, QUEUE, TRACE, ALL, or ^LIST to "
       "exclude",
       nullptr},
      {"RINGCOMM_DEBUG_FILE", nullptr, [](const Config& c) { return c.logFile; },
       "the log's file instead of stderr; %h, %p, %r become the host, pid and rank", "stderr"},
      {"RINGCOMM_TRACE", nullptr, [](const Config& c) { return c.traceFile; },
       "a Chrome-trace file of every rank's collectives, written by rank 0 at shutdown", "none"},
      {"RINGCOMM_TRACE_MAX_EVENTS", nullptr,
       [](const Config& c) { return number(c.traceMaxEvents); },
       "events a rank keeps for the trace; later ones are counted and dropped", nullptr},
      {"RINGCOMM_TUNING_DIR", nullptr,
       [](const Config& c) {
         return c.tuningDirectory.empty() ? std::string("off") : c.tuningDirectory;
       },
       "where ringcomm-bench tune writes, and algorithm=\"auto\" reads, this host's tuning and "
       "link files; off: none",
       "$XDG_CACHE_HOME/ringcomm (~/.cache/ringcomm)"},
      {"HOROVOD_TIMELINE", nullptr, [](const Config& c) { return c.horovodTimeline; },
       "ringcomm.torch: Horovod's timeline, started at init()", "none"},
      {"HOROVOD_TIMELINE_MARK_CYCLES", nullptr,
       [](const Config& c) { return std::string(c.horovodTimelineMarkCycles ? "1" : "0"); },
       "1: the timeline marks the tensor queue's cycles", nullptr},
  };
}

const std::vector<Described>& describedVariables() {
  static const std::vector<Described> variables = [] {
    std::vector<Described> all;
    for (auto area : {collectiveVariables, jobVariables, hostVariables, networkVariables,
                      queueAndObservabilityVariables}) {
      std::vector<Described> some = area();
      all.insert(all.end(), some.begin(), some.end());
    }
    return all;
  }();
  return variables;
}

// Whether `error` names `name` as a whole word: RINGCOMM_SHM_CMA's error is not
// RINGCOMM_SHM_CMA_BUSY_CORES's.
bool namesVariable(const std::string& error, const std::string& name) {
  for (size_t at = error.find(name); at != std::string::npos; at = error.find(name, at + 1)) {
    const size_t end = at + name.size();
    if (end == error.size() || (!std::isalnum(static_cast<unsigned char>(error[end])) &&
                                error[end] != '_')) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<ConfigVariable> Config::describeEnvironment() {
  Config effective;
  std::string error;
  try {
    effective = fromEnvironment();
  } catch (const InvalidArgument& refused) {
    error = refused.what();  // the defaults stand in; the variable it names carries the error
  }
  std::vector<ConfigVariable> described;
  bool errorPlaced = error.empty();
  for (const Described& d : describedVariables()) {
    ConfigVariable entry{d.name, d.value(effective), "default", "", d.meaning,
                         d.defaultText != nullptr ? d.defaultText : d.value(Config{})};
    if (const char* raw = variable(d.name)) {
      entry.source = "environment";
      if (!error.empty()) entry.value = d.name == std::string("RINGCOMM_SECRET") ? "(set)" : raw;
    } else if (d.horovodName != nullptr && variable(d.horovodName) != nullptr) {
      entry.source = d.horovodName;
      if (!error.empty()) entry.value = variable(d.horovodName);
    }
    if (!errorPlaced && namesVariable(error, d.name)) {
      entry.error = error;
      errorPlaced = true;
    }
    described.push_back(entry);
  }
  if (!errorPlaced) described.push_back({"(configuration)", "", "environment", error, "", ""});
  return described;
}

}  // namespace ringcomm
