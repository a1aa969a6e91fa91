#include "transport/connect.h"

#include <poll.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "auth/handshake.h"
#include "common/failure.h"
#include "common/process.h"
#include "common/log.h"
#include "common/wait_policy.h"
#include "ringcomm/errors.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_stream.h"
#include "transport/tcp/sealed_stream.h"
#include "transport/tcp/tcp_stream.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm::transport {
namespace {

// How often setup waits look at the local ranks' processes (a dead one is named at once).
constexpr std::chrono::milliseconds kPeerCheckInterval{200};
// A connection to this rank's port has this long to prove the job's secret.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// Connections in their handshake at once; past this the oldest gives way to a newcomer.
constexpr size_t kMaxPendingHandshakes = 256;

std::string rankList(const std::set<int>& ranks) {
  std::ostringstream text;
  for (int r : ranks) text << (text.tellp() > 0 ? ", " : "") << r;
  return text.str();
}

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

// Sets up the shared-memory segments of this host's ranks, or returns false when they cannot
// have them (too little room in /dev/shm): then every local rank uses TCP between them, having
// come to the same answer from the same keys. The lowest local rank says why, once.
bool setUpSharedMemory(Store& store, int rank, Links& links, const bootstrap::Rendezvous& rendezvous,
                       const Config& config, std::chrono::milliseconds timeout) {
  OperationLabel label;
  label.collective = "setting up shared memory";
  const Operation op(label, rank, timeout);
  const std::vector<int>& local = links.localRanks;
  const int localRank =
      static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  const bool speaks = localRank == 0;

  // The plan: the lowest local rank measures /dev/shm and sizes everyone's segments. One key per
  // host (named after that rank): hosts with different rank counts or room plan differently.
  const std::string planKey = "shm/plan/" + std::to_string(local.front());
  if (speaks) {
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
  const shm::SegmentPlan plan = shm::SegmentPlan::decode(std::string(planBytes.begin(), planBytes.end()));
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
    waitWatchingLocalRanks(store, phaseKeys("created", local), rank, local, rendezvous, op);
    for (int peer : local) {
      const Bytes said = store.get("shm/created/" + std::to_string(peer), op.remaining());
      const std::string text(said.begin(), said.end());
      if (text != "ok") {
        links.segments->unlinkOwn();
        links.segments.reset();
        if (speaks) {
          RINGCOMM_LOG(LogLevel::Warn, kLogTransport,
                       "rank %d could not create its shared memory (%s); the ranks on this host "
                       "talk over TCP instead",
                       peer, text.c_str());
        }
        return false;
      }
    }
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
    store.set("shm/attached/" + std::to_string(rank), Bytes{1});
    waitWatchingLocalRanks(store, phaseKeys("attached", local), rank, local, rendezvous, op);
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

// One connection to this rank's listener whose caller has not yet proved the job's secret.
struct PendingHandshake {
  net::UniqueFd fd;
  std::unique_ptr<auth::Acceptor> acceptor;
  size_t helloSent = 0;
  Bytes reply;
  Clock::time_point deadline;
};

// How often a connecting rank calls its watch (connectPeers) while it waits.
constexpr std::chrono::milliseconds kWatchInterval{100};

// net::connectTcp by `deadline`, calling `watch` between attempts: a peer that refuses may have
// given up forming the communicator, which the watch finds (connectTcp itself retries a refusal
// until the deadline, since a listener may start late).
net::UniqueFd connectWatched(const std::string& host, int port, Clock::time_point deadline,
                             const std::function<void()>& watch) {
  if (!watch) return net::connectTcp(host, port, deadline);
  for (;;) {
    try {
      return net::connectTcp(host, port, std::min(deadline, Clock::now() + kWatchInterval));
    } catch (const PeerError&) {
      if (Clock::now() >= deadline) throw;
    }
    watch();
  }
}

// What guards one link's frames: `configured`, with auto resolved for a peer on another host
// (integrity, where this build has OpenSSL) or on this one (none: the bytes never leave it).
WireProtection linkProtection(WireProtection configured, bool otherHost) {
  if (configured != WireProtection::Auto) return configured;
  return otherHost && wireProtectionBuilt() ? WireProtection::Integrity : WireProtection::Off;
}

// Lower ranks listen, higher ranks call: each pair connects exactly once. The caller proves the
// job's secret and has the listener prove it back (auth handshake, purpose Data, naming both
// ranks) before a byte of payload moves.
//
// The listener serves every connection still in its handshake from one poll() loop, each with
// kHandshakeTimeout: a stranger that connects and sends nothing, a few bytes, garbage or a wrong
// proof is dropped without holding up anyone else, and at most kMaxPendingHandshakes wait at once
// (the oldest gives way to a newcomer, so a flood delays the job's ranks, never keeps them out).
void setUpTcp(int rank, const std::vector<int>& tcpPeers, Links& links,
              const bootstrap::Rendezvous& rendezvous, net::UniqueFd listener, const Config& config,
              std::chrono::milliseconds timeout, const std::function<void()>& watch) {
  OperationLabel label;
  label.collective = "connecting to peers";
  const Operation op(label, rank, timeout);
  std::map<int, net::UniqueFd> connected;
  std::map<int, auth::LinkKeys> keys;
  for (int peer : tcpPeers) {
    if (peer > rank) continue;
    const bootstrap::RankRecord& record = rendezvous.ranks[peer];
    net::UniqueFd fd = connectWatched(record.address, record.port, op.deadline, watch);
    try {
      keys[peer] = auth::connectHandshake(fd.get(), config.secret, auth::Purpose::Data,
                                          auth::Caller{rank, peer}, op.deadline,
                                          "rank " + std::to_string(peer));
    } catch (const TimeoutError& error) {
      raisePeerFailure<TimeoutError>(op, peer, "rank " + std::to_string(peer) +
                                                   " did not finish the handshake: " + error.what());
    } catch (const TransportError& error) {
      raisePeerFailure<TransportError>(op, peer, error.what());
    }
    connected[peer] = std::move(fd);
  }

  std::set<int> awaited;
  for (int peer : tcpPeers) {
    if (peer > rank) awaited.insert(peer);
  }
  std::list<PendingHandshake> pending;
  size_t refused = 0;
  auto drop = [&](std::list<PendingHandshake>::iterator it) {
    ++refused;
    return pending.erase(it);
  };
  while (!awaited.empty()) {
    Clock::time_point wake = op.deadline;
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    for (const PendingHandshake& handshake : pending) {
      const bool helloLeft = handshake.helloSent < auth::kHelloBytes;
      fds.push_back({handshake.fd.get(), static_cast<short>(POLLIN | (helloLeft ? POLLOUT : 0)), 0});
      wake = std::min(wake, handshake.deadline);
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    const int64_t longest = watch ? kWatchInterval.count() : 1000;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left, 0, longest))) <
            0 &&
        errno != EINTR) {
      throw TransportError(std::string("ringcomm: poll() failed: ") + std::strerror(errno),
                           FailureContext{label.collective, rank, -1, 0.0});
    }
    if (watch) watch();
    if (op.expired()) {
      raisePeerFailure<TimeoutError>(op, *awaited.begin(),
                                     "timed out waiting for ranks " + rankList(awaited) +
                                         " to connect");
    }
    // Newcomers: each gets the hello at once.
    if (fds[0].revents != 0) {
      for (;;) {
        net::UniqueFd fd;
        try {
          fd = net::acceptTcp(listener.get());
        } catch (const TransportError&) {
          break;  // out of descriptors: the handshakes in progress finish or expire first
        }
        if (!fd) break;
        if (pending.size() >= kMaxPendingHandshakes) drop(pending.begin());
        PendingHandshake handshake;
        handshake.fd = std::move(fd);
        handshake.acceptor = std::make_unique<auth::Acceptor>(config.secret, auth::Purpose::Data);
        handshake.deadline = Clock::now() + kHandshakeTimeout;
        pending.push_back(std::move(handshake));
      }
    }
    const Clock::time_point now = Clock::now();
    for (auto it = pending.begin(); it != pending.end();) {
      PendingHandshake& handshake = *it;
      try {
        while (handshake.helloSent < auth::kHelloBytes) {
          const size_t n = net::writeSome(handshake.fd.get(),
                                          handshake.acceptor->hello().data() + handshake.helloSent,
                                          auth::kHelloBytes - handshake.helloSent);
          if (n == 0) break;
          handshake.helloSent += n;
        }
        uint8_t bytes[auth::kReplyBytes];
        const size_t n = net::readSome(handshake.fd.get(), bytes,
                                       auth::kReplyBytes - handshake.reply.size());
        handshake.reply.insert(handshake.reply.end(), bytes, bytes + n);
      } catch (const TransportError&) {
        it = drop(it);  // gone, or reset
        continue;
      }
      if (handshake.reply.size() < auth::kReplyBytes) {
        it = now >= handshake.deadline ? drop(it) : std::next(it);
        continue;
      }
      const auto accepted = handshake.acceptor->check(handshake.reply.data());
      // Only a rank this one still waits for, calling this very rank, with the secret.
      if (!accepted || accepted->first.to != rank || awaited.count(accepted->first.from) == 0) {
        it = drop(it);
        continue;
      }
      const auth::Digest& proof = accepted->second;
      try {
        net::writeFully(handshake.fd.get(), proof.data(), proof.size(),
                        std::min(op.deadline, now + kHandshakeTimeout));
      } catch (const Error&) {
        it = drop(it);
        continue;
      }
      const int from = accepted->first.from;
      keys[from] = handshake.acceptor->keys(handshake.reply.data());
      connected[from] = std::move(handshake.fd);
      awaited.erase(from);
      it = pending.erase(it);
    }
  }
  if (refused > 0) {
    RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                 "rank %d dropped %zu connection(s) to its port that did not prove the job's "
                 "secret (strangers, or ranks of another job)",
                 rank, refused);
  }
  if (!tcpPeers.empty()) {
    RINGCOMM_LOG(LogLevel::Info, kLogAuth,
                 "%zu TCP link(s) proved the job's secret both ways (HMAC-SHA256 "
                 "challenge-response, %zu-byte secret) before any payload",
                 connected.size(), config.secret.size());
  }
  size_t sealed = 0;
  size_t exposed = 0;  // links to other hosts left unprotected by a build without OpenSSL
  for (auto& [peer, fd] : connected) {
    std::unique_ptr<ByteStream> stream = std::make_unique<TcpStream>(
        fd.release(), peer, config.socketBufferBytes, config.linkTimeout);
    const bool otherHost = rendezvous.ranks[rank].hostId != rendezvous.ranks[peer].hostId;
    const WireProtection protection = linkProtection(config.wireProtection, otherHost);
    if (protection != WireProtection::Off) {
      stream = sealStream(std::move(stream), peer, protection, keys.at(peer));
      ++sealed;
    } else if (otherHost && config.wireProtection == WireProtection::Auto) {
      ++exposed;
    }
    links.streams[peer] = std::move(stream);
  }
  if (exposed > 0) {
    RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                 "%zu TCP link(s) to other hosts carry frames without an integrity check: this "
                 "build has no OpenSSL (install libssl-dev and reinstall ringcomm)",
                 exposed);
  }
  if (sealed > 0) {
    RINGCOMM_LOG(LogLevel::Info, kLogAuth,
                 "%zu of %zu TCP link(s) carry authenticated%s records (AES-256-GCM, per-link "
                 "keys, RINGCOMM_WIRE_PROTECTION)",
                 sealed, connected.size(),
                 config.wireProtection == WireProtection::Encrypt ? ", encrypted" : "");
  }
}

}  // namespace

