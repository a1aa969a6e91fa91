// How the backend's operations start: a torch Work around the core's, and what every core call
// shares (common()). Included by the files that define the operations (reductions.cc,
// data_movement.cc, point_to_point.cc).
#pragma once

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "backend.h"
#include "ringcomm/work.h"
#include "tensors.h"
#include "work.h"

namespace ringcomm::c10d_backend {

using ::c10d::OpType;
using WorkHandle = c10::intrusive_ptr<::c10d::Work>;

// The stream of the operation being started on this thread (CUDA tensors), for common().
inline thread_local std::optional<c10::Stream> startingOnStream;

// Starts `launch` (which submits core work), and returns a torch Work completing when it does.
// Errors raised while submitting (bad arguments, a closed communicator) surface at once, as torch
// users expect from a call with wrong arguments. `inputs` are what a profiler records of the call.
//
// CUDA tensors: the core runs the operation after the work queued on torch's current stream and
// makes that stream wait for it; the copies back into the caller's tensors (`finish`) and the
// completion of the Future (whose CUDA events torch records on the current stream) run with the
// same stream current, so everything downstream is ordered after the collective.
template <typename Launch>
WorkHandle start(int rank, OperationCount& count, OpType type, OpName op,
                 const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                 std::vector<at::Tensor> keepAlive, Launch launch,
                 std::function<void()> finish = {}) {
  const DeviceContext device = deviceContextOf(inputs, outputs, op.name);
  count.sequence.fetch_add(1);
  auto work = c10::make_intrusive<RingcommWork>(rank, type, op, inputs, std::move(outputs),
                                                std::move(keepAlive), device);
  work->reportFailuresTo(count.failures);
  if (device.stream && finish) {
    finish = [stream = *device.stream, finish = std::move(finish)] {
      c10::StreamGuard guard(stream);
      finish();
    };
  }
  std::vector<ringcomm::WorkPtr> parts;
  startingOnStream = device.stream;
  try {
    parts = launch(*work);
  } catch (...) {
    startingOnStream.reset();
    std::rethrow_exception(toTorchError(std::current_exception(), op.name));
  }
  startingOnStream.reset();
  RingcommWork::completeWhen(work, parts, std::move(finish));
  return work;
}

template <typename CoreOptions>
CoreOptions RingcommBackend::common(std::chrono::milliseconds timeout, bool asyncOp) const {
  CoreOptions options;
  if (timeout.count() > 0) {
    options.timeout = timeout;
  } else if (const int64_t set = defaultTimeout_.load(); set > 0) {
    options.timeout = std::chrono::milliseconds(set);
  }
  // A blocking call is waited on at once: let it run on the caller's thread when the engine is
  // idle, which saves two thread hand-offs on small messages.
  options.runInCaller = !asyncOp;
  if (startingOnStream) {
    options.deviceMemory = true;
    options.stream = startingOnStream->native_handle();
  }
  return options;
}

template <typename CoreOptions, typename TorchOptions>
CoreOptions RingcommBackend::rooted(const TorchOptions& opts, const void* input, void* output,
                                    const Buffer& counted) const {
  auto o = common<CoreOptions>(opts.timeout, opts.asyncOp);
  setArrays(o, input, output, counted);
  o.root = static_cast<int>(opts.rootRank);
  return o;
}

template <typename StartBuffer>
WorkHandle RingcommBackend::startInPlace(std::vector<at::Tensor>& tensors, OpType type, OpName op,
                                         StartBuffer startBuffer) {
  auto staging = std::make_shared<Staging>();
  at::Tensor buffer = staging->inOut(tensors[0]);
  return start(
      rank_, count_, type, op, tensors, tensors, {buffer},
      [&](RingcommWork& work) {
        return std::vector<ringcomm::WorkPtr>{startBuffer(work, buffer)};
      },
      [staging] { staging->copyBack(); });
}

template <typename StartPair>
WorkHandle RingcommBackend::startWholePair(at::Tensor& output, at::Tensor& input, Whole whole,
                                           OpType type, OpName op, StartPair startPair) {
  requireDensePair(output, input, op.name);
  if (whole == Whole::Output) {
    requireWorldSizeTimes(output, "output", input, "input", size_, op.name);
  } else {
    requireWorldSizeTimes(input, "input", output, "output", size_, op.name);
  }
  at::Tensor in = Staging::in(input);
  auto staging = std::make_shared<Staging>();
  at::Tensor out = staging->inOut(output);
  return start(
      rank_, count_, type, op, {input}, {output}, {in, out},
      [&](RingcommWork&) { return std::vector<ringcomm::WorkPtr>{startPair(in, out)}; },
      [staging] { staging->copyBack(); });
}

template <typename StartPair>
WorkHandle RingcommBackend::startCoalescedPairs(std::vector<at::Tensor>& outputs,
                                                std::vector<at::Tensor>& inputs, Whole whole,
                                                OpName op, StartPair startPair) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ringcomm ", op.name, ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  StagedPairs staged;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireCoalescedPair(inputs[i], outputs[i], whole, i, size_, op.name);
    staged.add(inputs[i], outputs[i]);
  }
  return start(
      rank_, count_, OpType::COALESCED, op, inputs, outputs, staged.keep,
      [&](RingcommWork&) {
        std::vector<ringcomm::WorkPtr> parts;
        for (size_t i = 0; i < staged.pairs.size(); ++i) {
          const auto& [in, out] = staged.pairs[i];
          parts.push_back(startPair(i, in, out));
        }
        return parts;
      },
      [staging = staged.staging] { staging->copyBack(); });
}

inline std::vector<size_t> prefixSums(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

inline void requireSameDtype(const std::vector<at::Tensor>& tensors, const char* operation) {
  for (const auto& tensor : tensors) {
    TORCH_CHECK_TYPE(tensor.scalar_type() == tensors.front().scalar_type(), "ringcomm ", operation,
                     ": every tensor must have the same dtype; got ", tensors.front().scalar_type(),
                     " and ", tensor.scalar_type());
  }
}

}  // namespace ringcomm::c10d_backend
