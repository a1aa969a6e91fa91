// Runs the CUDA kernel tests (tests/cuda/test_*.cu).
//
//   ringcomm_cuda_tests [--seed N] [--host-only | --device-only] [name filter]
//
// Exit code 0 when every test passed, 1 when one failed, 77 when there is no CUDA device to run
// on (the automake convention for "skipped"; tests/test_cuda.py reports it as a skip). With
// --host-only only the tests that need no GPU run (names starting with "host"): the kernels'
// per-element code compiled for the host, the argument checks, the reference model. With
// --device-only only the others.
//
// Inputs are random and differ from run to run; the seed is printed first, and --seed N repeats
// a run exactly.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "support.h"

namespace ringcomm::cudatest {

uint64_t& runSeed() {
  static uint64_t seed = 0;
  return seed;
}

void parallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t)>& body) {
  const uint64_t workers = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t share = (n + workers - 1) / workers;
  std::vector<std::thread> threads;
  for (uint64_t begin = 0; begin < n; begin += share) {
    threads.emplace_back(body, begin, std::min(n, begin + share));
  }
  for (std::thread& thread : threads) thread.join();
}

const char* opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Adasum: return "adasum";
  }
  return "?";
}

}  // namespace ringcomm::cudatest

namespace {

constexpr int kExitSkipped = 77;

bool isHostTest(const char* name) {
  return std::strncmp(name, "host", 4) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using ringcomm::cudatest::runSeed;
  bool hostOnly = false;
  bool deviceOnly = false;
  const char* filter = nullptr;
  runSeed() = (static_cast<uint64_t>(std::random_device{}()) << 32) ^
              static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--host-only") == 0) {
      hostOnly = true;
    } else if (std::strcmp(argv[i], "--device-only") == 0) {
      deviceOnly = true;
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      runSeed() = std::strtoull(argv[++i], nullptr, 0);
    } else {
      filter = argv[i];
    }
  }
  std::cout << "seed " << runSeed() << " (repeat with --seed " << runSeed() << ")\n";

  if (!hostOnly) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      std::cout << "no CUDA device ("
                << (status != cudaSuccess ? cudaGetErrorString(status) : "none found") << ")\n";
      return kExitSkipped;
    }
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess) {
      std::cout << "device 0: " << properties.name << " (sm_" << properties.major
                << properties.minor << ")\n";
    }
  }

  int passed = 0;
  int failed = 0;
  for (const auto& test : ringcomm::testing::registry()) {
    if (hostOnly && !isHostTest(test.name)) continue;
    if (deviceOnly && isHostTest(test.name)) continue;
    if (filter != nullptr && std::strstr(test.name, filter) == nullptr) continue;
    const auto start = std::chrono::steady_clock::now();
    try {
      test.body();
      ++passed;
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      std::cout << "ok     " << test.name << " (" << took.count() << " s)\n" << std::flush;
    } catch (const ringcomm::testing::CheckFailure& failure) {
      ++failed;
      std::cout << "FAILED " << test.name << ": " << failure.message << "\n" << std::flush;
    } catch (const std::exception& error) {
      ++failed;
      std::cout << "FAILED " << test.name << ": exception: " << error.what() << "\n" << std::flush;
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
