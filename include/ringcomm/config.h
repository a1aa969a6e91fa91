// Every tunable of the core, and the one function that reads them from the environment
// (RINGCOMM_* variables). Nothing else in the tree calls getenv().
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ringcomm/debug.h"
#include "ringcomm/export.h"
#include "ringcomm/types.h"

namespace ringcomm {

// The longest deadline: what "inf" and any longer timeout mean (about three years), short
// enough that adding it to a clock reading cannot overflow.
constexpr std::chrono::seconds kNoDeadline{100'000'000};

// A timeout a user gave in seconds (an environment variable, a timeout= argument), checked:
// NaN, negative numbers and (unless zeroAllowed) 0 are an InvalidArgument naming `what`; inf and
// anything beyond kNoDeadline mean kNoDeadline.
RINGCOMM_API std::chrono::milliseconds timeoutFromSeconds(double seconds, const std::string& what,
                                                          bool zeroAllowed);

// One variable Config::fromEnvironment() reads, as `python -m ringcomm info` shows it.
struct RINGCOMM_API ConfigVariable {
  std::string name;    // RINGCOMM_TIMEOUT
  std::string value;   // the value in effect, as text; a secret's is "(set)", never the secret
  std::string source;  // "default", "environment", or the Horovod variable it came from
  std::string error;   // why the environment's text was refused (fromEnvironment() throws); or ""
  std::string meaning;       // what it sets, for the documentation and `ringcomm info`
  std::string defaultValue;  // its default, as text
};

// RINGCOMM_SHM_CMA: whether the direct schedule may read local peers' buffers directly.
enum class CrossMemory : uint8_t {
  Auto,  // when every local rank can (probed at setup); else staged, saying why at INFO
  Off,   // never: always stage through the shared-memory slots
  On,    // always from the threshold on; setup fails if a local rank cannot
};

// RINGCOMM_LINKS: when a rank makes its TCP links (src/transport/tcp/tcp_dialer.h).
enum class LinkSetup : uint8_t {
  OnFirstUse,  // to a peer when a message first goes to or comes from it: a rank holds links to
               // the peers its schedules use, not to every rank on another host
  AtStart,     // to every TCP peer when the communicator is created (a full mesh)
};

// RINGCOMM_WIRE_PROTECTION: what guards the frames of TCP links after the handshake
// (transport/tcp/sealed_stream.h; AES-256-GCM under per-link keys, a sequence number per frame).
enum class WireProtection : uint8_t {
  Auto,       // integrity on links to other hosts up to 2.5 Gbit/s (kAutoSealMaxBytesPerSecond),
              // none on faster ones or on one host's own TCP links
  Off,        // none: the handshake alone proves who connected
  Integrity,  // every link's records authenticated (tampering, replay, reordering detected)
  Encrypt,    // every link's records encrypted and authenticated
};

struct RINGCOMM_API Config {
  // Default deadline of every collective and of rendezvous (RINGCOMM_TIMEOUT, seconds).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // RINGCOMM_STALL_WARNING (seconds): a collective still waiting after this long prints, once,
  // which rank it waits for, and goes on waiting until its deadline. 0 = never (Horovod: 60 s).
  std::chrono::milliseconds stallWarning{std::chrono::seconds(60)};
  // RINGCOMM_TRANSPORT=auto|tcp|shm.
  TransportKind transport = TransportKind::Auto;
  // RINGCOMM_ALGORITHM=auto|ring|tree|direct: forces the all-reduce schedule when the call says auto.
  Algorithm algorithm = Algorithm::Auto;
  // RINGCOMM_SOCKET_IFNAME: the interface to listen on; empty = the one that reaches the store.
  std::string socketInterface;
  // RINGCOMM_LISTEN_ADDRESS: the address to listen on; empty = derived from the interface, else
  // from the connection to the store, else loopback.
  std::string listenAddress;
  // RINGCOMM_HOSTID: overrides host identity (ranks with equal ids share memory).
  std::string hostId;
  // How a rank waits for a peer (src/common/spin.h): RINGCOMM_SPIN_COUNT pure polls, then
  // RINGCOMM_YIELD_COUNT polls each followed by sched_yield(), then a blocking sleep. Measured on
  // the 2-core VM, direct all-reduce (bench/RESULTS.md): polling through sched_yield() gives the
  // latency of spinning (1.5 us at 8 B, 2 ranks) without its failure mode: pure spinning made
  // the hypervisor time-slice the vCPUs, and bandwidth fell 8x (2 GB/s instead of 17 at 1 MiB)
  // in about half the runs; at 4 ranks on 2 cores the yields hand the core to the peer being
  // waited for (8 B: 24 us with a futex at once, 6-11 us with yields).
  // RINGCOMM_YIELD_COUNT fixes the yields; by default (-1) they follow the load
  // (src/common/wait_policy.h): 16 with a core to spare, 1 when runnable threads outnumber cores.
  int spinCount = 0;
  int yieldCount = -1;
  // RINGCOMM_SEGMENT_BYTES: pipelining granularity of the ring schedule.
  size_t segmentBytes = 512 * 1024;
  // RINGCOMM_SHM_SLOT_BYTES: bytes a rank stages per round of the direct schedule. Sized so that
  // every rank's slots (shm::kDirectSlots of them, input + result) stay in the shared last-level
  // cache. Measured on the 2-core VM (32 MiB L3), 64 MiB all-reduce: 4 x 512 KiB gave 10.6 GB/s
  // busbw at 2 ranks and 5.5 at 4, against 9.2 and 4.3 for 2 x 1 MiB and less for 8 x 256 KiB.
  // 0 (the default): that, or 4 times that when local ranks outnumber the cores (shm::slotBytesFor).
  size_t shmSlotBytes = 0;
  // RINGCOMM_SHM_CMA=auto|0|1 (CrossMemory): all-reduces of at least RINGCOMM_SHM_CMA_MIN_BYTES
  // on one host read each peer's input and output with process_vm_readv (one copy) instead of
  // staging them through the slots (src/algorithms/direct_single_copy.cc). 0 (the default): 8 MiB,
  // measured on the 2-core VM (shm::kSingleCopyMinBytes). The lowest local rank's value counts.
  CrossMemory shmCrossMemory = CrossMemory::Auto;
  size_t shmCrossMemoryMinBytes = 0;
  // RINGCOMM_SHM_CMA_HUGE_PAGES=1|0: a buffer that the single-copy all-reduce sees a second time
  // is collapsed into transparent huge pages, which the kernel's copies pin twice as fast
  // (src/transport/shm/huge_pages.h). Its bytes and address do not change.
  bool shmCrossMemoryHugePages = true;
  // RINGCOMM_SHM_CMA_BUSY_CORES: with RINGCOMM_SHM_CMA=auto, when local ranks outnumber their
  // cores (the union of their affinities) more than 4 to 1 and other processes used at least this
  // many cores' worth of CPU time there over the last window of half a second or more
  // (common/cpu_share.h), those all-reduces stage through the slots instead: the
  // kernel's copies cost the ranks about twice the CPU time of their own, which decides when the
  // ranks get a small share of the cores (bench/RESULTS.md, issue 14). They go back to the single
  // copy once others use under half this. 0: always stage when so crowded. Negative (the default,
  // "auto"): 0.6 of those cores, and only when every local rank is in one autogroup (ranks started
  // together in one session); ranks in sessions of their own, as ringcomm-run, mpiexec (hydra) and
  // torchrun start them, did better with the single copy at every load measured.
  double shmCrossMemoryBusyCores = -1;
  // RINGCOMM_SHM_CMA_OTHERS_CORES_FILE: a file whose number stands in for the measurement that
  // shmCrossMemoryBusyCores is compared with, read at the end of each window instead of /proc.
  // For tests: whether the path switches can then be checked without depending on what else the
  // machine runs (tests/test_crowding.py). Empty (the default): measured.
  std::string shmCrossMemoryOthersCoresFile;
  // RINGCOMM_REDUCE_THREADS=auto|N: threads of each rank that reduce its slice of a single-copy
  // all-reduce between buffers every local rank maps (ringcomm.empty()'s, the staged path's
  // pinned chunks). auto (-1): the cores shared among the host's ranks, at most 4, and 1 where
  // ranks do not each have two cores (common/helper_threads.h).
  int reduceThreads = -1;
  // RINGCOMM_SHM_RING_BYTES: capacity of each point-to-point shared-memory ring.
  size_t shmRingBytes = 1024 * 1024;
  // RINGCOMM_SOCKET_BUFFER_BYTES: SO_SNDBUF/SO_RCVBUF of TCP connections.
  int socketBufferBytes = 4 * 1024 * 1024;
  WireProtection wireProtection = WireProtection::Auto;
  // RINGCOMM_LINKS=on_first_use|at_start: when TCP links are made; the same on every rank.
  LinkSetup links = LinkSetup::OnFirstUse;
  // RINGCOMM_LINK_TIMEOUT (seconds): how long a TCP peer's host may go without answering
  // (keepalive probes, unacknowledged data) before its connection counts as dead and the
  // collective fails naming it; independent of how long its process computes.
  std::chrono::milliseconds linkTimeout{std::chrono::seconds(10)};
  // The network between hosts as the cost model sees it (src/tuning), for choosing between the
  // flat and the hierarchical all-reduce and how the latter crosses hosts: one message's latency
  // (RINGCOMM_LINK_LATENCY_US) and what one host's link carries each way, in bytes per second
  // (RINGCOMM_LINK_GBITS, in Gbit/s). 0: what `ringcomm-bench tune` measured from this host
  // (its link file: ringcomm/_tuning.py sets them), else measured when a communicator spanning
  // hosts is created (tuning/link_probe.h). Rank 0's figures count: it hands them to every rank
  // at creation, so that all choose the same schedules; the communicator's config() then holds
  // them.
  std::chrono::microseconds linkLatency{0};
  double linkBandwidth = 0;

