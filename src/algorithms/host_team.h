// The ranks of one host as a team: the steps within a host that the hierarchical schedules
// (hierarchical.h) compose with the steps across hosts, as UCC composes a node's sub-team with
// the network's.
//
// Two kinds of team, one interface:
//   TransportTeam     ring and tree schedules on the host's sub-group of the communicator
//                     (Context::subgroup), through shared-memory rings or sockets;
//   SharedMemoryTeam  the direct and single-copy schedules through each other's memory
//                     (DirectGroup), where every rank of the host maps the others' segments; it
//                     falls back to the transport's steps where it cannot (a rank that cannot
//                     read the others' memory, crowded ranks asked to stage).
// Every call takes the whole communicator's `ctx`: the team knows which of its ranks are here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/direct.h"
#include "plan/plan.h"
#include "ringcomm/options.h"
#include "ringcomm/types.h"

namespace ringcomm::algorithms {

// Where the communicator's ranks are.
struct HostLayout {
  std::vector<std::vector<int>> hosts;  // hosts[h]: the ranks on host h, ascending
  int host = 0;                         // this rank's host
  int localRank = 0;                    // this rank's index in hosts[host]
};

// Whether each host's ranks are consecutive (as launchers place them): its ranks' blocks of a
// collective's buffer are then one range.
bool hostsHoldConsecutiveRanks(const HostLayout& layout);

class HostTeam {
 public:
  // A step across hosts on a slice of the vector (its elements at `slice`, `block` of the
  // whole), given the hooks that produce each segment within the host before the network
  // reads it and take each final one (SegmentHooks).
  using SliceStep = DirectGroup::SliceStep;

  explicit HostTeam(HostLayout layout) : layout_(std::move(layout)) {}
  virtual ~HostTeam() = default;
  HostTeam(const HostTeam&) = delete;
  HostTeam& operator=(const HostTeam&) = delete;

  // Every rank of the host ends with the host's combination of `input` in `output`.
  virtual void allreduce(const Context& ctx, const void* input, void* output, size_t count,
                         DataType type, ReduceOp op) = 0;
  // Local rank `localRoot` ends with it in `output`; the others' `output` is scratch.
  virtual void reduce(const Context& ctx, const void* input, void* output, size_t count,
                      DataType type, ReduceOp op, int localRoot) = 0;
  virtual void broadcast(const Context& ctx, void* buffer, size_t count, DataType type,
                         int localRoot) = 0;
  virtual void barrier(const Context& ctx) = 0;

  // The two steps that overlap the network. An all-reduce: local rank j reduces slices[j] of
  // the host's inputs, `across` combines it with the other hosts' and finishes it, and every
  // rank of the host ends with the whole vector in `output`.
  virtual void allreduceAcrossHosts(const Context& ctx, const void* input, void* output,
                                    size_t count, DataType type, ReduceOp op,
                                    const plan::HostSlices& slices, const SliceStep& across) = 0;
  // A reduce-scatter (`o.count` elements per rank): local rank j reduces slices[j] of the
  // host's inputs, `across` reduces it across hosts keeping the part in this host's ranks'
  // blocks, and each rank ends with its block in `o.output`. The slices and the blocks `across`
  // is given count elements in host-major order (host 0's ranks' blocks, then host 1's...).
  virtual void reduceScatterAcrossHosts(const Context& ctx, const ReduceScatterOptions& o,
                                        const plan::HostSlices& slices,
                                        const SliceStep& across) = 0;

  const HostLayout& layout() const { return layout_; }

 protected:
  HostLayout layout_;
};

class TransportTeam : public HostTeam {
 public:
  using HostTeam::HostTeam;
  void allreduce(const Context& ctx, const void* input, void* output, size_t count, DataType type,
                 ReduceOp op) override;
  void reduce(const Context& ctx, const void* input, void* output, size_t count, DataType type,
              ReduceOp op, int localRoot) override;
  void broadcast(const Context& ctx, void* buffer, size_t count, DataType type,
                 int localRoot) override;
  void barrier(const Context& ctx) override;
  void allreduceAcrossHosts(const Context& ctx, const void* input, void* output, size_t count,
                            DataType type, ReduceOp op, const plan::HostSlices& slices,
                            const SliceStep& across) override;
  void reduceScatterAcrossHosts(const Context& ctx, const ReduceScatterOptions& o,
                                const plan::HostSlices& slices, const SliceStep& across) override;

 protected:
  Context local(const Context& ctx) const { return ctx.subgroup(layout_.hosts[layout_.host]); }
};

class SharedMemoryTeam : public TransportTeam {
 public:
  // `group`: the direct schedule of this host's ranks; it outlives the team.
  SharedMemoryTeam(HostLayout layout, DirectGroup& group)
      : TransportTeam(std::move(layout)), group_(group) {}
  void allreduce(const Context& ctx, const void* input, void* output, size_t count, DataType type,
                 ReduceOp op) override;
  void reduce(const Context& ctx, const void* input, void* output, size_t count, DataType type,
              ReduceOp op, int localRoot) override;
  void broadcast(const Context& ctx, void* buffer, size_t count, DataType type,
                 int localRoot) override;
  void barrier(const Context& ctx) override;
  void allreduceAcrossHosts(const Context& ctx, const void* input, void* output, size_t count,
                            DataType type, ReduceOp op, const plan::HostSlices& slices,
                            const SliceStep& across) override;
  void reduceScatterAcrossHosts(const Context& ctx, const ReduceScatterOptions& o,
                                const plan::HostSlices& slices, const SliceStep& across) override;

 private:
  DirectGroup& group_;
};

// The team of this host's ranks: through each other's memory where `group` is given.
std::unique_ptr<HostTeam> makeHostTeam(const HostLayout& layout, DirectGroup* group);

}  // namespace ringcomm::algorithms
