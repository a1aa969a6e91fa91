// Shared memory between the ranks of a host: the segments planned, created and mapped by every
// local rank together, and whether they read each other's buffers directly (link_setup.h).
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/failure.h"
#include "common/log.h"
#include "common/process.h"
#include "common/wait_policy.h"
#include "ringcomm/errors.h"
#include "transport/link_setup.h"
#include "transport/shm/segment.h"

namespace ringcomm::transport {
namespace {

// How often setup waits look at the local ranks' processes (a dead one is named at once).
constexpr std::chrono::milliseconds kPeerCheckInterval{200};

// The keys of one setup phase, one per local rank.
std::vector<std::string> phaseKeys(const std::string& phase, const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int peer : ranks) keys.push_back("shm/" + phase + "/" + std::to_string(peer));
  return keys;
}

// Waits for `keys`, a short while at a time, and between the waits looks at the local ranks'
// processes: one that died is named at once, instead of the store's timeout naming a key.
void waitWatchingLocalRanks(Store& store, const std::vector<std::string>& keys, int rank,
                            const std::vector<int>& localRanks,
                            const bootstrap::Rendezvous& rendezvous, const Operation& op) {
  for (;;) {
    try {
      store.wait(keys, std::min(kPeerCheckInterval, std::max(std::chrono::milliseconds(1),
                                                              op.remaining())));
      return;
    } catch (const TimeoutError& error) {
      for (int peer : localRanks) {
        const int pid = rendezvous.ranks[peer].pid;
        if (peer != rank && processGone(pid)) {
          raisePeerFailure<TransportError>(op, peer,
                                           "rank " + std::to_string(peer) + " (pid " +
                                               std::to_string(pid) +
                                               ") died during shared-memory setup");
        }
      }
      if (op.expired()) raisePeerFailure<TimeoutError>(op, -1, error.what());
    }
  }
}

// The lowest local rank measures /dev/shm and sizes everyone's segments; every local rank reads
// that plan. One key per host (named after that rank): hosts with different rank counts or room
// plan differently.
shm::SegmentPlan agreeOnSegmentPlan(Store& store, int rank, const std::vector<int>& local,
                                    const bootstrap::Rendezvous& rendezvous, const Config& config,
                                    const Operation& op) {
  const std::string planKey = "shm/plan/" + std::to_string(local.front());
  if (rank == local.front()) {
    const int localSize = static_cast<int>(local.size());
    shm::SegmentPlan plan = shm::planSegments(
        localSize, shm::slotBytesFor(config.shmSlotBytes, localSize, coresAvailable()),
        config.shmRingBytes);
    if (config.shmSlotBytes == 0 && plan.shrunk) {  // the larger automatic slots did not fit
      plan = shm::planSegments(localSize, shm::kDefaultSlotBytes, config.shmRingBytes);
    }
    const std::string text = plan.encode();
    store.set(planKey, Bytes(text.begin(), text.end()));
  }
  waitWatchingLocalRanks(store, {planKey}, rank, local, rendezvous, op);
  const Bytes planBytes = store.get(planKey, op.remaining());
  return shm::SegmentPlan::decode(std::string(planBytes.begin(), planBytes.end()));
}

// The host's word on a setup phase: the lowest local rank waits for every local rank's key of
// `phase` ("ok" or why not), reads them and posts one verdict, "ok" or the first failure with its
// rank ("<rank> <why>"); the others wait for that one key. So the store answers O(G) requests a
// host of G ranks, not G^2: every rank reading every other's key made 1,800 of the 2,060
// requests of a 64-rank job with 8 ranks a host (bench/RESULTS.md, "Start-up at scale").
std::string hostVerdict(Store& store, int rank, const std::vector<int>& local,
                        const std::string& phase, const bootstrap::Rendezvous& rendezvous,
                        const Operation& op) {
  const std::string verdictKey = "shm/" + phase + "/host/" + std::to_string(local.front());
  if (rank != local.front()) {
    waitWatchingLocalRanks(store, {verdictKey}, rank, local, rendezvous, op);
    const Bytes said = store.get(verdictKey, op.remaining());
    return std::string(said.begin(), said.end());
  }
  waitWatchingLocalRanks(store, phaseKeys(phase, local), rank, local, rendezvous, op);
  std::string verdict = "ok";
  for (int peer : local) {
    const Bytes said = store.get("shm/" + phase + "/" + std::to_string(peer), op.remaining());
    const std::string text(said.begin(), said.end());
    if (text != "ok") {
      verdict = std::to_string(peer) + " " + text;
      break;
    }
  }
  store.set(verdictKey, Bytes(verdict.begin(), verdict.end()));
  return verdict;
}

// Whether every local rank created its segment (each says how it went); where one could not,
// this rank's is unlinked and the lowest local rank says why, once.
bool everyoneCreated(Store& store, int rank, Links& links, const bootstrap::Rendezvous& rendezvous,
                     const Operation& op, bool speaks) {
  const std::string verdict =
      hostVerdict(store, rank, links.localRanks, "created", rendezvous, op);
  if (verdict == "ok") return true;
  links.segments->unlinkOwn();
  links.segments.reset();
  if (speaks) {
    const size_t space = verdict.find(' ');
    RINGCOMM_LOG(LogLevel::Warn, kLogTransport,
                 "rank %s could not create its shared memory (%s); the ranks on this host talk "
                 "over TCP instead",
                 verdict.substr(0, space).c_str(), verdict.substr(space + 1).c_str());
  }
  return false;
}

// Maps every local peer's segment, and settles with them whether the direct schedule reads and
// writes their buffers itself (cross-memory attach) or stages them.
void attachPeers(Store& store, int rank, Links& links, const bootstrap::Rendezvous& rendezvous,
                 const Config& config, const Operation& op, bool speaks) {
  const std::vector<int>& local = links.localRanks;
  links.segments->attachPeers();
  links.segments->watchPeers();
  // Every peer's segment is mapped, so its header (pid, token) can be read: probe before
  // saying "attached", and that synchronisation is the one the decision needs.
  const std::string cannot = links.segments->probeCrossMemory(
      config.shmCrossMemory != CrossMemory::Off,
      config.shmCrossMemoryMinBytes != 0 ? config.shmCrossMemoryMinBytes
                                         : shm::kSingleCopyMinBytes);
  if (!cannot.empty() && config.shmCrossMemory != CrossMemory::Off) {
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "%s", cannot.c_str());
  }
  store.set("shm/attached/" + std::to_string(rank), Bytes{'o', 'k'});
  hostVerdict(store, rank, local, "attached", rendezvous, op);
  const std::string staged = links.segments->settleCrossMemory();
  if (!staged.empty() && config.shmCrossMemory == CrossMemory::On) {
    throw Error("ringcomm: RINGCOMM_SHM_CMA=1, but the direct schedule cannot read local peers' "
                "memory: " + (cannot.empty() ? staged : cannot) +
                ". Allow it (Yama: sysctl kernel.yama.ptrace_scope=0; Docker: --cap-add "
                "SYS_PTRACE) or set RINGCOMM_SHM_CMA=auto");
  }
  if (speaks && local.size() > 1) {
    if (staged.empty()) {
      RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                   "direct all-reduces of %zu B and more read and write peers' buffers "
                   "directly (cross-memory attach, one copy)",
                   links.segments->singleCopyMinBytes());
    } else {
      RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                   "cross-memory attach unavailable (%s): direct all-reduces stage every size "
                   "through shared memory",
                   staged.c_str());
    }
  }
}

}  // namespace

