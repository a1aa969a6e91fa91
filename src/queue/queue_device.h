// The tensor queue's side of CUDA tensors (include/ringcomm/tensor_queue.h), behind an interface
// that includes no CUDA header.
//
// Horovod's order of things on a GPU: a tensor is submitted once the caller's stream has queued
// the work that produces it (a gradient's backward kernels), and the caller's thread must not wait
// for that work. So at submission only an event is recorded on the caller's stream (markReady).
// The queue's thread later runs each ready run of tensors on a stream of its own per device:
// that stream waits for the tensors' events, copies them into a fusion buffer in device memory,
// carries the collective (the communicator's device path orders itself on it), copies the results
// out, and records where all that ends (endRun). A caller that synchronizes makes its own stream
// wait for that point: results are ordered on the caller's stream, as NCCL's are, not waited for
// by the host.
//
// Built without CUDA (RINGCOMM_BUILD_CUDA=OFF), markReady() raises InvalidArgument saying how to
// get a CUDA build, so nothing else here is reached.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ringcomm::queue {

// Where the caller's stream has a request's tensors ready, recorded at submission.
class ReadyMark {
 public:
  virtual ~ReadyMark() = default;
  virtual int device() const = 0;  // the CUDA device the tensors are on
};

// Makes `stream` (a cudaStream_t) wait for everything a run wrote.
using OrderAfter = std::function<void(void* stream)>;

class QueueDevice {
 public:
  virtual ~QueueDevice() = default;

  // On the caller's thread: the device of `addresses` (null ones are skipped), and an event on
  // `stream` (the caller's cudaStream_t) after its work so far. Throws InvalidArgument when they
  // are not device memory of one device, when `stream` is the per-thread default stream, or
  // when built without CUDA. `what` names the request in messages.
  virtual std::shared_ptr<const ReadyMark> markReady(std::initializer_list<const void*> addresses,
                                                     void* stream, const std::string& what) = 0;

  // On the queue's thread. Starts a run on `device`: its stream waits for every mark. Returns
  // that stream (a cudaStream_t), for the run's collectives.
  virtual void* beginRun(int device, const std::vector<const ReadyMark*>& marks) = 0;
  // Device memory for fusion on `device`, at least `bytes`; the same buffer run after run (the
  // run's stream orders its uses).
  virtual void* fusionBuffer(int device, size_t bytes) = 0;
  // Queued on the run's stream: device to device, and from host memory (which may be reused as
  // soon as the call returns).
  virtual void copy(int device, void* to, const void* from, size_t bytes) = 0;
  virtual void upload(int device, void* to, const void* from, size_t bytes) = 0;
  // Device to host memory, after everything queued on the run's stream so far; returns once the
  // bytes are there (the queue's thread waits for the GPU).
  virtual void download(int device, void* to, const void* from, size_t bytes) = 0;
  // Ends the run: what orders a caller's stream after everything it wrote so far.
  virtual OrderAfter endRun(int device) = 0;
};

std::unique_ptr<QueueDevice> createQueueDevice();

}  // namespace ringcomm::queue
