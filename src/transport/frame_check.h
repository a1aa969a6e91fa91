// The receiver's check of each frame's header against what it expects: ranks that disagree about
// a collective (its kind, size, element type, reduction, root or schedule) are named, in the
// terms the user called, rather than left to corrupt each other's buffers.
#pragma once

#include "common/deadline.h"
#include "transport/frame.h"

namespace ringcomm::transport {

// Raises TransportError (a corrupt frame) or MismatchError naming `peer` where `incoming` is not
// the frame `expected`.
void checkFrame(int peer, const FrameHeader& incoming, const FrameHeader& expected,
                const Operation& op);
// Raises TransportError naming `peer` where `incoming` does not start like a frame.
void checkMagic(int peer, const FrameHeader& incoming, const Operation& op);

}  // namespace ringcomm::transport