bool setUpSharedMemory(Store& store, int rank, Links& links,
                       const bootstrap::Rendezvous& rendezvous, const Config& config,
                       std::chrono::milliseconds timeout) {
  OperationLabel label;
  label.collective = "setting up shared memory";
  const Operation op(label, rank, timeout);
  const std::vector<int>& local = links.localRanks;
  const int localRank =
      static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  const bool speaks = localRank == 0;

  const shm::SegmentPlan plan = agreeOnSegmentPlan(store, rank, local, rendezvous, config, op);
  if (!plan.fits) {
    if (speaks) {
      RINGCOMM_LOG(LogLevel::Warn, kLogTransport,
                   "not enough shared memory for the %zu ranks on this host (%s); they talk over "
                   "TCP instead. Give /dev/shm more room (docker run --shm-size=1g; a "
                   "memory-backed emptyDir on Kubernetes)",
                   local.size(), plan.room.c_str());
    }
    return false;
  }
  if (plan.shrunk && speaks) {
    RINGCOMM_LOG(LogLevel::Warn, kLogTransport,
                 "%s; using %zu KiB staging slots and %zu KiB rings instead of %zu and %zu, "
                 "which is slower. Give /dev/shm more room (docker run --shm-size=1g)",
                 plan.room.c_str(), plan.slotBytes >> 10, plan.ringBytes >> 10,
                 (config.shmSlotBytes != 0 ? config.shmSlotBytes : shm::kDefaultSlotBytes) >> 10,
                 config.shmRingBytes >> 10);
  }
  RINGCOMM_LOG(LogLevel::Info, kLogTransport,
               "shared memory for the %zu ranks on this host: %zu KiB staging slots, %zu KiB "
               "rings (%s)",
               local.size(), plan.slotBytes >> 10, plan.ringBytes >> 10, plan.room.c_str());

  links.segments = std::make_unique<shm::Segments>(rendezvous.jobKey, local, localRank,
                                                   plan.slotBytes, plan.ringBytes);
  // Creating can still fail (another job took the room meanwhile): every rank says how it went.
  std::string failure;
  try {
    links.segments->createOwn();
  } catch (const Error& error) {
    failure = error.what();
  }
  const std::string created = failure.empty() ? "ok" : failure;
  store.set("shm/created/" + std::to_string(rank), Bytes(created.begin(), created.end()));
  try {
    if (!everyoneCreated(store, rank, links, rendezvous, op, speaks)) return false;
    attachPeers(store, rank, links, rendezvous, config, op, speaks);
  } catch (...) {
    // A rank that died here cannot unlink its segment: the others do, so nothing is left behind.
    if (links.segments) links.segments->unlinkAll();
    throw;
  }
  // Every local rank has mapped every segment: each unlinks all of them, not only its own, so
  // that a rank killed between here and its own unlink leaves nothing in /dev/shm (the chaos
  // runs of bench/chaos.py left 4 segments behind in some 350 jobs).
  links.segments->unlinkAll();
  return true;
}

}  // namespace ringcomm::transport
