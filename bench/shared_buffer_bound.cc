// How fast 4 local ranks could all-reduce if their buffers were mapped by every rank (shared
// memory a caller allocates through the library, as MPI_Win_allocate_shared or NCCL's registered
// buffers), against the single-copy path's kernel copies (process_vm_readv/writev), with the same
// schedule, chunking and synchronisation (bench/RESULTS.md, "What registered buffers could
// gain"). Not a collective: no checks, no failures; an upper bound for each way of moving bytes.
// Build and run from the repository root:
//
//   g++ -O2 -mavx2 -std=c++17 bench/shared_buffer_bound.cc -o /tmp/shared_buffer_bound
//   /tmp/shared_buffer_bound shared 33554432     # loads and stores into mapped peer buffers
//   /tmp/shared_buffer_bound kernel 33554432     # the kernel copies, as the single-copy path
//   /tmp/shared_buffer_bound hybrid 33554432     # kernel reads; the all-gather through slots
//
// "hybrid" keeps the buffers private (a caller's arrays) but replaces the kernel's writes into
// the peers' outputs: a rank copies each reduced chunk into a slot of its own in shared memory
// and every peer copies it from there into its output at once, while it is still in the cache
// (bench/RESULTS.md, "An all-gather through slots for ordinary arrays"). Still no
// synchronisation: the peers copy whatever the slot holds, so this is the bound of its traffic.
//
// Each of 4 processes owns slice r of a float32 vector: chunk by chunk it reduces the 4 inputs'
// chunk into its own buffer and writes the result into the 3 peers' buffers (in place, as the
// single-copy path does). Prints the median of 30 calls of the slowest process, and busbw.
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kRanks = 4;
constexpr int kCalls = 30;
constexpr size_t kChunkBytes = 256 * 1024;  // the single-copy path's chunk at 4 ranks

enum class Mode { Mapped, Kernel, Hybrid };
constexpr int kSlots = 4;  // "hybrid": result slots per rank, used in turn

struct Shared {
  std::atomic<long> arrived{0};
  std::atomic<long> generation{0};
  pid_t pids[kRanks];
  float* buffers[kRanks];  // the addresses in each process (the same: mapped before fork)
  float* slots[kRanks];    // "hybrid": kSlots chunks each, shared
  double medianSeconds[kRanks];
};

void barrier(Shared& shared) {
  const long generation = shared.generation.load();
  if (shared.arrived.fetch_add(1) == kRanks - 1) {
    shared.arrived.store(0);
    shared.generation.fetch_add(1);
    return;
  }
  while (shared.generation.load() == generation) sched_yield();
}

void sumInto(float* out, const float* const* sources, size_t count) {
  for (size_t i = 0; i < count; i += 8) {
    __m256 sum = _mm256_loadu_ps(out + i);
    for (int s = 0; s < kRanks - 1; ++s) sum = _mm256_add_ps(sum, _mm256_loadu_ps(sources[s] + i));
    _mm256_storeu_ps(out + i, sum);
  }
}

void copyWithKernel(bool write, pid_t pid, float* remote, float* local, size_t bytes) {
  iovec here{local, bytes};
  iovec there{remote, bytes};
  const ssize_t moved = write ? process_vm_writev(pid, &here, 1, &there, 1, 0)
                              : process_vm_readv(pid, &here, 1, &there, 1, 0);
  if (moved != static_cast<ssize_t>(bytes)) {
    std::perror("process_vm_readv/writev");
    std::_Exit(1);
  }
}

