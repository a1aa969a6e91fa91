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
#include <optional>

#include "common/deadline.h"
#include "common/tags.h"
#include "engine/engine.h"
#include "ringcomm/errors.h"
#include "ringcomm/types.h"
#include "ringcomm/work.h"
#include "transport/transport.h"

namespace ringcomm {

class PointToPoint {
 public:
  // A send's or receive's tag: the user's, and the element type when the caller gave one.
  static MessageTag tagOf(int tag, const std::optional<DataType>& type);
  // How a send or receive names itself in errors, logs and the trace.
  static OperationLabel labelOf(const char* what, int peer, int tag, size_t bytes);

  // A posted send or receive, whose `work` completes when its bytes have moved.
  void add(transport::Transport::Request request, Operation op, WorkPtr work);

  // The engine's poller: completes the sends and receives whose bytes have all moved, fails
  // those past their deadline, and fails them all if a peer failed. `peerFailed` turns a peer's
  // failure into the communicator's (and throws what every pending one then fails with).
  engine::PollResult poll(transport::Transport& transport, bool mayBlock,
                          const std::function<void(const PeerError&)>& peerFailed);

  // At shutdown, once the engine's threads are gone: what is still in flight never completes.
  void abandon();

 private:
  struct Pending {
    transport::Transport::Request request;
    Operation op;
    WorkPtr work;
  };
  std::list<Pending> pending_;
};

}  // namespace ringcomm
