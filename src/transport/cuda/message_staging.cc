// Sends and receives of device buffers (DevicePath::message): unlike a collective, a send or a
// receive stays in flight after its turn on the engine (it completes as its peer takes part), so
// its host copy is its own, not the device's staging arena, and the copy back to the device waits
// until the transport has written the receive.
#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "common/trace.h"
#include "transport/cuda/device_state.h"
#include "transport/cuda/staging.h"

namespace ringcomm::device {
namespace {

// Through a pinned host copy: a send's bytes are copied out of the device before the transport
// takes them; a receive's are copied in once it has written them.
class StagedMessage final : public Message {
 public:
  StagedMessage(std::shared_ptr<const CudaTicket> ticket, const Operation& op, void* buffer,
                size_t bytes, bool isSend)
      : ticket_(std::move(ticket)), buffer_(buffer), bytes_(bytes), isSend_(isSend) {
    DeviceState& s = ticket_->state();
    DeviceGuard guard(s.device);
    copy_ = s.takeMessageCopy(bytes_);
    copied_ = s.takeEvent();
    if (!isSend_) return;
    trace::Span staging(trace::Phase::Stage, "send device to host");
    startAfterCaller(*ticket_, s.copyOut);
    check(cudaMemcpyAsync(copy_->data(), buffer_, bytes_, cudaMemcpyDeviceToHost, s.copyOut),
          "cudaMemcpyAsync (device to host)");
    check(cudaEventRecord(copied_, s.copyOut), "cudaEventRecord");
    waitFor(copied_, op, "copying a send's device buffer to host memory");
  }

  ~StagedMessage() override {
    DeviceState& s = ticket_->state();
    // A receive that never finished may still be copying in only if finish() timed out: its
    // copy is then not reused (freed with this message once the copy is done).
    if (copied_ != nullptr && cudaEventSynchronize(copied_) == cudaSuccess && copy_) {
      s.giveMessageCopy(std::move(copy_));
    }
    if (copied_ != nullptr) s.giveEvent(copied_);
  }

  void* data() const override { return copy_->data(); }
  bool onDevice() const override { return false; }

  void finish(const Operation& op) override {
    if (isSend_) return;
    DeviceState& s = ticket_->state();
    DeviceGuard guard(s.device);
    trace::Span staging(trace::Phase::Stage, "receive host to device");
    startAfterCaller(*ticket_, s.copyIn);
    check(cudaMemcpyAsync(buffer_, copy_->data(), bytes_, cudaMemcpyHostToDevice, s.copyIn),
          "cudaMemcpyAsync (host to device)");
    check(cudaEventRecord(copied_, s.copyIn), "cudaEventRecord");
    device::finish(*ticket_, s.copyIn);
    // The copy is given back for the next message once it has been read.
    waitFor(copied_, op, "copying a receive to the device");
  }

 private:
  std::shared_ptr<const CudaTicket> ticket_;
  void* buffer_;
  size_t bytes_;
  bool isSend_;
  std::unique_ptr<Pinned> copy_;
  cudaEvent_t copied_ = nullptr;
};

// The device buffer itself, for a network that moves device memory (UCX built with CUDA): it
// starts once the caller's stream has the buffer ready, and UCX completes the transfer only once
// its copies into or out of the buffer have ended, so nothing is left to order afterwards.
class DirectMessage final : public Message {
 public:
  DirectMessage(std::shared_ptr<const CudaTicket> ticket, const Operation& op, void* buffer)
      : ticket_(std::move(ticket)), buffer_(buffer) {
    trace::Span waiting(trace::Phase::Stage, "caller's stream");
    waitFor(ticket_->ready(), op, "the caller's stream, before the network takes the buffer");
    waitFor(ticket_->state().done, op, "the previous collective's device writes");
    // UCX's CUDA lanes work in the current device's context, on the thread that drives them:
    // the engine's, which runs no user code, so the device stays set there.
    check(cudaSetDevice(ticket_->state().device), "cudaSetDevice");
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
  return std::make_unique<StagedMessage>(std::move(ticket), op, buffer, bytes, isSend);
}

}  // namespace ringcomm::device
