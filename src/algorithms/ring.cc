// Ring reduce-scatter and all-gather, chunked and pipelined.
//
// The vector is cut into one block per rank. In reduce-scatter each of the size-1 steps moves one
// block one hop to the right, and the receiver folds its own contribution into it; after the last
// step rank r holds block r reduced over everyone. All-gather then moves the finished blocks
// around the ring the same way, copying instead of reducing.
//
// Blocks travel as trains of segments (Context::segmentBytes): as soon as segment j of a block
// has arrived and been reduced, it is posted onward, so the transfer of step s+1 overlaps the
// reduction of step s instead of waiting for the whole block. Receives for step s+1 are posted
// before step s is processed, into the other of two scratch buffers, so the transport can take
// them off the wire while this rank reduces.
//
// Compression changes only what a segment looks like on the wire (the Wire helper below): it is
// encoded (16-bit floats, or 8 bits with a scale per block) when posted and decoded (into a
// float32 accumulation, or a copy) when it arrives. The schedule itself is the same. Each segment
// is encoded on its own, and its owner keeps in the all-gather exactly the bytes it sends, so every
// rank decodes the same bytes.
#include "algorithms/ring.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "common/bytes.h"
#include "common/trace.h"
#include "reduce/reduce.h"

namespace ringcomm::algorithms {
namespace {

using plan::Block;
using transport::Transport;

struct Posted {
  Block segment;
  Transport::Request request;
};

// Who the ring neighbours are and how big a segment is.
struct Ring {
  int size;
  int right;
  int left;
  size_t element;       // bytes per element of the working buffer
  size_t wireStride;    // bytes set aside per element for its wire form (codec::wireStride)
  size_t segmentCount;  // elements per segment
  Compression compression;

  Ring(const Context& ctx, DataType type, Compression c)
      : size(ctx.size), right((ctx.rank + 1) % ctx.size), left((ctx.rank + ctx.size - 1) % ctx.size),
        element(elementSize(type)),
        wireStride(c == Compression::None ? element : codec::wireStride(c)),
        segmentCount(std::max<size_t>(1, ctx.segmentBytes / element)), compression(c) {}

  bool compressed() const { return compression != Compression::None; }
  // What `count` elements take on the wire.
  size_t wireBytes(size_t count) const {
    return compressed() ? codec::wireBytes(count, compression) : count * element;
  }
};

// The bytes that travel for a segment of the working buffer `base`.
class Wire {
 public:
  Wire(const Context& ctx, const Ring& ring, uint8_t* base, size_t totalCount)
      : ctx_(ctx), ring_(ring), base_(base),
        wire_(ring.compressed() ? ctx.scratch.get(ScratchBuffer::Wire, totalCount * ring.wireStride)
                                : nullptr) {}

  // Encodes (if compressing) and posts the send of a segment.
  void send(const Block& segment) {
    uint8_t* data = base_ + segment.offset * ring_.element;
    if (ring_.compressed()) {
      trace::Span span(trace::Phase::Codec, "encode");
      uint8_t* encoded = wireAt(segment.offset);
      codec::encode(reinterpret_cast<const float*>(data), encoded, segment.count, ring_.compression);
      data = encoded;
    }
    ctx_.send(ring_.right, data, ring_.wireBytes(segment.count));
  }

  // Posts the send of a segment already in wire form (all-gather forwards what it received).
  Transport::Request forward(const Block& segment) {
    uint8_t* data = ring_.compressed() ? wireAt(segment.offset)
                                       : base_ + segment.offset * ring_.element;
    return ctx_.send(ring_.right, data, ring_.wireBytes(segment.count));
  }

  // Where a segment of the working buffer arrives in wire form.
  uint8_t* arrivalFor(const Block& segment) {
    return ring_.compressed() ? wireAt(segment.offset) : base_ + segment.offset * ring_.element;
  }

  // Makes an arrived wire segment the working buffer's value (all-gather).
  void land(const Block& segment) {
    if (!ring_.compressed()) return;
    trace::Span span(trace::Phase::Codec, "decode");
    codec::decode(wireAt(segment.offset), reinterpret_cast<float*>(base_ + segment.offset * ring_.element),
                  segment.count, ring_.compression);
  }

