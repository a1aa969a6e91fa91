// TCP links: this rank calls the lower ranks and takes the higher ones' calls, each link proving
// the job's secret both ways, and wraps each in a stream, sealed where asked (link_setup.h).
#include <poll.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "auth/handshake.h"
#include "common/failure.h"
#include "common/log.h"
#include "ringcomm/errors.h"
#include "transport/link_setup.h"
#include "transport/tcp/tcp_link.h"

namespace ringcomm::transport {
namespace {

std::string rankList(const std::set<int>& ranks) {
  std::ostringstream text;
  for (int r : ranks) text << (text.tellp() > 0 ? ", " : "") << r;
  return text.str();
}

// How often a connecting rank calls its watch (connectPeers) while it waits.
constexpr std::chrono::milliseconds kConnectWatchInterval{100};

// net::connectTcp by `deadline`, calling `watch` between attempts: a peer that refuses may have
// given up forming the communicator, which the watch finds (connectTcp itself retries a refusal
// until the deadline, since a listener may start late).
net::UniqueFd connectWatched(const std::string& host, int port, Clock::time_point deadline,
                             const std::function<void()>& watch) {
  if (!watch) return net::connectTcp(host, port, deadline);
  for (;;) {
    try {
      return net::connectTcp(host, port, std::min(deadline, Clock::now() + kConnectWatchInterval));
    } catch (const PeerError&) {
      if (Clock::now() >= deadline) throw;
    }
    watch();
  }
}

// The connections this rank makes: to each lower rank, proving the job's secret and having the
// peer prove it back, named by its rank.
void callLowerRanks(int rank, const std::vector<int>& tcpPeers,
                    const bootstrap::Rendezvous& rendezvous, const Config& config,
                    const Operation& op, const std::function<void()>& watch,
                    std::map<int, net::UniqueFd>& connected, std::map<int, auth::LinkKeys>& keys) {
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
}

// The connections this rank takes: from each higher rank, on its listener, once the caller has
// proved the job's secret (HandshakeServer: strangers are dropped without holding anyone up).
class HigherRanksListener {
 public:
  HigherRanksListener(int rank, const std::vector<int>& tcpPeers, int listener,
                      const Config& config, const Operation& op,
                      std::map<int, net::UniqueFd>& connected, std::map<int, auth::LinkKeys>& keys)
      : rank_(rank), server_(rank, listener, config.secret), op_(op), connected_(connected),
        keys_(keys) {
    for (int peer : tcpPeers) {
      if (peer > rank) awaited_.insert(peer);
    }
  }

  // Until every higher rank has connected and proved the secret; calls `watch` between polls.
  // Returns how many connections it dropped for not proving it.
  size_t run(const std::function<void()>& watch) {
    const auto take = [this](int from, net::UniqueFd& fd, const auth::LinkKeys& linkKeys,
                             const auth::Digest& proof) {
      // Only a rank this one still waits for.
      if (awaited_.count(from) == 0) return false;
      try {
        net::writeFully(fd.get(), proof.data(), proof.size(),
                        std::min(op_.deadline, Clock::now() + kHandshakeTimeout));
      } catch (const Error&) {
        return false;
      }
      keys_[from] = linkKeys;
      connected_[from] = std::move(fd);
      awaited_.erase(from);
      return true;
    };
    while (!awaited_.empty()) {
      const bool newcomers = poll(watch);
      if (op_.expired()) {
        raisePeerFailure<TimeoutError>(op_, *awaited_.begin(),
                                       "timed out waiting for ranks " + rankList(awaited_) +
                                           " to connect");
      }
      // Out of descriptors: the handshakes in progress finish or expire first.
      server_.serve(newcomers, take);
    }
    return server_.refused();
  }

 private:
  // Waits for the listener or a handshake to be ready (or a handshake's deadline); returns
  // whether the listener has newcomers.
  bool poll(const std::function<void()>& watch) {
    std::vector<pollfd> fds;
    const Clock::time_point wake = server_.pollFds(fds, op_.deadline);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    const int64_t longest = watch ? kConnectWatchInterval.count() : 1000;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(left, 0, longest))) <
            0 &&
        errno != EINTR) {
      throw TransportError(std::string("ringcomm: poll() failed: ") + std::strerror(errno),
                           FailureContext{op_.label.collective, rank_, -1, 0.0});
    }
    if (watch) watch();
    return fds[0].revents != 0;
  }

  const int rank_;
  HandshakeServer server_;
  const Operation& op_;
  std::map<int, net::UniqueFd>& connected_;
  std::map<int, auth::LinkKeys>& keys_;
  std::set<int> awaited_;
};

// The byte stream of each connected peer, sealed where its link is protected
// (RINGCOMM_WIRE_PROTECTION), and a line in the log on what guards them.
void makeTcpStreams(int rank, Links& links, const bootstrap::Rendezvous& rendezvous,
                    const Config& config, std::map<int, net::UniqueFd>& connected,
                    const std::map<int, auth::LinkKeys>& keys) {
  size_t sealed = 0;
  size_t exposed = 0;  // links to other hosts left unprotected by a build without OpenSSL
  for (auto& [peer, fd] : connected) {
    const bool otherHost = rendezvous.ranks[rank].hostId != rendezvous.ranks[peer].hostId;
    bool isSealed = false;
    links.streams[peer] =
        makeTcpLink(std::move(fd), peer, config, otherHost, keys.at(peer), &isSealed);
    if (isSealed) {
      ++sealed;
    } else if (otherHost && config.wireProtection == WireProtection::Auto) {
      ++exposed;
    }
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

// Lower ranks listen, higher ranks call: each pair connects exactly once. The caller proves the
// job's secret and has the listener prove it back (auth handshake, purpose Data, naming both
// ranks) before a byte of payload moves.
void setUpTcp(int rank, const std::vector<int>& tcpPeers, Links& links,
              const bootstrap::Rendezvous& rendezvous, net::UniqueFd listener, const Config& config,
              std::chrono::milliseconds timeout, const std::function<void()>& watch) {
  OperationLabel label;
  label.collective = "connecting to peers";
  const Operation op(label, rank, timeout);
  std::map<int, net::UniqueFd> connected;
  std::map<int, auth::LinkKeys> keys;
  callLowerRanks(rank, tcpPeers, rendezvous, config, op, watch, connected, keys);
  const size_t refused =
      HigherRanksListener(rank, tcpPeers, listener.get(), config, op, connected, keys).run(watch);
  if (refused > 0) {
    RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                 "rank %d dropped %zu connection(s) to its port that did not prove the job's "
                 "secret (strangers, or ranks of another job)",
                 rank, refused);
  }
  if (!tcpPeers.empty()) {
    RINGCOMM_LOG(LogLevel::Info, kLogAuth,
                 "%zu TCP link(s) proved the job's secret, joined with this communicator's "
                 "key, both ways (HMAC-SHA256 challenge-response) before any payload",
                 connected.size());
  }
  makeTcpStreams(rank, links, rendezvous, config, connected, keys);
}

}  // namespace ringcomm::transport
