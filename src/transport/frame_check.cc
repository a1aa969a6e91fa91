#include "transport/frame_check.h"

#include <string>

#include "common/failure.h"
#include "common/tags.h"
#include "ringcomm/errors.h"

namespace ringcomm::transport {
namespace {

std::string describeFrame(const FrameHeader& frame) {
  if (frame.variant & kAcknowledgementBit) return "the acknowledgement of " + describeTag(frame.tag);
  return describeTag(frame.tag) + " with " + std::to_string(frame.bytes) + " bytes";
}

// Why a frame from `peer` is not the one this rank waits for, in the terms the user called.
std::string describeMismatch(int peer, const FrameHeader& incoming, const FrameHeader& expected) {
  const std::string who = "rank " + std::to_string(peer);
  const bool theyAcknowledge = (incoming.variant & kAcknowledgementBit) != 0;
  const bool weAwaitAcknowledgement = (expected.variant & kAcknowledgementBit) != 0;
  if (incoming.tag == expected.tag && theyAcknowledge != weAwaitAcknowledgement &&
      incoming.signature != expected.signature) {
    // Both ranks sent where one should have received: they disagree on who is the root.
    return who + " called " + describeTag(incoming.tag) + " with " +
           describeSignature(incoming.signature, incoming.variant & ~kAcknowledgementBit) +
           ", but this rank with " +
           describeSignature(expected.signature, expected.variant & ~kAcknowledgementBit) +
           (weAwaitAcknowledgement ? " and waited for its acknowledgement"
                                   : " and waited for its data") +
           " (ranks must agree on the root)";
  }
  if (incoming.tag != expected.tag || incoming.bytes != expected.bytes) {
    return who + " sent " + describeFrame(incoming) + ", but this rank expected " +
           describeFrame(expected) +
           " (ranks called different collectives, or with different sizes)";
  }
  return who + " called " + describeTag(incoming.tag) + " with " +
         describeSignature(incoming.signature, incoming.variant) + ", but this rank with " +
         describeSignature(expected.signature, expected.variant) +
         " (ranks must agree on the element type, reduction, root and schedule)";
}

}  // namespace

void checkMagic(int peer, const FrameHeader& incoming, const Operation& op) {
  if (incoming.magic != kFrameMagic) {
    raisePeerFailure<TransportError>(op, peer, "corrupt frame from rank " + std::to_string(peer));
  }
}

void checkFrame(int peer, const FrameHeader& incoming, const FrameHeader& expected,
                const Operation& op) {
  checkMagic(peer, incoming, op);
  const bool sameCall = incoming.tag == expected.tag && incoming.signature == expected.signature &&
                        incoming.variant == expected.variant;
  if (!sameCall || incoming.bytes != expected.bytes) {
    raisePeerFailure<MismatchError>(op, peer, describeMismatch(peer, incoming, expected));
  }
}

}  // namespace ringcomm::transport
