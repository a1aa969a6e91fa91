// What the CUDA kernel tests share: the run's seed and random numbers, device arrays with guard
// bytes around them, bit-for-bit comparisons that say where and with which inputs they failed.
//
// The TEST / CHECK harness is tests/cpp/check.h; tests whose name starts with "host" need no GPU
// (main.cu runs only those with --host-only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "check.h"
#include "ringcomm/types.h"

namespace ringcomm::cudatest {

// --- Failing. ---

[[noreturn]] inline void fail(const std::string& message) {
  throw ringcomm::testing::CheckFailure{message};
}

// Collects the failures of a test's cases, so that one run shows the pattern (every misaligned
// case? one dtype?) rather than the first case alone; throws them together at the end.
class Failures {
 public:
  void add(const std::string& message) {
    if (count_ < kShown) text_ << "\n  " << message;
    ++count_;
  }
  void throwIfAny() const {
    if (count_ == 0) return;
    std::ostringstream all;
    all << count_ << " failing case(s)";
    if (count_ > kShown) all << " (the first " << kShown << " shown)";
    fail(all.str() + text_.str());
  }

 private:
  static constexpr int kShown = 8;
  int count_ = 0;
  std::ostringstream text_;
};

inline void checkCuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  std::ostringstream message;
  message << file << ":" << line << ": " << call << ": " << cudaGetErrorName(status) << " ("
          << cudaGetErrorString(status) << ")";
  fail(message.str());
}
#define CUDA_CHECK(call) ::ringcomm::cudatest::checkCuda((call), #call, __FILE__, __LINE__)

// --- Random inputs: fresh each run, reproducible from the printed seed. ---

// The run's seed (main.cu sets it from --seed or at random, and prints it).
uint64_t& runSeed();

// splitmix64.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t bound) { return static_cast<uint32_t>(next() % bound); }
  bool oneIn(uint32_t n) { return below(n) == 0; }
};

// A generator of its own for each test (stream), so that the tests' inputs do not depend on
// which other tests ran before them.
inline Rng rngFor(uint64_t stream) {
  return Rng{runSeed() ^ (stream * 0xD1B54A32D192ED03ull)};
}

// --- Bits. ---

template <typename T>
auto bitsOf(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    Bits bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  } else {
    return static_cast<std::make_unsigned_t<T>>(value);
  }
}

template <typename T>
std::string hexBits(T value) {
  std::ostringstream text;
  text << "0x" << std::hex << static_cast<uint64_t>(bitsOf(value));
  return text.str();
}

template <typename T>
bool sameBits(T a, T b) {
  return bitsOf(a) == bitsOf(b);
}

// Compares two arrays bit for bit; on a difference, adds one failure that gives the count of
// differing elements and the first few, with the inputs there (inputsAt(i) describes them).
template <typename T>
void expectSameBits(Failures& failures, const std::string& what, const std::vector<T>& got,
                    const std::vector<T>& want, const std::function<std::string(size_t)>& inputsAt,
                    const std::function<bool(size_t, T, T)>& acceptable = nullptr) {
  if (got.size() != want.size()) {
    failures.add(what + ": " + std::to_string(got.size()) + " elements, expected " +
                 std::to_string(want.size()));
    return;
  }
  size_t differing = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (sameBits(got[i], want[i])) continue;
    if (acceptable && acceptable(i, got[i], want[i])) continue;
    if (differing < 3) {
      first << " [" << i << "] got " << hexBits(got[i]) << " want " << hexBits(want[i]) << " ("
            << inputsAt(i) << ");";
    }
    ++differing;
  }
  if (differing > 0) {
    failures.add(what + ": " + std::to_string(differing) + " of " + std::to_string(got.size()) +
                 " elements differ:" + first.str());
  }
}

