#include "tuning/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/tags.h"

namespace ringcomm::tuning {
namespace {

// Round trips of 8 bytes, each after a pause long enough for the peer to block (its spins and
// yields take microseconds); the median counts.
constexpr int kRoundTrips = 7;
constexpr std::chrono::milliseconds kPauseBeforePing{2};
// The exchange: large enough that a link's start-up (TCP's window opening, a shaper's burst
// allowance) is a small part of it, small enough to cost little at creation: 35 ms at 1 Gbit/s,
// 3.5 ms at 10. Shaped namespace links of the test cluster let 256 KiB through at once
// (ringcomm/bench/netns.py), 6% of this.
constexpr size_t kExchangeBytes = 4 << 20;

const MessageTag kProbeTag{collectiveTag(0, CollectiveKind::LinkProbe), 0, 0};

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

Link probeLink(transport::Transport& transport, int peer, bool initiator, const Operation& op) {
  // The lower rank pauses before each ping, so that the other end has gone to sleep waiting for
  // it: a collective's step pays for waking its peer as often as not, and a round trip between
  // two spinning ranks (5 us between namespaces of the 2-core VM) would promise less.
  // A send's buffer stays unchanged until the send is done, so the answer lands elsewhere.
  const uint64_t ping = 0;
  uint64_t answer = 0;
  std::vector<double> trips;
  for (int trip = 0; trip < kRoundTrips; ++trip) {
    if (initiator) {
      std::this_thread::sleep_for(kPauseBeforePing);
      const Clock::time_point start = Clock::now();
      transport.postSend(peer, &ping, sizeof(ping), kProbeTag);
      transport.wait(transport.postRecv(peer, &answer, sizeof(answer), kProbeTag), op);
      trips.push_back(seconds(start, Clock::now()));
    } else {
      transport.wait(transport.postRecv(peer, &answer, sizeof(answer), kProbeTag), op);
      transport.postSend(peer, &ping, sizeof(ping), kProbeTag);
    }
  }
  transport.waitAll(op);
  std::sort(trips.begin(), trips.end());
  const double median = trips.empty() ? 0.0 : trips[trips.size() / 2];
  std::vector<uint8_t> outgoing(kExchangeBytes, 0);
  std::vector<uint8_t> incoming(kExchangeBytes);
  const Clock::time_point start = Clock::now();
  transport.postSend(peer, outgoing.data(), outgoing.size(), kProbeTag);
  transport.postRecv(peer, incoming.data(), incoming.size(), kProbeTag);
  transport.waitAll(op);
  const double exchange = seconds(start, Clock::now());
  // The initiator's figures are the ones published (the caller does it).
  Link link;
  link.latencySeconds = median / 2;
  link.bytesPerSecond = kExchangeBytes / std::max(exchange - link.latencySeconds, 1e-9);
  return link;
}

Link agreeOnLink(transport::Transport& transport, Store& store, int rank, int secondHostRank,
                 const Config& config, const Operation& op) {
  const auto text = [](const std::string& value) { return Bytes(value.begin(), value.end()); };
  if (rank == 0) {
    Link link{config.linkLatency.count() / 1e6, config.linkBandwidth};
    const bool given = link.latencySeconds > 0 && link.bytesPerSecond > 0;
    store.set("link/probe", text(given ? "no" : "yes"));
    if (!given) {
      const Link measured = probeLink(transport, secondHostRank, true, op);
      if (link.latencySeconds <= 0) link.latencySeconds = measured.latencySeconds;
      if (link.bytesPerSecond <= 0) link.bytesPerSecond = measured.bytesPerSecond;
    }
    store.set("link", text(std::to_string(link.latencySeconds) + " " +
                           std::to_string(link.bytesPerSecond)));
  } else if (rank == secondHostRank) {
    const Bytes probe = store.get("link/probe", op.remaining());
    if (std::string(probe.begin(), probe.end()) == "yes") probeLink(transport, 0, false, op);
  }
  const Bytes value = store.get("link", op.remaining());
  std::istringstream figures(std::string(value.begin(), value.end()));
  Link agreed;
  figures >> agreed.latencySeconds >> agreed.bytesPerSecond;
  return agreed;
}

}  // namespace ringcomm::tuning