LinkChoice chooseLink(const Config& config, const bootstrap::RankRecord& self,
                      const bootstrap::RankRecord& peer, int peerRank) {
  const bool sameHost = peer.hostId == self.hostId;
  const bool sealingAsked = config.wireProtection == WireProtection::Integrity ||
                            config.wireProtection == WireProtection::Encrypt;
  switch (config.transport) {
    case TransportKind::Shm:
      if (!sameHost) {
        throw InvalidArgument("RINGCOMM_TRANSPORT=shm, but rank " + std::to_string(peerRank) +
                              " is on another host (" + peer.address + "); use auto, tcp or ucx");
      }
      return {LinkKind::Shm, "same host"};
    case TransportKind::Tcp:
      return {LinkKind::Tcp, sameHost ? "same host, but RINGCOMM_TRANSPORT=tcp" : "another host"};
    case TransportKind::Ucx:
      if (sealingAsked) {
        throw InvalidArgument(
            std::string("RINGCOMM_WIRE_PROTECTION=") +
            (config.wireProtection == WireProtection::Encrypt ? "encrypt" : "integrity") +
            ", but RINGCOMM_TRANSPORT=ucx cannot seal what it sends (UCX moves frames, and RDMA "
            "reads memory, as they are); use RINGCOMM_TRANSPORT=auto or tcp for sealed links, "
            "or RINGCOMM_WIRE_PROTECTION=off");
      }
      return {LinkKind::Ucx, "RINGCOMM_TRANSPORT=ucx"};
    case TransportKind::Auto:
      break;
  }
  if (sameHost) return {LinkKind::Shm, "same host"};
  // UCX cannot seal frames: a configuration that asks for sealing keeps these links on TCP.
  if (!(self.rdma && peer.rdma)) return {LinkKind::Tcp, "another host"};
  if (sealingAsked) return {LinkKind::Tcp, "another host; RDMA, but RINGCOMM_WIRE_PROTECTION"};
  return {LinkKind::Ucx, "another host, RDMA at both ends"};
}

