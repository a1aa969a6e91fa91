// Gathers every rank's trace (RINGCOMM_TRACE) to rank 0 through the rendezvous store at
// shutdown (trace_gather.h); the recorder and the file's format are common/trace.cc's.
#include "bootstrap/trace_gather.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/trace.h"
#include "ringcomm/store.h"

namespace ringcomm {
namespace trace {
namespace {

// A rank's part travels through the store in pieces of this size (the store takes values of up
// to 64 MiB).
constexpr size_t kChunkBytes = 16u << 20;
// How long a rank gives the store to take a piece when the job is ending (rank 0, which serves
// it, may be gone).
constexpr std::chrono::milliseconds kPutWait{2000};

}  // namespace

void writeTrace(Store& store, int rank, int size, std::chrono::milliseconds wait) {
  TracePart taken = takeTracePart(rank);
  const std::string& path = taken.path;
  std::string& part = taken.json;
  if (path.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  if (rank != 0) {
    const size_t pieces = (part.size() + kChunkBytes - 1) / kChunkBytes;
    bool stored = true;
    for (size_t i = 0; i < pieces && stored; ++i) {
      const size_t at = i * kChunkBytes;
      const size_t n = std::min(kChunkBytes, part.size() - at);
      stored = store.trySet("trace/" + std::to_string(rank) + "/" + std::to_string(i),
                            Bytes(part.begin() + at, part.begin() + at + n), kPutWait);
    }
    const std::string count = std::to_string(pieces);
    stored = stored && store.trySet("trace/" + std::to_string(rank) + "/count",
                                    Bytes(count.begin(), count.end()), kPutWait);
    if (!stored) {
      const std::string alone = path + ".rank" + std::to_string(rank) + ".json";
      const bool written = writeTraceFile(alone, {part}, {});
      RINGCOMM_LOG(LogLevel::Warn, kLogTrace,
                   "could not hand this rank's trace to rank 0 through the store; %s %s",
                   written ? "wrote it alone to" : "could not write it alone to either:",
                   alone.c_str());
    }
    return;
  }
  std::vector<std::string> parts(size);
  std::vector<int> missing;
  parts[0] = std::move(part);
  for (int peer = 1; peer < size; ++peer) {
    try {
      const auto left = std::max(std::chrono::milliseconds(1),
                                 wait - std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - start));
      const Bytes count = store.get("trace/" + std::to_string(peer) + "/count", left);
      const size_t pieces = std::stoul(std::string(count.begin(), count.end()));
      for (size_t i = 0; i < pieces; ++i) {
        const Bytes piece = store.get(
            "trace/" + std::to_string(peer) + "/" + std::to_string(i), kPutWait);
        parts[peer].append(piece.begin(), piece.end());
      }
    } catch (const std::exception&) {
      parts[peer].clear();
      missing.push_back(peer);
    }
  }
  const bool written = writeTraceFile(path, parts, missing);
  if (!written) {
    RINGCOMM_LOG(LogLevel::Warn, kLogTrace, "could not write RINGCOMM_TRACE=%s", path.c_str());
  } else if (!missing.empty()) {
    std::string ranks;
    for (int peer : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(peer);
    RINGCOMM_LOG(LogLevel::Warn, kLogTrace,
                 "wrote the trace to %s without rank(s) %s, whose part did not come within "
                 "%.0f s (they died, or did not shut down)",
                 path.c_str(), ranks.c_str(), std::chrono::duration<double>(wait).count());
  } else {
    RINGCOMM_LOG(LogLevel::Info, kLogTrace, "wrote the trace of %d rank(s) to %s", size,
                 path.c_str());
  }
}

}  // namespace trace
}  // namespace ringcomm