  // The tensor queue (Horovod's model, include/ringcomm/tensor_queue.h), with Horovod's defaults.
  // HOROVOD_CYCLE_TIME and HOROVOD_FUSION_THRESHOLD are read too: Horovod jobs keep their tuning.
  // RINGCOMM_CYCLE_TIME (ms): how often the ranks agree on which named tensors are ready.
  std::chrono::microseconds cycleTime{1000};
  // RINGCOMM_FUSION_THRESHOLD (bytes): most bytes of ready all-reduces fused into one; 0 = none.
  size_t fusionThresholdBytes = 128 * 1024 * 1024;

  // Measured all-reduce choices for this host and world size (`ringcomm-bench tune` writes
  // them, ringcomm.init() reads them: ringcomm/_tuning.py), used by Algorithm::Auto when every
  // rank is on this host: (most bytes, algorithm) rules sorted by size, the first rule whose
  // bytes hold the message wins, sizes beyond the last take the last. shm: ranks connected
  // through shared memory; tcp: through TCP (RINGCOMM_TRANSPORT=tcp). Empty: the cost model
  // (src/tuning) decides. Not read from the environment.
  std::vector<std::pair<size_t, Algorithm>> shmAllreduceRules;
  std::vector<std::pair<size_t, Algorithm>> tcpAllreduceRules;
  // RINGCOMM_TUNING_DIR: where those rules' files are (`ringcomm-bench tune` writes, and
  // ringcomm.init() and the torch.distributed backend read, tuning-<host>-p<size>.json there).
  // Default $XDG_CACHE_HOME/ringcomm, else ~/.cache/ringcomm; "off" (or "0"): no file is read,
  // the cost model decides (tests run so, untouched by a user's measurements). Empty: off.
  std::string tuningDirectory;

