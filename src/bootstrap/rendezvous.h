// Rendezvous: every rank publishes where it listens and which host it is on, and learns the same
// about everyone, plus the job's key (names shared memory). Every rank posts and counts its
// record; rank 0 waits for the count, reads them all in one request and posts them as one value,
// so the store answers about 3 requests a rank, not one per pair of ranks, and rank 0 waits a
// few round trips, not one a rank. The job's secret, which admits connections, is not here: it
// is each rank's own (Config::secret) and never travels.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ringcomm/config.h"
#include "ringcomm/store.h"

namespace ringcomm::bootstrap {

struct RankRecord {
  std::string hostId;
  std::string address;  // numeric IP the rank listens on
  int port = 0;
  int pid = 0;
  int mailboxPort = 0;  // its membership mailbox (core/membership.h), on `address`; 0: none
  // Whether UCX reaches other hosts by RDMA from this rank (RINGCOMM_TRANSPORT=auto asks): two
  // such ranks on different hosts talk UCX.
  bool rdma = false;
};

struct Rendezvous {
  std::vector<RankRecord> ranks;
  std::string jobKey;
};

Rendezvous rendezvous(Store& store, int rank, int size, const RankRecord& self,
                      std::chrono::milliseconds timeout);

// Ranks with the same host id can share memory: hostname, boot id and network namespace, unless
// RINGCOMM_HOSTID overrides it (Config::hostId).
std::string localHostId(const Config& config);

// The IPv4 address of a named interface (RINGCOMM_SOCKET_IFNAME); throws InvalidArgument naming it.
std::string interfaceAddress(const std::string& name);
// The interface that holds IPv4 `address` on this host, or "" where none does.
std::string interfaceOf(const std::string& address);

}  // namespace ringcomm::bootstrap
