// A communicator's sends and receives in flight (Communicator::send/recv).
//
// They do not run to completion in their turn as collectives do: each is posted on the engine in
// its turn and completes later, as its bytes move (during later collectives' waits, or when the
// engine polls between them). A receive posted before the matching send, or two ranks sending
// each other more than a buffer holds, must not deadlock. Touched only by whoever runs the
// engine's turn (engine/engine.h), so it needs no lock of its own.
#pragma once

#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "common/deadline.h"
#include "common/tags.h"
#include "engine/engine.h"
#include "ringcomm/errors.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"
#include "device/device_path.h"
#include "transport/transport.h"

namespace ringcomm {

class PointToPoint {
 public:
  // A send's or receive's tag: the user's, and the element type when the caller gave one.
  static MessageTag tagOf(int tag, const std::optional<DataType>& type);
  // How a send or receive names itself in errors, logs and the trace.
  static OperationLabel labelOf(const char* what, int peer, int tag, size_t bytes);

  // What a send or receive posted in its turn: its request, and where its buffer is device
  // memory the message (staged or not) that carries it, or null.
  struct Posted {
    transport::Transport::Request request;
    std::unique_ptr<device::Message> message;
  };

  // A posted send or receive, whose `work` completes when its bytes have moved (and, for a
  // device buffer, once its message has finished).
  void add(Posted posted, Operation op, WorkPtr work);

  // The engine's poller: completes the sends and receives whose bytes have all moved, fails
  // those past their deadline, and fails them all if a peer failed. `peerFailed` turns a peer's
  // failure into the communicator's (and throws what every pending one then fails with).
  engine::PollResult poll(transport::Transport& transport, bool mayBlock,
                          const std::function<void(const PeerError&)>& peerFailed);

  // At shutdown, once the engine's threads are gone: what is still in flight never completes;
  // each fails with CommunicatorClosed saying `why` (what closed the communicator first: the
  // shutdown, an abort, a failure).
  void abandon(const std::string& why);

 private:
  struct Pending {
    Posted posted;
    Operation op;
    WorkPtr work;
  };
  // The pending one's outcome once its bytes have moved: null, or why its message failed.
  static std::exception_ptr finish(Pending& pending);
  std::list<Pending> pending_;
};

}  // namespace ringcomm
