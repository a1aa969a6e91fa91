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
//   2. after every peer's "input ready": reduce this rank's slice of every rank's input, in a
//      fixed order (own input first, then the others by rank), into this rank's scratch;
//      record "reduced".
//      round 2: all-gather "could map every peer" flags; if any rank could not, every rank
//      stages this all-reduce (and every later one) instead.
//   3. after every peer's "reduced": copy every rank's slice from its scratch into the output.
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
// Several ranks sharing one GPU without the MPS daemon is noticed in round 1 and said once: the
// GPU then time-slices between the processes' contexts, and every cross-process wait costs
// context switches (about 2 ms per all-reduce at 4 ranks on an H100, against tens of
// microseconds with MPS).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/cuda/device_state.h"

namespace ringcomm::device {

class IpcAllreduce {
 public:
  IpcAllreduce(int rank, int size, std::string mpsPipeDirectory);
  ~IpcAllreduce();
  IpcAllreduce(const IpcAllreduce&) = delete;
  IpcAllreduce& operator=(const IpcAllreduce&) = delete;

  // DevicePath::ipcAllreduce.
  bool run(const CudaTicket& ticket, const Operation& op, const Peers& peers, const void* input,
           void* output, size_t count, DataType type, ReduceOp reduceOp);

 private:
  struct PerDevice;
  struct Record;

  PerDevice& stateFor(DeviceState& device);
  void warnIfSharingWithoutMps(const std::vector<Record>& records) const;

  int rank_;
  int size_;
  std::string mpsPipeDirectory_;
  // Set on every rank at the same all-reduce (they all saw the same round 2), so the ranks keep
  // agreeing on the path without asking again.
  bool unavailable_ = false;
  bool sharingChecked_ = false;
  std::map<int, std::unique_ptr<PerDevice>> devices_;
};

}  // namespace ringcomm::device
