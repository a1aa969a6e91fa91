// The communicator's collectives (communicator_impl.h): each validates its options, is labelled
// (what the trace and the errors name) and numbered (its wire tag and signature, so that ranks
// whose calls disagree get a MismatchError), and is queued on the engine; device buffers go
// through DeviceCollectives, sends and receives through PointToPoint.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/adasum.h"
#include "algorithms/collectives.h"
#include "common/log.h"
#include "common/trace.h"
#include "core/communicator_impl.h"
#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

OperationLabel labelOf(const char* collective, size_t count, DataType type, bool perRank = false,
                       int root = -1) {
  OperationLabel label;
  label.collective = collective;
  label.count = count;
  label.type = toString(type);
  label.bytes = count * elementSize(type);  // for the trace (describe() names it for send/recv)
  label.perRank = perRank;
  label.root = root;
  return label;
}

// Where a send's or receive's bytes are, as the transport takes them: its message's device
// buffer, or host memory (a staged copy, or the caller's own).
transport::Memory memoryOf(const device::Message* message) {
  return message != nullptr && message->onDevice() ? transport::Memory::Cuda
                                                   : transport::Memory::Host;
}

}  // namespace

WorkPtr CommunicatorImpl::allreduce(const AllreduceOptions& o) {
  o.validate();
  if (o.op == ReduceOp::Adasum) return adasumAllreduce(o);
  const auto [algorithm, why] = schedules_->chooseAllreduce(o);
  if (log::enabled(LogLevel::Info, kLogAlgo)) schedules_->logAllreduceChoice(o, algorithm, why);
  OperationLabel label = labelOf("allreduce", o.count, o.type);
  label.algorithm = toString(algorithm);
  label.reduceOp = toString(o.op);
  if (o.compression != Compression::None) label.compression = toString(o.compression);
  if (device::TicketPtr ticket = device_->prepare(o, {o.input, o.output}, "allreduce")) {
    return allreduceOnDevice(o, algorithm, label, std::move(ticket));
  }
  return enqueue(CollectiveKind::Allreduce, o, label, signatureOf(&o.type, &o.op, -1),
                 [this, o, algorithm](const algorithms::Context& ctx) {
                   schedules_->allreduce(ctx, o, algorithm);
                 },
                 variantOf(algorithm, o.compression));
}

// The collectives below take host or device buffers alike: DeviceCollectives::staged runs
// their host schedule on staged copies of device buffers.
WorkPtr CommunicatorImpl::reduceScatter(const ReduceScatterOptions& o) {
  o.validate();
  OperationLabel label = labelOf("reduce_scatter", o.count, o.type, true);
  label.reduceOp = toString(o.op);
  const size_t bytes = o.count * elementSize(o.type);
  return enqueue(CollectiveKind::ReduceScatter, o, label, signatureOf(&o.type, &o.op, -1),
                 device_->staged(o, "reduce_scatter", {bytes * size_}, {bytes},
                                 [this](const algorithms::Context& ctx, const auto& part) {
                                   schedules_->reduceScatter(ctx, part);
                                 }));
}

WorkPtr CommunicatorImpl::allgather(const AllgatherOptions& o) {
  o.validate();
  const size_t bytes = o.count * elementSize(o.type);
  return enqueue(CollectiveKind::Allgather, o, labelOf("allgather", o.count, o.type, true),
                 signatureOf(&o.type, nullptr, -1),
                 device_->staged(o, "allgather", {bytes}, {bytes * size_},
                                 [this](const algorithms::Context& ctx, const auto& part) {
                                   schedules_->allgather(ctx, part);
                                 }));
}