// --- Device memory. ---

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  // Waits for the stream; a kernel that faulted reports here.
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// Where a GuardedArray's bytes live. DeviceMemory: a device allocation, filled and copied on a
// stream. HostMemory: plain host memory, so that the host tests can put GuardedArray itself
// through its paces without a GPU (a guard that is never written must not read as a stray write).
class DeviceMemory {
 public:
  DeviceMemory(const Stream& stream) : stream_(stream) {}  // NOLINT: implicit, as tests pass a Stream
  void* allocate(size_t bytes) const {
    void* base = nullptr;
    CUDA_CHECK(cudaMalloc(&base, bytes));
    return base;
  }
  void release(void* base) const { cudaFree(base); }
  void fill(void* base, unsigned char byte, size_t bytes) const {
    CUDA_CHECK(cudaMemsetAsync(base, byte, bytes, stream_.get()));
  }
  // Synchronous copies: the host side of each may go out of scope when they return.
  void upload(void* to, const void* from, size_t bytes) const {
    CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream_.get()));
    stream_.sync();
  }
  void download(void* to, const void* from, size_t bytes) const {
    CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream_.get()));
    stream_.sync();
  }

 private:
  const Stream& stream_;
};

class HostMemory {
 public:
  void* allocate(size_t bytes) const { return ::operator new(bytes); }
  void release(void* base) const { ::operator delete(base); }
  void fill(void* base, unsigned char byte, size_t bytes) const { std::memset(base, byte, bytes); }
  void upload(void* to, const void* from, size_t bytes) const { std::memcpy(to, from, bytes); }
  void download(void* to, const void* from, size_t bytes) const { std::memcpy(to, from, bytes); }
};

// `count` elements starting `offset` elements into an allocation (offset 1..7 misaligns them),
// with kGuard elements on either side. Everything outside the elements holds 0xFF bytes from the
// moment the array exists, and download() checks it still does: a kernel that writes out of
// bounds is caught, and a test that never calls poison() or upload() is not mistaken for one.
template <typename T, typename Memory = DeviceMemory>
class GuardedArray {
 public:
  static constexpr size_t kGuard = 16;  // a multiple of 16 bytes, so offset 0 stays aligned
  static constexpr unsigned char kPoison = 0xFF;

  GuardedArray(size_t count, size_t offset, Memory memory)
      : count_(count), first_(kGuard + offset), total_(first_ + count + kGuard), memory_(memory) {
    base_ = memory_.allocate(total_ * sizeof(T));
    poison();
  }
  ~GuardedArray() { memory_.release(base_); }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;

  T* device() const { return static_cast<T*>(base_) + first_; }

  // Every byte 0xFF: elements the kernel does not write show as NaN or -1, not as old results.
  void poison() { memory_.fill(base_, kPoison, total_ * sizeof(T)); }

  void upload(const std::vector<T>& values) {
    std::vector<T> image(total_);
    std::memset(image.data(), kPoison, total_ * sizeof(T));
    std::memcpy(image.data() + first_, values.data(), count_ * sizeof(T));
    memory_.upload(base_, image.data(), total_ * sizeof(T));
  }

  // The elements, after checking the guards; adds a failure naming `what` if they were written.
  std::vector<T> download(Failures& failures, const std::string& what) const {
    std::vector<T> image(total_);
    memory_.download(image.data(), base_, total_ * sizeof(T));
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(image.data());
    const size_t endOfElements = (first_ + count_) * sizeof(T);
    for (size_t i = 0; i < total_ * sizeof(T); ++i) {
      if (i == first_ * sizeof(T)) i = endOfElements;  // skip the elements themselves
      if (i >= total_ * sizeof(T)) break;
      if (bytes[i] != kPoison) {
        const long long at = static_cast<long long>(i / sizeof(T)) - static_cast<long long>(first_);
        failures.add(what + ": wrote outside its array, at element " + std::to_string(at) +
                     " (count " + std::to_string(count_) + ")");
        break;
      }
    }
    return std::vector<T>(image.begin() + first_, image.begin() + first_ + count_);
  }

 private:
  size_t count_;
  size_t first_;
  size_t total_;
  Memory memory_;
  void* base_ = nullptr;
};

// Runs body(begin, end) over [0, n) split across the machine's cores (for exhaustive checks).
void parallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t)>& body);

// The counts every matrix runs: empty, one, shorter than a vector, a prime, a large odd count.
inline const std::vector<size_t>& matrixCounts() {
  static const std::vector<size_t> counts = {0, 1, 7, 1009, (size_t{1} << 20) + 3};
  return counts;
}

const char* opName(ReduceOp op);

}  // namespace ringcomm::cudatest
