#include "transport/connect.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "common/failure.h"
#include "ringcomm/errors.h"
#include "transport/shm/shm_stream.h"
#include "transport/tcp/tcp_stream.h"

namespace ringcomm::transport {
namespace {

constexpr uint32_t kHelloMagic = 0x52434d48;  // "RCMH"

// The first bytes on every TCP connection: who is calling whom, and the job's secret. A listener
// drops connections that do not present the secret before reading any data from them.
struct Hello {
  uint32_t magic;
  uint32_t from;
  uint32_t to;
  uint32_t reserved;
  uint64_t secret;
};

std::string rankList(const std::set<int>& ranks) {
  std::ostringstream text;
  for (int r : ranks) text << (text.tellp() > 0 ? ", " : "") << r;
  return text.str();
}

void setUpSharedMemory(Store& store, int rank, Links& links,
                       const bootstrap::Rendezvous& rendezvous, const Config& config,
                       std::chrono::milliseconds timeout) {
  const int localRank = static_cast<int>(
      std::find(links.localRanks.begin(), links.localRanks.end(), rank) - links.localRanks.begin());
  links.segments = std::make_unique<shm::Segments>(rendezvous.jobKey, links.localRanks, localRank,
                                                   config.shmSlotBytes, config.shmRingBytes);
  auto barrier = [&](const std::string& phase) {
    store.set("shm/" + phase + "/" + std::to_string(rank), Bytes{1});
    std::vector<std::string> keys;
    for (int peer : links.localRanks) keys.push_back("shm/" + phase + "/" + std::to_string(peer));
    store.wait(keys, timeout);
  };
  links.segments->createOwn();
  barrier("created");
  links.segments->attachPeers();
  barrier("attached");
  links.segments->unlinkOwn();
}

void setUpTcp(int rank, const std::vector<int>& tcpPeers, Links& links,
              const bootstrap::Rendezvous& rendezvous, net::UniqueFd listener, const Config& config,
              std::chrono::milliseconds timeout) {
  OperationLabel label;
  label.collective = "connecting to peers";
  const Operation op(label, rank, timeout);
  std::map<int, net::UniqueFd> connected;
  // Lower ranks listen, higher ranks call: each pair connects exactly once.
  for (int peer : tcpPeers) {
    if (peer > rank) continue;
    const bootstrap::RankRecord& record = rendezvous.ranks[peer];
    net::UniqueFd fd = net::connectTcp(record.address, record.port, op.deadline);
    Hello hello{kHelloMagic, static_cast<uint32_t>(rank), static_cast<uint32_t>(peer), 0,
                rendezvous.secret};
    net::writeFully(fd.get(), &hello, sizeof(hello), op.deadline);
    connected[peer] = std::move(fd);
  }
  std::set<int> awaited;
  for (int peer : tcpPeers) {
    if (peer > rank) awaited.insert(peer);
  }
  while (!awaited.empty()) {
    if (!net::waitReady(listener.get(), POLLIN, op.deadline)) {
      raisePeerFailure<TimeoutError>(op, *awaited.begin(),
                                     "timed out waiting for ranks " + rankList(awaited) +
                                         " to connect");
    }
    net::UniqueFd fd = net::acceptTcp(listener.get());
    if (!fd) continue;
    Hello hello{};
    try {
      net::readFully(fd.get(), &hello, sizeof(hello), op.deadline);
    } catch (const Error&) {
      continue;  // not one of ours, or gone already
    }
    const int from = static_cast<int>(hello.from);
    if (hello.magic != kHelloMagic || hello.secret != rendezvous.secret ||
        hello.to != static_cast<uint32_t>(rank) || awaited.count(from) == 0) {
      continue;  // wrong job or a stray connection: drop it without reading anything more
    }
    uint64_t ack = rendezvous.secret;
    net::writeFully(fd.get(), &ack, sizeof(ack), op.deadline);
    connected[from] = std::move(fd);
    awaited.erase(from);
  }
  for (auto& [peer, fd] : connected) {
    if (peer < rank) {
      uint64_t ack = 0;
      try {
        net::readFully(fd.get(), &ack, sizeof(ack), op.deadline);
      } catch (const Error& error) {
        raisePeerFailure<TransportError>(op, peer, "rank " + std::to_string(peer) +
                                                       " did not accept the connection: " + error.what());
      }
    }
    links.streams[peer] =
        std::make_unique<TcpStream>(fd.release(), peer, config.socketBufferBytes);
  }
}

}  // namespace

Links connectPeers(Store& store, int rank, const bootstrap::Rendezvous& rendezvous,
                   net::UniqueFd listener, const Config& config) {
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
  for (int peer = 0; peer < size; ++peer) {
    if (rendezvous.ranks[peer].hostId == myHost) links.localRanks.push_back(peer);
  }

  std::vector<int> shmPeers;
  std::vector<int> tcpPeers;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const bool sameHost = rendezvous.ranks[peer].hostId == myHost;
    if (config.transport == TransportKind::Shm && !sameHost) {
      throw InvalidArgument("RINGCOMM_TRANSPORT=shm, but rank " + std::to_string(peer) +
                            " is on another host (" + rendezvous.ranks[peer].address +
                            "); use auto or tcp");
    }
    (sameHost && config.transport != TransportKind::Tcp ? shmPeers : tcpPeers).push_back(peer);
  }

  if (!shmPeers.empty()) {
    setUpSharedMemory(store, rank, links, rendezvous, config, config.timeout);
    for (int peer : shmPeers) {
      const int peerLocal = static_cast<int>(
          std::find(links.localRanks.begin(), links.localRanks.end(), peer) - links.localRanks.begin());
      links.streams[peer] = std::make_unique<ShmStream>(*links.segments, peerLocal);
    }
  }
  setUpTcp(rank, tcpPeers, links, rendezvous, std::move(listener), config, config.timeout);
  return links;
}

}  // namespace ringcomm::transport