WorkPtr CommunicatorImpl::broadcast(const BroadcastOptions& o) {
  o.validate(size_);
  device::TicketPtr ticket = device_->prepare(o, {o.buffer}, "broadcast");
  if (!ticket || o.count == 0) {
    return enqueue(CollectiveKind::Broadcast, o,
                   labelOf("broadcast", o.count, o.type, false, o.root),
                   signatureOf(&o.type, nullptr, o.root),
                   [this, o](const algorithms::Context& ctx) {
                     schedules_->broadcast(ctx, o);
                   });
  }
  return enqueue(CollectiveKind::Broadcast, o,
                 labelOf("broadcast", o.count, o.type, false, o.root),
                 signatureOf(&o.type, nullptr, o.root),
                 [this, o, ticket](const algorithms::Context& ctx) {
                   device_->broadcast(*ticket, ctx, o);
                 },
                 withMemoryPath(0, MemoryPath::DeviceChunked));
}

WorkPtr CommunicatorImpl::reduce(const ReduceOptions& o) {
  o.validate(size_);
  if (rank_ == o.root && o.output == nullptr && o.count > 0) {
    throw InvalidArgument("reduce: output is null on the root");
  }
  OperationLabel label = labelOf("reduce", o.count, o.type, false, o.root);
  label.reduceOp = toString(o.op);
  const size_t bytes = o.count * elementSize(o.type);
  return enqueue(CollectiveKind::Reduce, o, label, signatureOf(&o.type, &o.op, o.root),
                 device_->staged(o, "reduce", {bytes}, {bytes, rank_ == o.root},
                                 [this](const algorithms::Context& ctx, const auto& part) {
                                   schedules_->reduce(ctx, part);
                                 }));
}

WorkPtr CommunicatorImpl::alltoall(const AlltoallOptions& o) {
  o.validate();
  const size_t bytes = o.count * elementSize(o.type) * size_;
  return enqueue(CollectiveKind::Alltoall, o, labelOf("alltoall", o.count, o.type, true),
                 signatureOf(&o.type, nullptr, -1),
                 device_->staged(o, "alltoall", {bytes}, {bytes},
                                 [this](const algorithms::Context& ctx, const auto& part) {
                                   schedules_->alltoall(ctx, part);
                                 }));
}

WorkPtr CommunicatorImpl::alltoallv(const AlltoallvOptions& o) {
  o.validate(size_, rank_);
  size_t total = 0;
  for (size_t count : o.sendCounts) total += count;
  // The extent of each buffer the counts and offsets reach.
  size_t sent = 0;
  size_t received = 0;
  for (size_t j = 0; j < o.sendCounts.size(); ++j) {
    if (o.sendCounts[j] > 0) sent = std::max(sent, o.sendOffsets[j] + o.sendCounts[j]);
  }
  for (size_t j = 0; j < o.recvCounts.size(); ++j) {
    if (o.recvCounts[j] > 0) received = std::max(received, o.recvOffsets[j] + o.recvCounts[j]);
  }
  const size_t unit = elementSize(o.type);
  return enqueue(CollectiveKind::Alltoall, o, labelOf("alltoallv", total, o.type),
                 signatureOf(&o.type, nullptr, -1),
                 device_->staged(o, "alltoallv", {sent * unit}, {received * unit},
                                 algorithms::alltoallv));
}

WorkPtr CommunicatorImpl::gather(const GatherOptions& o) {
  o.validate(size_, rank_);
  const size_t bytes = o.count * elementSize(o.type);
  return enqueue(CollectiveKind::Gather, o, labelOf("gather", o.count, o.type, true, o.root),
                 signatureOf(&o.type, nullptr, o.root),
                 device_->staged(o, "gather", {bytes}, {bytes * size_, rank_ == o.root},
                                 algorithms::gather));
}

WorkPtr CommunicatorImpl::scatter(const ScatterOptions& o) {
  o.validate(size_, rank_);
  const size_t bytes = o.count * elementSize(o.type);
  return enqueue(CollectiveKind::Scatter, o, labelOf("scatter", o.count, o.type, true, o.root),
                 signatureOf(&o.type, nullptr, o.root),
                 device_->staged(o, "scatter", {bytes * size_, rank_ == o.root}, {bytes},
                                 algorithms::scatter));
}

WorkPtr CommunicatorImpl::barrier(const BarrierOptions& o) {
  OperationLabel label;
  label.collective = "barrier";
  return enqueue(CollectiveKind::Barrier, o, label, 0,
                 [this](const algorithms::Context& ctx) { barrier(ctx); });
}