  // Folds a received wire segment into the working buffer (reduce-scatter).
  void reduceInto(const Block& segment, const uint8_t* received, DataType type, ReduceOp op) {
    uint8_t* mine = base_ + segment.offset * ring_.element;
    if (ring_.compressed()) {
      trace::Span span(trace::Phase::Codec, "decode and accumulate");
      codec::decodeAccumulate(received, reinterpret_cast<float*>(mine), segment.count,
                              ring_.compression);
    } else {
      trace::Span span(trace::Phase::Reduce);
      reduce::reduceInto(mine, received, segment.count, type, op);
    }
  }

  // Rounds a block to what the wire carries, segment by segment as forward() sends it, so that
  // its owner keeps the value everyone receives: forward() then sends these very bytes.
  void roundToWire(const Block& block) {
    if (!ring_.compressed()) return;
    trace::Span span(trace::Phase::Codec, "round to the wire format");
    for (const Block& segment : plan::segmentsOf(block, ring_.segmentCount)) {
      float* values = reinterpret_cast<float*>(base_ + segment.offset * ring_.element);
      codec::encode(values, wireAt(segment.offset), segment.count, ring_.compression);
      codec::decode(wireAt(segment.offset), values, segment.count, ring_.compression);
    }
  }

 private:
  uint8_t* wireAt(size_t elementOffset) { return wire_ + elementOffset * ring_.wireStride; }

