// Sends and receives of device buffers (DevicePath::message): unlike a collective, a send or a
// receive stays in flight after its turn on the engine (it completes as its peer takes part), so
// its host copy is its own, not the device's staging arena, and the copy back to the device waits
// until the transport has written the receive.
#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "common/trace.h"
#include "device/device_state.h"
#include "device/staging.h"

namespace ringcomm::device {
namespace {

// Through a pinned host copy: a send's bytes are copied out of the device before the transport
// takes them; a receive's are copied in once it has written them.
class StagedMessage final : public Message {
 public:
  StagedMessage(std::shared_ptr<const CudaTicket> ticket, void* buffer, size_t bytes, bool isSend)
      : ticket_(std::move(ticket)), buffer_(buffer), bytes_(bytes), isSend_(isSend) {
    DeviceState& s = ticket_->state();
    copy_ = s.takeMessageCopy(bytes_);
    copied_ = s.takeEvent();
  }

  // The copy goes back for the next message only once nothing can touch it any more: the
  // transport moved the bytes (a message dropped unfinished, as a failure or shutdown drops
  // them, may still be read or written by the network) and the device's copy of them has run.
  // Otherwise it is left allocated: freeing it could not wait without a deadline.
  ~StagedMessage() override {
    try {
      giveBack();
    } catch (...) {
      copy_.release();  // a CUDA error (the process exiting): left allocated, as above
    }
  }

  // A send's bytes into the host copy, before the transport reads them.
  void copyOut(const Operation& op) {
    DeviceState& s = ticket_->state();
    DeviceGuard guard(s.device);
    trace::Span staging(trace::Phase::Stage, "send device to host");
    startAfterCaller(*ticket_, s.copyOut);
    check(cudaMemcpyAsync(copy_->data(), buffer_, bytes_, cudaMemcpyDeviceToHost, s.copyOut),
          "cudaMemcpyAsync (device to host)");
    check(cudaEventRecord(copied_, s.copyOut), "cudaEventRecord");
    waitFor(copied_, op, "copying a send's device buffer to host memory");
  }

  void* data() const override { return copy_->data(); }
  bool onDevice() const override { return false; }

  void finish(const Operation& op) override {
    moved_ = true;
    if (isSend_) return;
    DeviceState& s = ticket_->state();
    DeviceGuard guard(s.device);
    trace::Span staging(trace::Phase::Stage, "receive host to device");
    startAfterCaller(*ticket_, s.copyIn);
    check(cudaMemcpyAsync(buffer_, copy_->data(), bytes_, cudaMemcpyHostToDevice, s.copyIn),
          "cudaMemcpyAsync (host to device)");
    check(cudaEventRecord(copied_, s.copyIn), "cudaEventRecord");
    device::finish(*ticket_, s.copyIn);
    // The host copy goes back for the next message once the device has read it.
    waitFor(copied_, op, "copying a receive to the device");
  }

 private:
  void giveBack() {
    DeviceState& s = ticket_->state();
    DeviceGuard guard(s.device);  // the runtime calls below on this device, not device 0's
    const bool copyDone = cudaEventQuery(copied_) == cudaSuccess;
    if (copyDone) s.giveEvent(copied_);
    if (moved_ && copyDone) {
      s.giveMessageCopy(std::move(copy_));
    } else {
      copy_.release();  // left allocated on purpose (see above)
    }
  }

  std::shared_ptr<const CudaTicket> ticket_;
  void* buffer_;
  size_t bytes_;
  bool isSend_;
  bool moved_ = false;  // the transport has moved the bytes
  std::unique_ptr<Pinned> copy_;
  cudaEvent_t copied_ = nullptr;  // this message's last copy (never recorded: complete)
};

// The device buffer itself, for a network that moves device memory (UCX 1.20 or newer with CUDA
// lanes, which make the buffer's context current themselves): it starts once the caller's stream
// has the buffer ready, and UCX completes a transfer only once its copies into or out of the
// buffer have ended, so nothing is left to order afterwards.
class DirectMessage final : public Message {
 public:
  DirectMessage(std::shared_ptr<const CudaTicket> ticket, const Operation& op, void* buffer)
      : ticket_(std::move(ticket)), buffer_(buffer) {
    trace::Span waiting(trace::Phase::Stage, "caller's stream");
    waitFor(ticket_->ready(), op, "the caller's stream, before the network takes the buffer");
    waitFor(ticket_->state().done, op, "the previous collective's device writes");
  }

  void* data() const override { return buffer_; }
  bool onDevice() const override { return true; }
  void finish(const Operation&) override {}

 private:
  std::shared_ptr<const CudaTicket> ticket_;
  void* buffer_;
};

}  // namespace

std::unique_ptr<Message> stageMessage(std::shared_ptr<const CudaTicket> ticket,
                                      const Operation& op, void* buffer, size_t bytes,
                                      bool isSend, bool linkTakesDevice) {
  if (linkTakesDevice) return std::make_unique<DirectMessage>(std::move(ticket), op, buffer);
  auto message = std::make_unique<StagedMessage>(std::move(ticket), buffer, bytes, isSend);
  // Constructed first: should the copy fail or time out, its destructor still accounts for it.
  if (isSend) message->copyOut(op);
  return message;
}

}  // namespace ringcomm::device
