// ringcomm as a torch.distributed backend: a c10d::Backend whose operations are the core's
// collectives on one ringcomm Communicator per process group.
//
// Every operation validates its tensors on the caller's thread, hands the core raw buffers and
// returns at once; the core's engine thread moves the data and completes the torch Work and its
// Future. No operation copies a dense CPU tensor: staging happens only where torch's argument is a
// list the core wants as one buffer (all_gather into a list, reduce_scatter from one...) or a
// tensor is not contiguous.
//
// Defined by part: backend.cc (its life and errors), reductions.cc, data_movement.cc and
// point_to_point.cc (the operations, started through operation_start.h), growth.cc (growing in
// place).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "tensors.h"
#include "work.h"

namespace ringcomm::c10d_backend {

class RingcommBackend : public ::c10d::Backend {
 public:
  using Rules = std::vector<std::pair<size_t, Algorithm>>;  // as Config::shmAllreduceRules

  // secret: the job's (ringcomm/c10d/__init__.py settles it); empty: RINGCOMM_SECRET's.
  // shmRules, tcpRules: this host's tuning file's, as ringcomm.init() reads them
  // (ringcomm/_tuning.py); empty: the cost model decides what "auto" runs. linkLatency
  // (seconds), linkBandwidth (bytes/s): this host's link file's (Config::linkLatency); 0: none.
  // listenAddress: where to listen when neither RINGCOMM_SOCKET_IFNAME nor
  // RINGCOMM_LISTEN_ADDRESS says (this host's address towards torch's store); "": 127.0.0.1.
  RingcommBackend(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout, const std::string& secret,
                  Rules shmRules = {}, Rules tcpRules = {}, double linkLatency = 0,
                  double linkBandwidth = 0, const std::string& listenAddress = "");
  // A backend whose ranks meet in a ringcomm mailbox at host:port (a TcpStoreServer that proves
  // `secret`) under `scope`, instead of on a torch store: torchft's reconfigure() on the
  // addresses its handles carry (ringcomm/torchft.py). The other arguments as above.
  static c10::intrusive_ptr<RingcommBackend> meet(const std::string& host, int port,
                                                  const std::string& scope, int rank, int size,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& secret, Rules shmRules,
                                                  Rules tcpRules, double linkLatency,
                                                  double linkBandwidth,
                                                  const std::string& listenAddress);
  // A backend on a communicator made already (shrink()'s).
  explicit RingcommBackend(std::shared_ptr<Communicator> communicator);
  // The group torch asked shrink_group for, of which some ranks died while it formed (between
  // lost_ranks() and shrink_group(), or during it): torch's rank and size for it, and each of
  // its ranks' rank in `communicator` (the true survivors'), -1 for the lost. `communicator` is
  // aborted naming them, so that the group's first collective raises at once and the training
  // loop shrinks again, where lost_ranks() names them.
  RingcommBackend(std::shared_ptr<Communicator> communicator, int rank, int size,
                  std::vector<int> coreRanks);
  ~RingcommBackend() override;

  const std::string getBackendName() const override { return "ringcomm"; }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& outputSplitSizes,
                                                 std::vector<int64_t>& inputSplitSizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;

  // torch's debug wrapper compares these across ranks to catch mismatched collectives. Every rank
  // of a group starts at 0 and counts the operations it issues.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  void abort() override;
  void shutdown() override;

  // The timeout of operations that set none (torch's ProcessGroup._set_default_timeout; torchft's
  // set_timeout); the group's own (its Config::timeout) until set.
  void setTimeout(std::chrono::milliseconds timeout) override;
  // Whether an operation of this group failed (torchft's errored(); FirstFailure): TIMEOUT,
  // COMM_ERROR, or SUCCESS; errorMessage() says what failed ("" where nothing did).
  ::c10d::ErrorType getError() override;
  std::string errorMessage() const;

  // torch.distributed.shrink_group: a backend of the ranks not in `ranksToExclude`, agreed by
  // them (Communicator::shrink). SHRINK_ABORT aborts this backend's operations first. torch
  // numbers the new group from the excluded list; where other ranks died too, it gets the group
  // it asked for with those ranks lost in it (the constructor above), so a second death during
  // recovery costs one more shrink, not the job.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<::c10d::Backend> shrink(
      const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
      const c10::intrusive_ptr<Options>& optionsOverride) override;
  // The ranks of this group that are gone, as every survivor agrees (Communicator::survivors).
  std::vector<int64_t> lostRanks();

  // Growing in place (growth.cc). The members admit the processes waiting to join
  // (Communicator::grow): the grown group's backend, or nullptr where nobody waits.
  c10::intrusive_ptr<RingcommBackend> grow(int expect, std::chrono::milliseconds timeout);
  // A newcomer's backend in the grown group (Communicator::join): the members found at
  // `addresses` ("host:port"), or on `board` under `doorKey`: the launcher's store
  // ("host:port"), or a directory all hosts see (RINGCOMM_DOOR_DIR; a spec with a '/').
  static c10::intrusive_ptr<RingcommBackend> join(const std::vector<std::string>& addresses,
                                                   const std::string& board,
                                                   const std::string& doorKey,
                                                   std::chrono::milliseconds timeout,
                                                   const std::string& secret);
  // Keeps the members' addresses on `board` (as join()'s) under `doorKey`, through every shrink
  // and grow (Communicator::publishDoor).
  void publishDoor(const std::string& board, const std::string& doorKey, const std::string& secret);
  // Where a newcomer reaches this rank (Communicator::address).
  std::string address() const { return communicator_->address(); }

