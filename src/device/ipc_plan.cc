#include "device/ipc_plan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ringcomm::device {

Slice ipcSlice(size_t count, size_t elementBytes, int parts, int index) {
  const size_t align = std::max<size_t>(1, kSliceAlignBytes / elementBytes);
  const size_t perRank = ((count + parts - 1) / parts + align - 1) / align * align;
  const size_t begin = std::min(count, perRank * index);
  return Slice{begin, std::min(count, perRank * (index + 1)) - begin};
}

bool sameProcess(const RankDevice& a, const RankDevice& b) {
  return a.pid == b.pid && a.pidNamespace == b.pidNamespace;
}

bool sameDevice(const RankDevice& a, const RankDevice& b) {
  return std::memcmp(a.uuid, b.uuid, sizeof(a.uuid)) == 0;
}

std::vector<int> ranksSharingDevice(const std::vector<RankDevice>& ranks, int rank) {
  std::vector<int> sharing;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (sameDevice(ranks[r], ranks[rank])) sharing.push_back(static_cast<int>(r));
  }
  return sharing;
}

bool anyDeviceTimeSliced(const std::vector<RankDevice>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t q = r + 1; q < ranks.size(); ++q) {
      // Ranks of one process share its context (and cannot use IPC: ipcBlocker says so).
      const bool shared = sameDevice(ranks[r], ranks[q]) && !sameProcess(ranks[r], ranks[q]);
      if (shared && !(ranks[r].mps && ranks[q].mps)) return true;
    }
  }
  return false;
}

std::string ipcBlocker(int rank, int peer, const RankDevice& mine, const RankDevice& theirs,
                       PeerAccess access) {
  const std::string pair = "ranks " + std::to_string(rank) + " and " + std::to_string(peer);
  if (sameProcess(mine, theirs)) return pair + " share a process";
  if (access == PeerAccess::No && !sameDevice(mine, theirs)) {
    return pair + " are on GPUs without peer access (" + uuidText(mine.uuid) + " and " +
           uuidText(theirs.uuid) + ": no NVLink or PCIe path between them)";
  }
  return "";
}

std::string uuidText(const uint8_t (&uuid)[16]) {
  std::string text = "GPU-";
  char digits[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(digits, sizeof(digits), "%02x", uuid[i]);
    text += digits;
  }
  return text;
}

uint64_t currentPidNamespace() {
  struct stat info {};
  if (stat("/proc/self/ns/pid", &info) != 0) return 0;
  return static_cast<uint64_t>(info.st_ino);
}

}  // namespace ringcomm::device