  const Context& ctx_;
  const Ring& ring_;
  uint8_t* base_;
  uint8_t* wire_;
};

size_t totalCount(const std::vector<Block>& blocks) {
  return blocks.empty() ? 0 : blocks.back().offset + blocks.back().count;
}

}  // namespace

std::vector<Block> evenBlocks(size_t count, int parts) {
  std::vector<Block> blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(plan::blockOf(count, parts, i));
  return blocks;
}

std::vector<Block> equalBlocks(size_t perRank, int parts) {
  std::vector<Block> blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(Block{perRank * i, perRank});
  return blocks;
}

void ringReduceScatter(const Context& ctx, void* buffer, const std::vector<Block>& blocks,
                       DataType type, ReduceOp op, Compression compression,
                       const SegmentHooks* hooks) {
  // Each block is first read once: block r-1 by step 0's send, every other one by its first
  // reduction (steps 0..p-2 receive blocks r-2, r-3, ..., r). That is where it is produced.
  const auto produce = [hooks](const Block& segment) {
    if (hooks != nullptr && hooks->produce) hooks->produce(segment);
  };
  const auto consume = [hooks](const Block& segment) {
    if (hooks != nullptr && hooks->consume) hooks->consume(segment);
  };
  if (ctx.size == 1) {
    for (const Block& block : blocks) produce(block);
    consume(blocks[ctx.rank]);
    return;
  }
  trace::Span phase(trace::Phase::ReduceScatter, "ring");
  const Ring ring(ctx, type, compression);
  const int p = ring.size;
  uint8_t* base = static_cast<uint8_t*>(buffer);
  Wire wire(ctx, ring, base, totalCount(blocks));

  size_t largest = 0;
  for (const Block& block : blocks) largest = std::max(largest, block.count);
  uint8_t* scratch[2] = {ctx.scratch.get(ScratchBuffer::Received, largest * ring.wireStride),
                         ctx.scratch.get(ScratchBuffer::ReceivedOther, largest * ring.wireStride)};

  auto postReceives = [&](int step) {
    std::vector<Posted> posted;
    const Block block = blocks[plan::ringReduceScatterStep(ctx.rank, p, step).recvBlock];
    for (const Block& segment : plan::segmentsOf(block, ring.segmentCount)) {
      uint8_t* into = scratch[step % 2] + (segment.offset - block.offset) * ring.wireStride;
      posted.push_back({segment, ctx.recv(ring.left, into, ring.wireBytes(segment.count))});
    }
    return posted;
  };

  // Step 0 sends this rank's own contribution to block r-1; later steps forward what arrived.
  const Block first = blocks[plan::ringReduceScatterStep(ctx.rank, p, 0).sendBlock];
  for (const Block& segment : plan::segmentsOf(first, ring.segmentCount)) {
    produce(segment);
    wire.send(segment);
  }
  std::vector<Posted> current = postReceives(0);
  for (int step = 0; step < p - 1; ++step) {
    std::vector<Posted> next;
    if (step + 1 < p - 1) next = postReceives(step + 1);
    const Block block = blocks[plan::ringReduceScatterStep(ctx.rank, p, step).recvBlock];
    for (const Posted& posted : current) {
      ctx.wait(posted.request);
      const uint8_t* theirs =
          scratch[step % 2] + (posted.segment.offset - block.offset) * ring.wireStride;
      produce(posted.segment);
      wire.reduceInto(posted.segment, theirs, type, op);
      if (step + 1 < p - 1) {
        wire.send(posted.segment);
      } else {  // a segment of this rank's own block, final
        reduce::finishAverage(base + posted.segment.offset * ring.element, posted.segment.count,
                              type, op, p);
        consume(posted.segment);
      }
    }
    current = std::move(next);
  }
  ctx.waitAll();
}

void ringAllgather(const Context& ctx, void* buffer, const std::vector<Block>& blocks,
                   DataType type, Compression compression, const SegmentHooks* hooks) {
  const bool consuming = hooks != nullptr && static_cast<bool>(hooks->consume);
  if (ctx.size == 1) {
    if (consuming) hooks->consume(blocks[ctx.rank]);
    return;
  }
  trace::Span phase(trace::Phase::Gather, "ring");
  const Ring ring(ctx, type, compression);
  const int p = ring.size;
  Wire wire(ctx, ring, static_cast<uint8_t*>(buffer), totalCount(blocks));
  // Final segments whose onward send may still read them: consumed once it has gone.
  std::deque<Posted> onward;
  const auto consumeSent = [&](bool all) {
    while (consuming && !onward.empty() &&
           (all || ctx.transport.isDone(onward.front().request))) {
      ctx.wait(onward.front().request);
      hooks->consume(onward.front().segment);
      onward.pop_front();
    }
  };

  wire.roundToWire(blocks[ctx.rank]);
  for (const Block& segment : plan::segmentsOf(blocks[ctx.rank], ring.segmentCount)) {
    onward.push_back({segment, wire.forward(segment)});
  }
  for (int step = 0; step < p - 1; ++step) {
    const Block block = blocks[plan::ringAllgatherStep(ctx.rank, p, step).recvBlock];
    std::vector<Posted> posted;
    for (const Block& segment : plan::segmentsOf(block, ring.segmentCount)) {
      posted.push_back(
          {segment, ctx.recv(ring.left, wire.arrivalFor(segment), ring.wireBytes(segment.count))});
    }
    for (const Posted& arrived : posted) {
      ctx.wait(arrived.request);
      const bool forwarded = step + 1 < p - 1;
      Transport::Request sent;
      if (forwarded) sent = wire.forward(arrived.segment);
      wire.land(arrived.segment);
      if (!consuming) continue;
      if (forwarded) {
        onward.push_back({arrived.segment, sent});
      } else {
        hooks->consume(arrived.segment);
      }
      consumeSent(false);
    }
  }
  ctx.waitAll();
  consumeSent(true);
}

void ringAllreduce(const Context& ctx, const void* input, void* output, size_t count,
                   DataType type, ReduceOp op, Compression compression, double prescale,
                   double postscale, const SegmentHooks* hooks) {
  if (input != output) {
    trace::Span span(trace::Phase::Copy, "input to output");
    copyBytes(output, input, count * elementSize(type));
  }
  codec::scale(output, count, type, prescale);
  const std::vector<Block> blocks = evenBlocks(count, ctx.size);
  // The all-gather consumes every block, this rank's own included, once it has sent it on.
  const SegmentHooks producing{hooks ? hooks->produce : nullptr, nullptr};
  ringReduceScatter(ctx, output, blocks, type, op, compression, &producing);
  ringAllgather(ctx, output, blocks, type, compression, hooks);
  codec::scale(output, count, type, postscale);
}

}  // namespace ringcomm::algorithms
