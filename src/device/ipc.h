// The same-host all-reduce of device buffers over CUDA IPC: no host memory on the data's way.
//
// Vocabulary:
//   slice    the part of the buffer one rank reduces: rank r owns elements
//            [r * perRank, (r + 1) * perRank), perRank rounded up to kSliceAlignBytes.
//   scratch  a device buffer of each rank's, exported once (and again when it grows), that
//            holds the rank's reduced slice until every peer has copied it.
//   round    a host exchange between the ranks through the host transport (Peers).
//
// One all-reduce, on each rank's compute stream:
//   1. record "input ready" (after the caller's stream produced the input, and after this rank's
//      previous IPC all-reduce finished copying peers' scratch);
//      round 1: all-gather each rank's input handle, scratch handle and event handles.
//   2. after every peer's "input ready": reduce this rank's slice of every rank's input in one
//      pass (cuda::reduceMany, in rank order, the average folded in) into this rank's scratch;
//      record "reduced".
//      round 2: all-gather "could map every peer" flags; if any rank could not, every rank
//      stages this all-reduce (and every later one) instead.
//      Across hosts (ipcAllreduceWithinHost), the ranks are one host's, and each now runs the
//      step it was given on its reduced slice in scratch (the slice's all-reduce across hosts,
//      staged through host memory), records "reduced" again, and a barrier lets peers go on.
//   3. after every peer's "reduced": copy every rank's slice from its scratch into the output.
//
// Device memory traffic per rank, for N bytes at p ranks: step 2 reads N and writes N/p, step 3
// reads and writes N: 3N + N/p, against the 2N of reading the input and writing the output once
// (the single-device limit the benchmark prints). Reducing pairwise instead (p - 1 kernels, the
// first design) read the scratch back each time: 4.25N at 4 ranks.
//
// Why that is enough, with two rounds and 2 (p - 1) cross-process event waits:
//   - a rank's "input ready" is recorded on its stream after its previous step 3, so waiting for
//     it also means that rank has finished reading this rank's scratch, which step 2 overwrites;
//   - every peer has finished reading this rank's input once its "reduced" is done, and step 3
//     (which may write that input, in place) comes after;
//   - nobody but its owner touches an output, so the caller may reuse both buffers as soon as
//     step 3 is done: no final round.
// A wait for an interprocess event takes its latest record at the time of the wait, so each wait
// comes after a round that follows the record it means.
//
// Several ranks sharing one GPU without the MPS daemon is noticed in round 1 of the first IPC
// all-reduce and said once: the GPU then time-slices between the processes' contexts, and every
// cross-process wait costs context switches (about 1-2 ms per all-reduce from 1 to 64 MiB at 4
// ranks on an H100, against 0.15-0.4 ms with MPS), and more inside a training step, where the
// other contexts are busy with their backward kernels. From then on, unless RINGCOMM_CUDA_PATH=ipc,
// every all-reduce returns false, to be staged through host memory, whose copies wait for no
// other process (as gloo's do); every rank saw the same round 1, so all decide alike. Measured
// there (bench/RESULTS.md, "CUDA"): a DDP step of a 23M-parameter MLP at 4 ranks took 47.8 ms
// staged and 55.8 ms over IPC, and a 4.2M one 26.2 ms over IPC against gloo's 21.9; all-reduces
// alone staged beat gloo at every size timed (1.4-2.6x), though IPC is far faster from 4 MiB.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/device_state.h"
#include "device/ipc_plan.h"

namespace ringcomm::device {

class IpcAllreduce {
 public:
  // stageWhenTimeSliced: whether all-reduces on a GPU time-sliced between ranks are left to the
  // staged path (RINGCOMM_CUDA_PATH=auto) or kept here (ipc).
  IpcAllreduce(int rank, int size, std::string mpsPipeDirectory, bool stageWhenTimeSliced);
  ~IpcAllreduce();
  IpcAllreduce(const IpcAllreduce&) = delete;
  IpcAllreduce& operator=(const IpcAllreduce&) = delete;

  // DevicePath::ipcAllreduce, and ipcAllreduceWithinHost with `betweenHalves`.
  bool run(const CudaTicket& ticket, const Operation& op, const Peers& peers, const void* input,
           void* output, size_t count, DataType type, ReduceOp reduceOp,
           const SliceStep* betweenHalves = nullptr);

 private:
  struct PerDevice;
  struct Record;
  struct Verdict;
  struct PeerMappings;

  PerDevice& stateFor(DeviceState& device);
  // The steps of run(), in order (see the top of this file).
  // Step 1: this rank's record for round 1 (its device, and its input, scratch and events
  // exported), with why not where it cannot export them. `sliceBytes`: the longest slice.
  Record describeThisRank(const CudaTicket& ticket, PerDevice& device, const void* input,
                          size_t sliceBytes);
  // After the first round 1: whether every all-reduce stages from now on, the GPU being
  // time-sliced between ranks (said once, with advice).
  bool stageTimeSliced(const std::vector<Record>& records, int device);
  // Maps every peer's input, scratch and events; `verdict` says why not where it cannot.
  void mapPeers(PerDevice& device, const Record& mine, const std::vector<Record>& records,
                PeerMappings& mapped, Verdict& verdict);
  // Step 2: this rank's slice of every rank's input, reduced into its scratch.
  void reduceOwnSlice(DeviceState& state, PerDevice& device, const void* input, size_t count,
                      DataType type, ReduceOp reduceOp, const PeerMappings& mapped,
                      Verdict& verdict);
  // Round 2: whether every rank mapped and reduced; where one did not, every rank stages this
  // all-reduce and the later ones (rank 0 says why).
  bool everyRankMapped(const Verdict& verdict, const Record& mine,
                       const std::vector<Record>& records, DeviceState& state, PerDevice& device,
                       const Operation& op, const Peers& peers);
  // Step 3: every rank's reduced slice from its scratch into `output`.
  void copySlices(DeviceState& state, PerDevice& device, void* output, size_t count,
                  size_t elementBytes, const PeerMappings& mapped);
  // Whether `device` here can read the memory of the GPU named `uuid` (ipc_plan.h).
  static PeerAccess peerAccess(int device, const uint8_t (&uuid)[16]);
  void warnIfSharingWithoutMps(const std::vector<RankDevice>& records) const;

  int rank_;
  int size_;
  std::string mpsPipeDirectory_;
  bool stageWhenTimeSliced_;
  // Set on every rank at the same all-reduce (they all saw the same round 2), so the ranks keep
  // agreeing on the path without asking again.
  bool unavailable_ = false;
  bool sharingChecked_ = false;
  // Some ranks share a GPU without MPS and every rank lets such all-reduces stage (the first
  // round 1 said): every all-reduce returns false.
  bool stagesTimeSliced_ = false;
  std::map<int, std::unique_ptr<PerDevice>> devices_;
};

}  // namespace ringcomm::device