  // RINGCOMM_CUDA_PATH=auto|staged|ipc: how an all-reduce of device buffers travels, and whether
  // sends and receives may take UCX's CUDA lanes (types.h).
  CudaPath cudaPath = CudaPath::Auto;
  // RINGCOMM_CUDA_CHUNK_BYTES: the unit of the staged path's pipeline (src/device/staging.h):
  // device-to-host copies, the host collective and host-to-device copies overlap one
  // chunk apart. Each rank pins four chunks of it per device. 16 MiB: a chunk's host all-reduce
  // then takes the single-copy path (from 8 MiB, shm::kSingleCopyMinBytes), whose reduction
  // threads share; 4 MiB chunks went through the slots (bench/RESULTS.md, "The staged path").
  size_t cudaChunkBytes = size_t{16} << 20;
  // The job's secret: every store connection and every data link proves knowledge of it (an HMAC
  // challenge-response, src/auth) before a byte of payload is accepted, and it never travels.
  // RINGCOMM_SECRET (its text), or RINGCOMM_SECRET_FILE (a file readable by its owner only);
  // without either, the launcher's side of ringcomm makes one (ringcomm-run, mpirun through
  // MPI, or a file only this user can read on a one-host job). Empty: none yet.
  std::string secret;

  // Where the CUDA MPS control daemon keeps its pipes: CUDA's own CUDA_MPS_PIPE_DIRECTORY, read
  // here so that ringcomm looks where the CUDA driver does when it tells whether MPS is running.
  std::string mpsPipeDirectory = "/tmp/nvidia-mps";

