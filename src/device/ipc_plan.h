// The IPC all-reduce's decisions (ipc.cc), from what each rank of a host says of its device in
// round 1: pure functions over plain records, compiled in every build (no CUDA), so that they
// are unit-tested without a GPU (tests/cpp/test_ipc_plan.cc).
//
// A GPU is named by its UUID (cudaDeviceProp::uuid), the same in every process whatever
// CUDA_VISIBLE_DEVICES makes its ordinal; a process by its pid and its PID namespace, since
// containers that share a host's network (one host to ringcomm) may reuse each other's pids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringcomm::device {

// Buffers cut into one slice per rank are cut at multiples of this many bytes (every element size
// divides it, and the kernels' 16-byte vectors stay aligned); staging places regions at multiples
// of it too.
constexpr size_t kSliceAlignBytes = 256;

// The IPC all-reduce cuts `count` elements into `parts` slices, one per rank, of equal length in
// multiples of kSliceAlignBytes (the last ones shorter, or empty for small counts): slice `index`.
struct Slice {
  size_t begin = 0;
  size_t count = 0;
};
Slice ipcSlice(size_t count, size_t elementBytes, int parts, int index);

struct RankDevice {
  int64_t pid = 0;
  uint64_t pidNamespace = 0;  // the inode of /proc/self/ns/pid (0: unknown)
  int32_t mps = 0;            // 1: this rank sees the MPS control daemon running
  int32_t stageWhenTimeSliced = 0;  // 1: RINGCOMM_CUDA_PATH=auto here (0: ipc)
  uint8_t uuid[16] = {};
};

// Whether a rank's device can read another's memory, as this rank's CUDA runtime answers it
// (cudaDeviceCanAccessPeer). Unknown: the other GPU is not visible in this process
// (CUDA_VISIBLE_DEVICES), so only mapping its memory can tell.
enum class PeerAccess : uint8_t { Yes, No, Unknown };

bool sameProcess(const RankDevice& a, const RankDevice& b);
bool sameDevice(const RankDevice& a, const RankDevice& b);

// The ranks whose device is `rank`'s, `rank` included, in rank order.
std::vector<int> ranksSharingDevice(const std::vector<RankDevice>& ranks, int rank);

// Whether ranks of different processes share a device that runs without MPS on both sides: the
// GPU then time-slices between their contexts (the same answer on every rank).
bool anyDeviceTimeSliced(const std::vector<RankDevice>& ranks);

// Why rank `rank` cannot read rank `peer`'s device memory, naming both and their GPUs; "" when
// nothing stands in the way (a mapping is then the test, for PeerAccess::Unknown too).
std::string ipcBlocker(int rank, int peer, const RankDevice& mine, const RankDevice& theirs,
                       PeerAccess access);

// As nvidia-smi writes it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string uuidText(const uint8_t (&uuid)[16]);

// This process's PID namespace (the inode of /proc/self/ns/pid), or 0 where it cannot be read.
uint64_t currentPidNamespace();

}  // namespace ringcomm::device