Links connectPeers(Store& store, int rank, const bootstrap::Rendezvous& rendezvous,
                   net::UniqueFd listener, const Config& config,
                   const std::function<void()>& watch) {
  const int size = static_cast<int>(rendezvous.ranks.size());
  Links links;
  links.streams.resize(size);

  std::vector<std::string> hosts;
  for (const auto& record : rendezvous.ranks) {
    if (std::find(hosts.begin(), hosts.end(), record.hostId) == hosts.end()) {
      hosts.push_back(record.hostId);
    }
  }
  const std::string& myHost = rendezvous.ranks[rank].hostId;
  links.hostCount = static_cast<int>(hosts.size());
  links.hostIndex = static_cast<int>(std::find(hosts.begin(), hosts.end(), myHost) - hosts.begin());
  links.hostRanks.resize(hosts.size());
  for (int peer = 0; peer < size; ++peer) {
    const std::string& host = rendezvous.ranks[peer].hostId;
    links.hostRanks[std::find(hosts.begin(), hosts.end(), host) - hosts.begin()].push_back(peer);
  }
  links.localRanks = links.hostRanks[links.hostIndex];

  std::vector<int> shmPeers;
  std::vector<int> tcpPeers;
  std::vector<int> ucxPeers;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const bootstrap::RankRecord& record = rendezvous.ranks[peer];
    const LinkChoice choice = chooseLink(config, rendezvous.ranks[rank], record, peer);
    (choice.kind == LinkKind::Ucx   ? ucxPeers
     : choice.kind == LinkKind::Shm ? shmPeers
                                    : tcpPeers)
        .push_back(peer);
    RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d (%s:%d): %s (%s)", peer,
                 record.address.c_str(), record.port,
                 choice.kind == LinkKind::Ucx   ? "UCX"
                 : choice.kind == LinkKind::Shm ? "shared memory"
                                                : "TCP",
                 choice.why);
  }

  if (!shmPeers.empty() &&
      !setUpSharedMemory(store, rank, links, rendezvous, config, config.timeout)) {
    if (config.transport == TransportKind::Shm) {
      throw Error("ringcomm: RINGCOMM_TRANSPORT=shm, but the ranks on this host cannot have "
                  "shared memory (see the warning above); use auto or tcp");
    }
    RINGCOMM_LOG(LogLevel::Info, kLogTransport,
                 "falling back to TCP for the %zu peer(s) on this host (no shared memory)",
                 shmPeers.size());
    tcpPeers.insert(tcpPeers.end(), shmPeers.begin(), shmPeers.end());
    std::sort(tcpPeers.begin(), tcpPeers.end());
    shmPeers.clear();
  }
  if (!shmPeers.empty()) {
    for (int peer : shmPeers) {
      const int peerLocal = static_cast<int>(
          std::find(links.localRanks.begin(), links.localRanks.end(), peer) - links.localRanks.begin());
      links.streams[peer] = std::make_unique<ShmStream>(*links.segments, peerLocal);
    }
  }
  setUpTcp(rank, tcpPeers, links, rendezvous, std::move(listener), config, config.timeout, watch);
  if (!ucxPeers.empty()) {
    OperationLabel label;
    label.collective = "connecting to peers over UCX";
    const Operation op(label, rank, config.timeout);
    links.network = connectUcx(store, rank, rendezvous, ucxPeers, config, op, watch);
  }
  return links;
}

}  // namespace ringcomm::transport
