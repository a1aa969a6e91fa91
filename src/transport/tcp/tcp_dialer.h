// TCP links made on first use (RINGCOMM_LINKS=on_first_use, the default): a rank holds links only
// to the peers it exchanges messages with (ring neighbours, tree partners, host leaders, an
// all-to-all's peers while it runs, point-to-point peers), not a full mesh made at creation (a
// thousand sockets a rank at a thousand ranks, past many systems' `ulimit -n`). NCCL connects
// the peers its rings and trees use when they first need them, for the same reason.
//
// The dialer owns the rank's listener and the record of each TCP peer's link. An acceptor
// thread takes connections, runs the server side of the job-secret handshake (tcp_link.h) and
// answers each proven caller with one verdict byte; the engine thread dials (link()) when the
// transport first needs a peer it has no link to: connect, the caller's side of the handshake,
// the verdict.
//
// Both ends may dial each other at once (a sender to a receive from any source dials; so does a
// receiver that names its sender). One mutex settles it: a dial from peer p is refused where a
// link to p already exists, or where this rank dials p itself and has the lower rank; else it is
// accepted and its link kept for the transport to take. So of two crossing dials the lower
// rank's wins: the higher rank's is refused, and it waits for the lower rank's, which its own
// acceptor accepts (its dial pending does not count against a lower rank). A dial that found a
// link already made (one that arrived first) is never started. Each pair ends with one link.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "auth/handshake.h"
#include "common/deadline.h"
#include "common/socket.h"
#include "ringcomm/config.h"
#include "transport/byte_stream.h"

namespace ringcomm::transport {

class TcpDialer {
 public:
  // Where a TCP peer listens, and whether it is on another host (its link's protection).
  struct PeerAddress {
    std::string host;
    int port = 0;
    bool otherHost = false;
  };

  // Starts the acceptor on `listener`. `peers`: every peer this rank reaches over TCP.
  TcpDialer(int rank, std::map<int, PeerAddress> peers, net::UniqueFd listener,
            const Config& config);
  ~TcpDialer();
  TcpDialer(const TcpDialer&) = delete;
  TcpDialer& operator=(const TcpDialer&) = delete;

  bool reaches(int peer) const { return peers_.count(peer) != 0; }
  // The link to `peer`: the one it made to this rank, or one this rank dials now, by the
  // operation's deadline. Engine thread only. Raises TransportError naming the peer where it
  // cannot be reached or fails the handshake (it is gone), TimeoutError where it does not
  // answer, and TransportError naming no peer where this process is out of descriptors.
  std::unique_ptr<ByteStream> link(int peer, const Operation& op);
  // The links peers made to this rank that nobody took yet (non-blocking).
  std::vector<std::pair<int, std::unique_ptr<ByteStream>>> takeArrived();
  // Readable while links wait in takeArrived() (for poll()).
  int arrivalFd() const { return arrivalRead_.get(); }
  // "" or why the acceptor could not take a connection (out of descriptors).
  std::string failure() const;
  // Stops the acceptor and closes the listener: dials to this rank are refused, and link()
  // raises, from now on; links that arrived and were not taken are closed. Any thread;
  // idempotent.
  void close();
  // Links made so far (taken or waiting), for the log.
  int linkCount() const;

 private:
  enum class State { None, Dialing, Arrived, Taken };
  struct Record {
    State state = State::None;
    std::unique_ptr<ByteStream> stream;  // Arrived: the link, until taken
  };

  void acceptLoop();
  // The acceptor's verdict on a proven caller (under mutex_); sends it; keeps an accepted link.
  bool answer(int from, net::UniqueFd& fd, const auth::LinkKeys& keys,
              const auth::Digest& proof);
  // Connect, the caller's handshake and the peer's verdict: the link, or null where refused.
  std::unique_ptr<ByteStream> dial(int peer, const Operation& op);
  // After a refused dial: the peer's own, by the deadline.
  std::unique_ptr<ByteStream> awaitArrival(int peer, const Operation& op);
  size_t warnOfStrangers(size_t count, bool closing) const;

  const int rank_;
  const std::map<int, PeerAddress> peers_;
  const Config config_;
  net::UniqueFd listener_;
  net::UniqueFd arrivalRead_;  // a pipe, readable while links wait in takeArrived()
  net::UniqueFd arrivalWrite_;
  net::UniqueFd stopRead_;  // a pipe that close() writes to end the acceptor's poll
  net::UniqueFd stopWrite_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<int, Record> records_;
  bool closed_ = false;
  bool signalled_ = false;
  std::string failure_;
  std::thread acceptor_;
};

}  // namespace ringcomm::transport