WorkPtr CommunicatorImpl::send(const SendOptions& o) {
  o.validate(size_, rank_);
  const device::TicketPtr ticket = device_->prepare(o, {o.buffer}, "send");
  return enqueuePointToPoint(
      o, PointToPoint::labelOf("send", o.peer, o.tag, o.bytes),
      [this, o, ticket](const algorithms::Context& ctx) {
        PointToPoint::Posted posted;
        posted.message = device_->message(ticket, ctx, o.peer, const_cast<void*>(o.buffer),
                                          o.bytes, true);
        posted.request =
            ctx.transport.postSend(o.peer, posted.message ? posted.message->data() : o.buffer,
                                   o.bytes, PointToPoint::tagOf(o.tag, o.type),
                                   memoryOf(posted.message.get()));
        return posted;
      });
}

WorkPtr CommunicatorImpl::recv(const RecvOptions& o) {
  o.validate(size_, rank_);
  const device::TicketPtr ticket = device_->prepare(o, {o.buffer}, "recv");
  return enqueuePointToPoint(
      o, PointToPoint::labelOf("recv", o.peer, o.tag, o.bytes),
      [this, o, ticket](const algorithms::Context& ctx) {
        const MessageTag tag = PointToPoint::tagOf(o.tag, o.type);
        // A receive from any rank waits here, in its turn, for a sender to show itself.
        const int peer =
            o.peer == kAnySource ? ctx.transport.waitForAnySender(tag, ctx.op) : o.peer;
        if (o.source != nullptr) *o.source = peer;
        PointToPoint::Posted posted;
        posted.message = device_->message(ticket, ctx, peer, o.buffer, o.bytes, false);
        posted.request =
            ctx.transport.postRecv(peer, posted.message ? posted.message->data() : o.buffer,
                                   o.bytes, tag, memoryOf(posted.message.get()));
        return posted;
      });
}

// Adasum has a schedule of its own (src/algorithms/adasum.h), on host memory: device buffers
// are staged whole (allreducePath), since its coefficients come from the whole vector.
WorkPtr CommunicatorImpl::adasumAllreduce(const AllreduceOptions& o) {
  if (!plan::isPowerOfTwo(size_)) {
    throw InvalidArgument("allreduce: op adasum needs a power-of-two number of ranks; this "
                          "communicator has " + std::to_string(size_));
  }
  OperationLabel label = labelOf("allreduce", o.count, o.type);
  label.algorithm = "adasum";
  label.reduceOp = toString(o.op);
  if (device::TicketPtr ticket = device_->prepare(o, {o.input, o.output}, "allreduce")) {
    return allreduceOnDevice(o, Algorithm::Auto, label, std::move(ticket));
  }
  return enqueue(CollectiveKind::Allreduce, o, label, signatureOf(&o.type, &o.op, -1),
                 [this, o](const algorithms::Context& ctx) {
                   schedules_->allreduce(ctx, o, Algorithm::Auto);
                 },
                 variantOf(Algorithm::Auto, o.compression));
}

void CommunicatorImpl::describe(trace::Event& event, const OperationLabel& label) {
  event.id = label.sequence;
  event.label = label.name;
  event.bytes = label.bytes;
  if (label.algorithm != nullptr) {
    event.args = std::string("\"algorithm\": \"") + label.algorithm + "\"";
  }
  if (label.compression != nullptr) {
    event.args += std::string(event.args.empty() ? "" : ", ") + "\"compression\": \"" +
                  label.compression + "\"";
  }
}

// The all-reduce of device buffers, on the path every rank picks alike (DeviceCollectives).
WorkPtr CommunicatorImpl::allreduceOnDevice(const AllreduceOptions& o, Algorithm algorithm,
                                            const OperationLabel& label, device::TicketPtr ticket) {
  const MemoryPath path = device_->allreducePath(o, *ticket);
  return enqueue(
      CollectiveKind::Allreduce, o, label, signatureOf(&o.type, &o.op, -1),
      [this, o, algorithm, path, ticket](const algorithms::Context& ctx) {
        device_->allreduce(
            ticket, ctx, o, path,
            [&](const AllreduceOptions& host) { schedules_->allreduce(ctx, host, algorithm); },
            [&] { barrier(ctx); });
      },
      withMemoryPath(variantOf(algorithm, o.compression), path));
}

