// Point-to-point messaging between the ranks of a communicator, over whatever reaches each peer:
// a byte stream (TCP socket, shared-memory rings) or a message network (UCX), each behind one
// interface, PeerLink (peer_link.h). Algorithms see only this.
//
// Messages to one peer complete in the order they were posted, in each direction; each carries a
// 24-byte frame header (magic, tag, signature, length) that the receiver checks. Requests
// complete while the caller waits: wait() progresses every pending request, spinning briefly and
// then blocking (poll() on sockets and the network's event descriptor, a futex on the
// shared-memory doorbell), so oversubscribed ranks yield the CPU.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/tags.h"
#include "common/wait_policy.h"
#include "transport/byte_stream.h"
#include "transport/frame.h"
#include "transport/message_network.h"
#include "transport/peer_link.h"
#include "transport/tcp/tcp_dialer.h"

namespace ringcomm::shm {
class Segments;
}

namespace ringcomm::transport {

class Transport {
 public:
  struct Request {
    int peer = -1;
    bool isSend = false;
    uint64_t sequence = 0;  // per peer and direction
  };

  // streams[peer] reaches peer; where it is null, `dialer` does, linking on first use (a TCP
  // peer: tcp/tcp_dialer.h), else the one of `networks` that reaches it (none for this rank).
  // segments: this host's shared memory, or null.
  Transport(int rank, std::vector<std::unique_ptr<ByteStream>> streams,
            std::vector<std::unique_ptr<MessageNetwork>> networks, const shm::Segments* segments,
            WaitPolicy& waitPolicy, std::unique_ptr<TcpDialer> dialer = nullptr);

  // `data` stays valid and unchanged until the request is done. memory: Memory::Cuda only to a
  // peer that takesDeviceMemory().
  Request postSend(int peer, const void* data, size_t bytes, const MessageTag& tag,
                   Memory memory = Memory::Host);
  Request postRecv(int peer, void* data, size_t bytes, const MessageTag& tag,
                   Memory memory = Memory::Host);
  void wait(const Request& request, const Operation& op);
  void waitAll(const Operation& op);
  // Waits until some peer's next incoming message carries this tag and returns that peer; the
  // message stays queued for postRecv. Peers with receives pending are not considered.
  int waitForAnySender(const MessageTag& tag, const Operation& op);
  bool isDone(const Request& request) const;
  // Moves what can move without waiting; with mayBlock and nothing moved, waits up to `slice`
  // for a peer (for requests left pending between collectives). Raises a peer's failure.
  void progress(const Operation& op, bool mayBlock, std::chrono::milliseconds slice);

  // Once no collective runs any more (at shutdown): a description of the message `peer` sent
  // that no receive consumed, or "". Only ranks that disagreed about a collective in which no
  // rank waits leave one behind (every rank a broadcast's root; a scatter meeting a gather at 2
  // ranks): each only sent, so no receive checked the frame's tag and signature. Non-blocking;
  // never throws. A message still in flight is not seen.
  std::string unreadMessageFrom(int peer);

  // "tcp", "shm", a network's kind or "self"; a TCP peer is "tcp" before its link is made too.
  // Any thread.
  const char* kindOf(int peer) const;
  // Whether this rank holds a link to `peer` (TCP links are made on first use). Any thread.
  bool linked(int peer) const;
  // Whether messages to and from `peer` may be in CUDA device memory (a network that takes it);
  // byte streams take host memory only, so device buffers are staged for them.
  bool takesDeviceMemory(int peer) const;
  // Buffers that live long (scratch): registered once with a network that wants it (UCX over
  // RDMA), until forgotten. Nothing for byte streams.
  void registerLongLived(void* data, size_t bytes);
  void forgetLongLived(void* data);
  // Marks every link closed so peers fail fast; pending requests are dropped. Engine thread only.
  void abort();
  // Shuts the links down without touching request queues: safe from any thread.
  void closeLinks();
  // Every sealed link sends unsealed from now on (RINGCOMM_WIRE_PROTECTION=auto on a fast link).
  void stopSealing();

 private:
  struct Peer {
    // Null for this rank, and for a TCP peer not linked yet (made on first use: ensureLink).
    // Set once, by the engine thread, under linksMutex_.
    std::unique_ptr<PeerLink> link;
    std::deque<Message> sends;
    std::deque<Message> recvs;
    uint64_t sendsPosted = 0;
    uint64_t recvsPosted = 0;
    uint64_t sendsDone = 0;
    uint64_t recvsDone = 0;
    bool active = false;  // listed in active_
  };

  // Lists the peer in active_ unless it is there: a send that completed as it was posted leaves
  // its peer listed, with empty queues, until the next progress.
  void markActive(int peer, Peer& state);
  // A TCP peer's link, made where it has none yet (dialed, or the one it made to this rank).
  void ensureLink(int peer, Peer& state, const Operation& op);
  // Links peers made to this rank (a sender to a receive from any source).
  void adoptArrived();
  void adopt(int peer, std::unique_ptr<ByteStream> stream);
  // Empty while the peer's link is healthy (or not made yet); else why it is not.
  std::string failureOf(int peer) const;
  // Moves what every pending peer can move now; true when anything moved. The one progress
  // path, whatever the links are.
  bool progressAll(const Operation& op);
  template <typename Predicate>
  void waitUntil(Predicate done, const Operation& op);
  // Sleeps until a peer this rank waits for can move, for `longest` at most.
  void block(uint32_t doorbellSeen, const Operation& op,
             std::chrono::milliseconds longest = std::chrono::milliseconds::max());
  // Sleeps until any linked peer sends, or a peer links to this rank.
  void blockForAnyIncoming(uint32_t doorbellSeen, const Operation& op);
  void sleepOn(SleepSet& sleep, uint32_t doorbellSeen, std::chrono::milliseconds slice);
  // Raises where an active peer failed, or this rank aborted (checkAborted).
  void checkPeers(const Operation& op);
  // Raises once this rank aborted on shared memory (shm::Segments::markAborted), whose waits
  // nothing else ends: its sockets' waits end as abort() closes them.
  void checkAborted(const Operation& op) const;
  [[noreturn]] void raiseTimeout(const Operation& op) const;

  int rank_;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<MessageNetwork>> networks_;
  const shm::Segments* segments_;
  WaitPolicy& waitPolicy_;
  std::vector<int> active_;  // peers with pending requests
  std::unique_ptr<TcpDialer> dialer_;  // null where every TCP link was made at creation
  mutable std::mutex linksMutex_;      // a link set (adopt) against closeLinks, kindOf
  bool closed_ = false;                // closeLinks() ran: links made later close at once
  bool unsealed_ = false;              // stopSealing() ran: links made later stop too
};

}  // namespace ringcomm::transport