  // Observability (include/ringcomm/debug.h, docs/guides/debugging.md); the log and the trace are per
  // process, settled by the first communicator created in it.
  // RINGCOMM_DEBUG=NONE|WARN|INFO|TRACE: what the log says (WARN: only what to act on).
  LogLevel logLevel = LogLevel::Warn;
  // RINGCOMM_DEBUG_SUBSYS=INIT,STORE,AUTH,TRANSPORT,ALGO,CUDA,QUEUE,TRACE (or ALL, or ^LIST to
  // exclude): which parts may log at INFO and TRACE.
  uint32_t logSubsystems = kLogAll;
  // RINGCOMM_DEBUG_FILE: where the log goes instead of stderr; %h, %p and %r become the host
  // name, the process id and the rank (as NCCL_DEBUG_FILE's %h and %p). With %r, lines written
  // before the rank is known (none, unless something fails before rendezvous) go to stderr.
  std::string logFile;
  // RINGCOMM_TRACE: a Chrome-trace (Perfetto) file of every collective's phases on every rank,
  // recorded in memory and merged by rank 0 when the communicators shut down. Empty: none.
  std::string traceFile;
  // RINGCOMM_TRACE_MAX_EVENTS: events a rank keeps at most (about 150 bytes each); later ones
  // are counted and dropped, so a long job's memory stays bounded.
  size_t traceMaxEvents = 1u << 20;
  // HOROVOD_TIMELINE and HOROVOD_TIMELINE_MARK_CYCLES: ringcomm.torch's init() starts Horovod's
  // timeline to this file (written by rank 0 at shutdown or stop_timeline()).
  std::string horovodTimeline;
  bool horovodTimelineMarkCycles = false;

  // Reads RINGCOMM_* over the defaults; throws InvalidArgument naming a malformed variable.
  static Config fromEnvironment();

  // Every variable fromEnvironment() reads, with the value in effect and where it came from; a
  // malformed one carries fromEnvironment()'s error instead of throwing.
  static std::vector<ConfigVariable> describeEnvironment();
};

}  // namespace ringcomm