// Numbered in queue order (its wire tag and signature), then queued on the engine as one task:
// the collective's own frame (its span, its Operation, the peer checks) around its schedule.
template <typename Options, typename Body>
WorkPtr CommunicatorImpl::enqueue(CollectiveKind kind, const Options& options, OperationLabel label,
                                  uint32_t signature, Body body, uint32_t variant) {
  std::lock_guard<std::mutex> lock(submitMutex_);
  label.name = options.name;
  throwIfClosed(label);
  const uint64_t sequence = sequence_++;
  label.sequence = static_cast<int64_t>(sequence);
  const MessageTag tag{collectiveTag(sequence, kind), signature, variant};
  const std::chrono::milliseconds timeout =
      options.timeout.count() > 0 ? options.timeout : config_.timeout;
  auto task = [this, label = std::move(label), tag, timeout, body = std::move(body)]() {
    throwIfClosed(label);
    trace::Span span(trace::Phase::Collective, label.collective);
    if (span.active()) describe(span.event(), label);
    Operation op(label, rank_, timeout, config_.stallWarning);
    bool published = false;
    op.checkPeer = [this, &op, &published](int peer) {
      checkPeerRunsTheSame(op, published, peer);
    };
    algorithms::Context ctx{rank_, size_, *transport_, op, tag, config_.segmentBytes, scratch_};
    try {
      if (movesNothing(label)) {
        schedules_->barrier(ctx);
      } else {
        body(ctx);
      }
    } catch (const PeerError& error) {
      failWith(error);
    } catch (const CommunicatorClosed&) {
      throw;
    } catch (const std::exception& error) {
      poison(error.what());
      throw;
    }
  };
  return engine_->submit(std::move(task), options.runInCaller);
}

// Sends and receives are posted in their turn and complete later, as their bytes move (during
// later collectives' waits, or polled by the engine between them): a receive posted before the
// matching send, or two ranks sending each other more than a buffer holds, must not deadlock.
template <typename Options, typename Post>
WorkPtr CommunicatorImpl::enqueuePointToPoint(const Options& options, OperationLabel label,
                                              Post post) {
  std::lock_guard<std::mutex> lock(submitMutex_);
  label.name = options.name;
  throwIfClosed(label);
  const std::chrono::milliseconds timeout =
      options.timeout.count() > 0 ? options.timeout : config_.timeout;
  return engine_->submitDeferred([this, label, timeout, post](const WorkPtr& work) {
    throwIfClosed(label);
    Operation op(label, rank_, timeout, config_.stallWarning);
    algorithms::Context ctx{rank_, size_, *transport_, op, MessageTag{}, config_.segmentBytes,
                            scratch_};
    try {
      PointToPoint::Posted posted = post(ctx);
      pointToPoint_.add(std::move(posted), std::move(op), work);
    } catch (const PeerError& error) {
      failWith(error);
    }
  });
}


// A collective whose schedule would exchange no message here: no elements, where every rank
// must give as many. It meets the others anyway, in a barrier under its own tag, so that a
// rank that gave elements where this one gave none (or the reverse) gets this one's empty
// frames or its record (checkPeerRunsTheSame) and both raise a MismatchError naming both
// calls, instead of this rank returning and the other waiting out its timeout. Every rank
// with none: a barrier, no more. A broadcast already meets with empty messages; an alltoallv's
// counts are each rank's own.
bool CommunicatorImpl::movesNothing(const OperationLabel& label) {
  if (label.type == nullptr || label.count != 0) return false;
  const std::string collective = label.collective;
  return collective != "broadcast" && collective != "alltoallv";
}

}  // namespace ringcomm