  // An all-reduce (sum or average) whose messages carry `compression` on the wire: ringcomm's
  // codecs (fp16, bf16, int8, fp8), which torch's all_reduce has no option for. What the DDP
  // comm hooks of ringcomm/c10d/hooks.py run.
  c10::intrusive_ptr<::c10d::Work> allreduceCompressed(at::Tensor& tensor,
                                                       ringcomm::Compression compression,
                                                       bool average);

  // The communicator under this backend (diagnostics and tests).
  const Communicator& communicator() const { return *communicator_; }

 private:
  // The communicator's configuration: the environment's, with what the constructors take.
  static Config configFor(std::chrono::milliseconds timeout, const std::string& secret,
                          Rules shmRules, Rules tcpRules, double linkLatency, double linkBandwidth,
                          const std::string& listenAddress);
  // Fills the fields every core options struct shares from torch's timeout and asyncOp.
  template <typename CoreOptions>
  CoreOptions common(std::chrono::milliseconds timeout, bool asyncOp) const;
  // A rooted collective's core options (gather, scatter, reduce): common()'s, the arrays (the
  // root's side nullptr on the other ranks: setArrays) and torch's root rank.
  template <typename CoreOptions, typename TorchOptions>
  CoreOptions rooted(const TorchOptions& opts, const void* input, void* output,
                     const Buffer& counted) const;
  // all_reduce of a sparse COO tensor (sparse.h): all-gathers every rank's non-zeros.
  c10::intrusive_ptr<::c10d::Work> allreduceSparse(at::Tensor& tensor,
                                                   const ::c10d::AllreduceOptions& opts);
  // recv and recvAnysource: a receive from `srcRank` (or ringcomm::kAnySource).
  c10::intrusive_ptr<::c10d::Work> receive(std::vector<at::Tensor>& tensors, int srcRank, int tag,
                                           ::c10d::OpType type, OpName op);

  // The core call shared by the variants of one collective (list, flat, coalesced); `o` carries
  // the timeout and whether to run in the caller (from common()).
  ringcomm::WorkPtr startAllreduce(const at::Tensor& buffer, const Reduction& reduction,
                                   ringcomm::AllreduceOptions o);
  ringcomm::WorkPtr startAllgather(const at::Tensor& input, void* output,
                                   ringcomm::AllgatherOptions o);
  ringcomm::WorkPtr startReduceScatter(const at::Tensor& input, const at::Tensor& output,
                                       const Reduction& reduction,
                                       ringcomm::ReduceScatterOptions o);
  // The operations on one tensor in place (broadcast, all_reduce, reduce, recv): `tensors` holds
  // it. Stages it (a contiguous copy where it is not, written back once the operation is done);
  // `startBuffer(work, buffer)` starts the core operation on the staged tensor.
  template <typename StartBuffer>
  c10::intrusive_ptr<::c10d::Work> startInPlace(std::vector<at::Tensor>& tensors,
                                                ::c10d::OpType type, OpName op,
                                                StartBuffer startBuffer);
  // torch's *_tensor forms (all_gather_into_tensor, reduce_scatter_tensor): one core operation
  // from `input` into `output`, one of them (`whole`) world size times the other's elements.
  // Checks and stages the pair; `startPair(in, out)` starts the operation on the staged tensors.
  template <typename StartPair>
  c10::intrusive_ptr<::c10d::Work> startWholePair(at::Tensor& output, at::Tensor& input,
                                                  Whole whole, ::c10d::OpType type, OpName op,
                                                  StartPair startPair);
  // torch's *_tensor_coalesced (all_gather_into_tensor_coalesced, reduce_scatter_tensor_coalesced):
  // one core operation per (input, output) pair. Checks each pair (`whole`: the side holding
  // world size times the other's elements) and stages it; `startPair(i, in, out)` then starts
  // pair i, queued back to back with the others so that they complete in order.
  template <typename StartPair>
  c10::intrusive_ptr<::c10d::Work> startCoalescedPairs(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       Whole whole, OpName op,
                                                       StartPair startPair);

  // How long a connection to the launcher's store (the board of members' addresses) may take.
  static constexpr std::chrono::milliseconds kBoardWait{5000};

  // The communicator's rank of torch's rank r of this group: r itself, or coreRanks_[r] (-1: lost
  // while the group formed) where torch's group is larger than the communicator.
  int coreRankOf(int rank) const;

  std::shared_ptr<Communicator> communicator_;
  std::vector<int> coreRanks_;  // empty: torch's ranks are the communicator's
  OperationCount count_;
  std::atomic<int64_t> defaultTimeout_{0};  // ms; 0: the communicator's (setTimeout)
};

}  // namespace ringcomm::c10d_backend
