// What both ways of making TCP links share (all at creation: tcp_setup.cc; on first use:
// tcp_dialer.h): the server side of the job-secret handshake on a rank's listener, for any
// number of callers at once, and the byte stream a proven connection becomes, sealed where
// RINGCOMM_WIRE_PROTECTION asks.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "auth/handshake.h"
#include "common/deadline.h"
#include "common/socket.h"
#include "ringcomm/config.h"
#include "transport/byte_stream.h"

namespace ringcomm::transport {

// A connection to a rank's port has this long to prove the job's secret.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);

// What guards one link's frames: `configured`, with auto resolved for a peer on another host
// (integrity, where this build has OpenSSL) or on this one (none: the bytes never leave it).
WireProtection linkProtection(WireProtection configured, bool otherHost);

// The byte stream over a connection that proved the job's secret (its `keys`), sealed where
// its link is protected. `sealed` (optional) says whether it is.
std::unique_ptr<ByteStream> makeTcpLink(net::UniqueFd fd, int peer, const Config& config,
                                        bool otherHost, const auth::LinkKeys& keys,
                                        bool* sealed = nullptr);

// Whether a TransportError from making a socket or taking a connection says this process is out
// of descriptors (EMFILE, ENFILE: net::errnoText's words in it say so).
bool atDescriptorLimit(const std::exception& error);

// The server side of the handshake, on a rank's listener: every connection still in its
// handshake is served from one poll() loop, each with kHandshakeTimeout, so a stranger that
// connects and sends nothing, a few bytes, garbage or a wrong proof is dropped without holding
// up anyone else; at most kMaxHandshakesAtOnce wait at once (the oldest gives way to a
// newcomer, so a flood delays the job's ranks, never keeps them out).
class HandshakeServer {
 public:
  // Called for a caller that proved the secret naming this rank: takes `fd` (and sends the
  // proof, and whatever else the protocol wants) and returns true, or leaves it to be dropped.
  using Take = std::function<bool(int from, net::UniqueFd& fd, const auth::LinkKeys& keys,
                                  const auth::Digest& proof)>;

  HandshakeServer(int rank, int listener, const std::string& secret);
  ~HandshakeServer();
  // The listener (first) and every handshake's socket, for poll(); returns the earliest
  // handshake deadline (or `latest`).
  Clock::time_point pollFds(std::vector<pollfd>& fds, Clock::time_point latest) const;
  // Takes newcomers (where the listener is ready), moves every handshake on as far as its socket
  // allows and hands each caller that proved the secret to `take`. Returns "" or, where
  // accept() failed (out of descriptors), why.
  std::string serve(bool listenerReady, const Take& take);
  // How many connections were dropped for not proving the secret.
  size_t refused() const { return refused_; }

 private:
  struct Pending;
  std::string acceptNewcomers();
  void advance(Clock::time_point now, const Take& take);
  void drop(std::list<Pending>::iterator& it);

  const int rank_;
  const int listener_;
  const std::string secret_;
  std::list<Pending> pending_;
  size_t refused_ = 0;
};

}  // namespace ringcomm::transport
