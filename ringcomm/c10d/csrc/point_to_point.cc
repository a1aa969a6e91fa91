// Point-to-point: send, and recv from one rank or from any (recvAnysource), on the core's
// send and recv.
#include <chrono>
#include <vector>

#include "backend.h"
#include "operation_start.h"
#include "ringcomm/communicator.h"
#include "ringcomm/options.h"
#include "tensors.h"
#include "work.h"

namespace ringcomm::c10d_backend {

WorkHandle RingcommBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  requireCount(tensors, 1, "send", "tensors");
  requireDense(tensors, "send", "tensor");
  at::Tensor buffer = Staging::in(tensors[0]);
  return start(rank_, count_, OpType::SEND, {"send", "ringcomm:send"}, tensors, {}, {buffer},
               [&](RingcommWork&) {
                 // torch's send has no timeout of its own; a CUDA tensor's stream comes along.
                 auto o = common<ringcomm::SendOptions>(std::chrono::milliseconds(0), true);
                 o.buffer = buffer.data_ptr();
                 o.bytes = buffer.nbytes();
                 o.peer = dstRank;
                 o.tag = tag;
                 o.type = movable(buffer).type;  // a receive of another dtype is named
                 return std::vector<ringcomm::WorkPtr>{communicator_->send(o)};
               });
}

WorkHandle RingcommBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return receive(tensors, srcRank, tag, OpType::RECV, {"recv", "ringcomm:recv"});
}

WorkHandle RingcommBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  // Its own op type and profiler title, as gloo has: torch's tests count these events apart.
  return receive(tensors, ringcomm::kAnySource, tag, OpType::RECVANYSOURCE,
                 {"recv", "ringcomm:recvAnySource"});
}

WorkHandle RingcommBackend::receive(std::vector<at::Tensor>& tensors, int srcRank, int tag,
                                    OpType type, OpName op) {
  requireCount(tensors, 1, op.name, "tensors");
  requireDense(tensors, op.name, "tensor");
  return startInPlace(tensors, type, op, [&](RingcommWork& work, const at::Tensor& buffer) {
    auto o = common<ringcomm::RecvOptions>(std::chrono::milliseconds(0), true);
    o.buffer = buffer.data_ptr();
    o.bytes = buffer.nbytes();
    o.peer = srcRank;
    o.tag = tag;
    o.type = movable(buffer).type;
    o.source = work.sourceSlot();
    return communicator_->recv(o);
  });
}

}  // namespace ringcomm::c10d_backend