void runRank(Shared& shared, int rank, Mode mode, size_t count) {
  const bool kernel = mode != Mode::Mapped;
  float* mine = shared.buffers[rank];
  std::fill(mine, mine + count, 1.0f);
  const size_t chunk = kChunkBytes / sizeof(float);
  // Page-aligned like the peers' slices: `rep movsb` on AMD Zen is slow when the destination
  // lies a few bytes after the source modulo the page (src/algorithms/direct_single_copy.cc).
  auto* landing = static_cast<float*>(
      std::aligned_alloc(4096, static_cast<size_t>(kRanks - 1) * chunk * sizeof(float)));
  const size_t begin = count / kRanks * static_cast<size_t>(rank);
  const size_t end = begin + count / kRanks;
  std::vector<double> seconds;
  barrier(shared);
  for (int call = 0; call < kCalls; ++call) {
    barrier(shared);
    const auto start = std::chrono::steady_clock::now();
    for (size_t at = begin; at < end; at += chunk) {
      const size_t n = std::min(chunk, end - at);
      const float* sources[kRanks - 1];
      for (int step = 1; step < kRanks; ++step) {
        const int peer = (rank + step) % kRanks;
        if (kernel) {
          float* into = landing + static_cast<size_t>(step - 1) * chunk;
          copyWithKernel(false, shared.pids[peer], shared.buffers[peer] + at, into, n * 4);
          sources[step - 1] = into;
        } else {
          sources[step - 1] = shared.buffers[peer] + at;
        }
      }
      sumInto(mine + at, sources, n);
      if (mode == Mode::Hybrid) {
        const size_t chunkIndex = (at - begin) / chunk;
        const size_t slot = chunkIndex % kSlots * chunk;
        std::memcpy(shared.slots[rank] + slot, mine + at, n * 4);
        for (int step = 1; step < kRanks; ++step) {
          const int peer = (rank + step) % kRanks;
          const size_t theirs = count / kRanks * static_cast<size_t>(peer) + (at - begin);
          std::memcpy(mine + theirs, shared.slots[peer] + slot, n * 4);
        }
        continue;
      }
      for (int step = 1; step < kRanks; ++step) {
        const int peer = (rank + step) % kRanks;
        if (kernel) {
          copyWithKernel(true, shared.pids[peer], shared.buffers[peer] + at, mine + at, n * 4);
        } else {
          std::memcpy(shared.buffers[peer] + at, mine + at, n * 4);
        }
      }
    }
    barrier(shared);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  shared.medianSeconds[rank] = seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "shared";
  const Mode mode = name == "kernel" ? Mode::Kernel : name == "hybrid" ? Mode::Hybrid : Mode::Mapped;
  const bool kernel = mode != Mode::Mapped;
  const size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : size_t{32} << 20;
  const size_t count = bytes / sizeof(float) / (kRanks * 8) * (kRanks * 8);
  auto* shared = new (mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared;
  for (int rank = 0; rank < kRanks; ++rank) {
    // Shared mappings for "shared"; private ones, as a caller's arrays are, for "kernel".
    const int flags = (kernel ? MAP_PRIVATE : MAP_SHARED) | MAP_ANONYMOUS;
    void* buffer = mmap(nullptr, count * sizeof(float), PROT_READ | PROT_WRITE, flags, -1, 0);
    madvise(buffer, count * sizeof(float), MADV_HUGEPAGE);
    shared->buffers[rank] = static_cast<float*>(buffer);
    shared->slots[rank] = static_cast<float*>(mmap(nullptr, kSlots * kChunkBytes,
                                                   PROT_READ | PROT_WRITE,
                                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      while (shared->generation.load() == 0) sched_yield();  // every pid is known
      runRank(*shared, rank, mode, count);
      std::_Exit(0);
    }
    shared->pids[rank] = pid;
  }
  shared->generation.store(1);
  for (int rank = 0; rank < kRanks; ++rank) wait(nullptr);
  const double slowest = *std::max_element(shared->medianSeconds, shared->medianSeconds + kRanks);
  const double busbw = 2.0 * (kRanks - 1) / kRanks * count * sizeof(float) / slowest / 1e9;
  std::printf("%s: %zu B at %d ranks: median %.2f ms, busbw %.2f GB/s\n",
              mode == Mode::Kernel   ? "kernel copies"
              : mode == Mode::Hybrid ? "kernel reads, all-gather through slots"
                                     : "mapped buffers",
              count * sizeof(float), kRanks,
              slowest * 1e3, busbw);
  return 0;
}
