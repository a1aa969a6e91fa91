// The steps that build links of one kind, for its LinkKind (link_kind.h): the host's
// shared-memory segments (shm/shm_setup.cc, for shm/shm_kind.cc) and the TCP connections made at
// creation (tcp/tcp_setup.cc, for tcp/tcp_kind.cc).
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "common/socket.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"
#include "transport/connect.h"

namespace ringcomm::transport {

// Sets up the shared-memory segments of this host's ranks (links.localRanks) into
// links.segments, or returns false when they cannot have them (too little room in /dev/shm):
// then every local rank uses TCP between them, having come to the same answer from the same
// keys. The lowest local rank says why, once.
bool setUpSharedMemory(Store& store, int rank, Links& links,
                       const bootstrap::Rendezvous& rendezvous, const Config& config,
                       std::chrono::milliseconds timeout);

// Connects to every rank in `tcpPeers` over TCP, each link proving the job's secret both ways,
// into links.streams: lower ranks listen (on `listener`), higher ranks call. `watch` as in
// connectPeers.
void setUpTcp(int rank, const std::vector<int>& tcpPeers, Links& links,
              const bootstrap::Rendezvous& rendezvous, net::UniqueFd listener, const Config& config,
              std::chrono::milliseconds timeout, const std::function<void()>& watch);

}  // namespace ringcomm::transport
