// validate() of every options struct: the caller's mistakes become InvalidArgument naming the field.
#include "ringcomm/options.h"

#include <cstddef>
#include <string>
#include <utility>

#include "ringcomm/errors.h"

namespace ringcomm {
namespace {

void requireBuffer(const void* buffer, size_t count, const char* collective, const char* field) {
  if (buffer == nullptr && count > 0) {
    throw InvalidArgument(std::string(collective) + ": " + field + " is null but count is " +
                          std::to_string(count));
  }
}

void requireRoot(int root, int size, const char* collective) {
  if (root < 0 || root >= size) {
    throw InvalidArgument(std::string(collective) + ": root must be in [0, " +
                          std::to_string(size) + "); got " + std::to_string(root));
  }
}

// Avg of bools has no meaning (torch refuses it too): a bool reduction is a logical or / and.
void requireDefinedReduction(DataType type, ReduceOp op, const char* collective) {
  // Adasum combines whole vectors (its coefficients come from dot products over every element),
  // so it has no meaning for a reduction whose ranks each keep a part or for one root alone.
  if (op == ReduceOp::Adasum && std::string(collective) != "allreduce") {
    throw InvalidArgument(std::string(collective) + ": op adasum is an all-reduce only");
  }
  if (type == DataType::Bool && op == ReduceOp::Avg) {
    throw InvalidArgument(std::string(collective) +
                          ": op avg is not defined for bool (sum and max are logical or, prod "
                          "and min logical and)");
  }
}

void requirePeer(int peer, int size, int rank, const char* collective) {
  if (peer < 0 || peer >= size) {
    throw InvalidArgument(std::string(collective) + ": peer must be in [0, " +
                          std::to_string(size) + "); got " + std::to_string(peer));
  }
  if (peer == rank) {
    throw InvalidArgument(std::string(collective) + ": peer " + std::to_string(peer) +
                          " is this rank itself");
  }
}

// Adasum's own rules (the rank count is the communicator's to check: it must be a power of two).
void validateAdasum(const AllreduceOptions& o) {
  if (o.op != ReduceOp::Adasum) {
    if (!o.tensorCounts.empty()) {
      throw InvalidArgument(std::string("allreduce: tensorCounts is for op adasum only; got op ") +
                            toString(o.op));
    }
    return;
  }
  if (o.type != DataType::Float16 && o.type != DataType::BFloat16 && o.type != DataType::Float32 &&
      o.type != DataType::Float64) {
    throw InvalidArgument(
        std::string("allreduce: op adasum needs floating-point data (float16, bfloat16, float32, "
                    "float64); got ") +
        toString(o.type));
  }
  if (o.compression != Compression::None) {
    throw InvalidArgument(std::string("allreduce: op adasum takes no wire compression; got '") +
                          toString(o.compression) + "'");
  }
  if (o.algorithm != Algorithm::Auto) {
    throw InvalidArgument(std::string("allreduce: op adasum runs its own schedule (vector "
                                      "halving, distance doubling); got algorithm '") +
                          toString(o.algorithm) + "'");
  }
  if (!o.tensorCounts.empty()) {
    size_t sum = 0;
    for (size_t n : o.tensorCounts) sum += n;
    if (sum != o.count) {
      throw InvalidArgument("allreduce: tensorCounts sum to " + std::to_string(sum) +
                            " elements, but count is " + std::to_string(o.count));
    }
  }
}

}  // namespace

void AllreduceOptions::validate() const {
  requireBuffer(input, count, "allreduce", "input");
  requireBuffer(output, count, "allreduce", "output");
  requireDefinedReduction(type, op, "allreduce");
  if (compression != Compression::None) {
    if (type != DataType::Float32) {
      throw InvalidArgument(std::string("allreduce: compression '") + toString(compression) +
                            "' needs float32 data; got " + toString(type));
    }
    if (op != ReduceOp::Sum && op != ReduceOp::Avg) {
      throw InvalidArgument(std::string("allreduce: compression needs op sum or avg; got ") +
                            toString(op));
    }
    if (algorithm == Algorithm::Tree || algorithm == Algorithm::Direct) {
      throw InvalidArgument(std::string("allreduce: compression runs on the ring schedule (or "
                                        "across hosts in the hierarchical one); got algorithm '") +
                            toString(algorithm) + "'");
    }
  }
  if ((prescale != 1.0 || postscale != 1.0) && type == DataType::Bool) {
    throw InvalidArgument("allreduce: prescale/postscale need numbers; got bool data");
  }
  validateAdasum(*this);
}

void ReduceScatterOptions::validate() const {
  requireBuffer(input, count, "reduce_scatter", "input");
  requireBuffer(output, count, "reduce_scatter", "output");
  requireDefinedReduction(type, op, "reduce_scatter");
}

void AllgatherOptions::validate() const {
  requireBuffer(input, count, "allgather", "input");
  requireBuffer(output, count, "allgather", "output");
}

void BroadcastOptions::validate(int size) const {
  requireBuffer(buffer, count, "broadcast", "buffer");
  requireRoot(root, size, "broadcast");
}

void ReduceOptions::validate(int size) const {
  requireBuffer(input, count, "reduce", "input");
  requireRoot(root, size, "reduce");
  requireDefinedReduction(type, op, "reduce");
}

void AlltoallOptions::validate() const {
  requireBuffer(input, count, "alltoall", "input");
  requireBuffer(output, count, "alltoall", "output");
}

void AlltoallvOptions::validate(int size, int rank) const {
  const std::pair<const std::vector<size_t>*, const char*> fields[] = {
      {&sendCounts, "sendCounts"}, {&sendOffsets, "sendOffsets"},
      {&recvCounts, "recvCounts"}, {&recvOffsets, "recvOffsets"}};
  for (const auto& [field, name] : fields) {
    if (static_cast<int>(field->size()) != size) {
      throw InvalidArgument(std::string("alltoallv: ") + name + " needs one entry per rank (" +
                            std::to_string(size) + "); got " + std::to_string(field->size()));
    }
  }
  size_t sent = 0;
  size_t received = 0;
  for (int i = 0; i < size; ++i) {
    sent += sendCounts[i];
    received += recvCounts[i];
  }
  if (sendCounts[rank] != recvCounts[rank]) {
    throw InvalidArgument("alltoallv: this rank sends itself " + std::to_string(sendCounts[rank]) +
                          " elements but expects " + std::to_string(recvCounts[rank]));
  }
  requireBuffer(input, sent, "alltoallv", "input");
  requireBuffer(output, received, "alltoallv", "output");
}

void GatherOptions::validate(int size, int rank) const {
  requireBuffer(input, count, "gather", "input");
  requireRoot(root, size, "gather");
  if (rank == root) requireBuffer(output, count, "gather", "output");
}

void ScatterOptions::validate(int size, int rank) const {
  requireBuffer(output, count, "scatter", "output");
  requireRoot(root, size, "scatter");
  if (rank == root) requireBuffer(input, count, "scatter", "input");
}

void SendOptions::validate(int size, int rank) const {
  requireBuffer(buffer, bytes, "send", "buffer");
  requirePeer(peer, size, rank, "send");
}

void RecvOptions::validate(int size, int rank) const {
  requireBuffer(buffer, bytes, "recv", "buffer");
  if (peer == kAnySource) {
    if (size == 1) throw InvalidArgument("recv: from any source, but this rank is alone");
    return;
  }
  requirePeer(peer, size, rank, "recv");
}

void GrowOptions::validate() const {
  if (expect < 0) {
    throw InvalidArgument("grow: expect must be >= 0 newcomers; got " + std::to_string(expect));
  }
  if (timeout.count() < 0) throw InvalidArgument("grow: timeout must not be negative");
}

void JoinOptions::validate() const {
  if (addresses.empty() && !board) {
    throw InvalidArgument(
        "join: no way to find the members: give addresses (a member's Communicator::address(), "
        "\"host:port\") or a board (the store where they publish them)");
  }
  if (board && doorKey.empty()) throw InvalidArgument("join: board given without a doorKey");
  for (const std::string& address : addresses) {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
        address.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      throw InvalidArgument("join: addresses must look like host:port; got \"" + address + "\"");
    }
  }
  if (timeout.count() < 0) throw InvalidArgument("join: timeout must not be negative");
}

}  // namespace ringcomm
