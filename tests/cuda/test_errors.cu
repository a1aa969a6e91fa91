// Bad arguments are refused before anything is enqueued, with a message that names the function;
// a failed launch becomes a ringcomm::Error that names the kernel. All on the host: the checks run
// before any CUDA call (the pointers below are never dereferenced), so no GPU is needed.
#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "check.h"
#include "cuda/elementwise.cuh"
#include "cuda/kernels.h"
#include "ringcomm/errors.h"
#include "support.h"

using namespace ringcomm;
using namespace ringcomm::cudatest;

namespace {

// Addresses that are never dereferenced: every call below throws before it would launch.
void* const kAligned = reinterpret_cast<void*>(uintptr_t{0x10000});
void* const kOddByte = reinterpret_cast<void*>(uintptr_t{0x10001});
float* const kFloats = static_cast<float*>(kAligned);
uint16_t* const kWire = reinterpret_cast<uint16_t*>(uintptr_t{0x20000});
uint8_t* const kBytes = reinterpret_cast<uint8_t*>(uintptr_t{0x30001});  // needs no alignment

template <typename Expected>
void expectThrows(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
  } catch (const Expected& error) {
    const std::string message = error.what();
    if (message.find(fragment) == std::string::npos) {
      fail("message \"" + message + "\" does not contain \"" + fragment + "\"");
    }
    return;
  } catch (const std::exception& error) {
    fail(std::string("threw the wrong type: ") + error.what());
  }
  fail("did not throw; expected a message containing \"" + fragment + "\"");
}

}  // namespace

TEST(hostBadArgumentsAreRefusedBeforeLaunching) {
  const auto sum = ReduceOp::Sum;
  const auto f32 = DataType::Float32;
  expectThrows<InvalidArgument>(
      [&] { cuda::reduce(nullptr, kAligned, kAligned, 10, f32, sum, nullptr); },
      "ringcomm::cuda::reduce: out is null");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduce(kAligned, kOddByte, kAligned, 10, f32, sum, nullptr); },
      "ringcomm::cuda::reduce: a is not aligned to its 4-byte elements (float32)");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduceInto(kAligned, kAligned, 10, static_cast<DataType>(99), sum, nullptr); },
      "ringcomm::cuda::reduce: unknown data type or op (dtype 99, op 0)");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduce(kAligned, kAligned, kAligned, 10, f32, static_cast<ReduceOp>(42), 0); },
      "unknown data type or op (dtype 6, op 42)");
  expectThrows<InvalidArgument>(
      [&] { cuda::finishAverage(kAligned, 10, f32, ReduceOp::Avg, 0, nullptr); },
      "ringcomm::cuda::finishAverage: divisor must be positive, got 0");
  expectThrows<InvalidArgument>(
      [&] { cuda::finishAverage(kAligned, 10, DataType::Bool, ReduceOp::Avg, 2, nullptr); },
      "ringcomm::cuda::finishAverage: avg of bool is not defined");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduce(kAligned, kOddByte, kAligned, 10, DataType::Int16, sum, nullptr); },
      "ringcomm::cuda::reduce: a is not aligned to its 2-byte elements (int16)");
  expectThrows<InvalidArgument>(
      [&] { cuda::finishAverage(kOddByte, 10, DataType::Int64, ReduceOp::Avg, 2, nullptr); },
      "ringcomm::cuda::finishAverage: buf is not aligned to its 8-byte elements (int64)");
  const void* const twoSources[] = {kAligned, kOddByte};
  expectThrows<InvalidArgument>(
      [&] { cuda::reduceMany(kAligned, twoSources, 1, 10, f32, sum, 1, nullptr); },
      "ringcomm::cuda::reduceMany: takes 2 to 32 sources, got 1");
  expectThrows<InvalidArgument>(
      [&] {
        cuda::reduceMany(kAligned, twoSources, cuda::kMaxReduceSources + 1, 10, f32, sum, 1,
                         nullptr);
      },
      "ringcomm::cuda::reduceMany: takes 2 to 32 sources, got 33");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduceMany(kAligned, twoSources, 2, 10, f32, sum, 1, nullptr); },
      "ringcomm::cuda::reduceMany: a source is not aligned to its 4-byte elements (float32)");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduceMany(kAligned, twoSources, 2, 10, DataType::Bool, ReduceOp::Avg, 2, 0); },
      "ringcomm::cuda::reduceMany: avg of bool is not defined");
  expectThrows<InvalidArgument>(
      [&] { cuda::reduceMany(kAligned, twoSources, 2, 10, f32, ReduceOp::Avg, 0, nullptr); },
      "ringcomm::cuda::reduceMany: divisor must be positive, got 0");
  expectThrows<InvalidArgument>(
      [&] { cuda::encode(kFloats, kWire, 10, Compression::None, 1.0, nullptr); },
      "ringcomm::cuda::encode: needs compression float16, bfloat16, int8 or fp8, got none");
  expectThrows<InvalidArgument>(
      [&] {
        cuda::decodeAccumulateEncode(kWire, kFloats, nullptr, 10, Compression::BFloat16, nullptr);
      },
      "ringcomm::cuda::decodeAccumulateEncode: wire is null");
  expectThrows<InvalidArgument>(
      [&] {
        cuda::roundToWire(kFloats, reinterpret_cast<uint16_t*>(kOddByte), 10, Compression::Float16,
                          nullptr);
      },
      "ringcomm::cuda::roundToWire: wire is not aligned to its 2-byte elements (float16)");
}

// The 8-bit block codecs through the same functions: every pointer checked, the wire's at any
// address.
TEST(hostBlock8BadArgumentsAreRefusedBeforeLaunching) {
  expectThrows<InvalidArgument>(
      [&] { cuda::encode(kFloats, nullptr, 10, Compression::Int8, 1.0, nullptr); },
      "ringcomm::cuda::encode: wire is null");
  expectThrows<InvalidArgument>(
      [&] { cuda::encode(nullptr, kBytes, 10, Compression::Float8, 0.5, nullptr); },
      "ringcomm::cuda::encode: source is null");
  expectThrows<InvalidArgument>(
      [&] {
        cuda::decode(kBytes, static_cast<float*>(kOddByte), 33, Compression::Float8, 1.0, nullptr);
      },
      "ringcomm::cuda::decode: destination is not aligned to its 4-byte elements (fp8)");
  expectThrows<InvalidArgument>(
      [&] { cuda::decodeAccumulate(kBytes, kFloats, 1, Compression::None, nullptr); },
      "ringcomm::cuda::decodeAccumulate: needs compression float16, bfloat16, int8 or fp8, got "
      "none");
  expectThrows<InvalidArgument>(
      [&] { cuda::decodeAccumulate(nullptr, kFloats, 1, Compression::Int8, nullptr); },
      "ringcomm::cuda::decodeAccumulate: wire is null");
  expectThrows<InvalidArgument>(
      [&] {
        cuda::decodeAccumulateEncode(nullptr, kFloats, kBytes, 32, Compression::Int8, nullptr);
      },
      "ringcomm::cuda::decodeAccumulateEncode: received is null");
  expectThrows<InvalidArgument>(
      [&] {
        cuda::decodeAccumulateEncode(kBytes, nullptr, kBytes, 32, Compression::Float8, nullptr);
      },
      "ringcomm::cuda::decodeAccumulateEncode: accumulator is null");
  expectThrows<InvalidArgument>(
      [&] { cuda::roundToWire(kFloats, kBytes, 5, static_cast<Compression>(9), nullptr); },
      "ringcomm::cuda::roundToWire: needs compression float16, bfloat16, int8 or fp8, got value 9");
  expectThrows<InvalidArgument>(
      [&] { cuda::roundToWire(kFloats, nullptr, 5, Compression::Int8, nullptr); },
      "ringcomm::cuda::roundToWire: wire is null");
  // The wire at an odd address: fine for the 8-bit codecs, not for the 16-bit formats.
  expectThrows<InvalidArgument>(
      [&] { cuda::encode(kFloats, kBytes, 10, Compression::BFloat16, 1.0, nullptr); },
      "ringcomm::cuda::encode: wire is not aligned to its 2-byte elements (bfloat16)");
}

// A count of zero reads no pointer and enqueues nothing; other ops' finishAverage is a no-op.
TEST(hostNothingToDoIsNotAnError) {
  cuda::reduce(nullptr, nullptr, nullptr, 0, DataType::Float16, ReduceOp::Max, nullptr);
  cuda::reduceInto(nullptr, nullptr, 0, static_cast<DataType>(99), ReduceOp::Sum, nullptr);
  cuda::finishAverage(nullptr, 100, DataType::Float32, ReduceOp::Sum, 0, nullptr);
  cuda::finishAverage(nullptr, 100, DataType::Bool, ReduceOp::Max, 0, nullptr);
  cuda::finishAverage(nullptr, 0, DataType::Float32, ReduceOp::Avg, 4, nullptr);
  const void* const nulls[] = {nullptr, nullptr, nullptr};
  cuda::reduceMany(nullptr, nulls, 3, 0, DataType::BFloat16, ReduceOp::Avg, 3, nullptr);
  cuda::encode(nullptr, nullptr, 0, Compression::Float16, 0.5, nullptr);
  cuda::decode(nullptr, nullptr, 0, Compression::BFloat16, 2.0, nullptr);
  cuda::decodeAccumulate(nullptr, nullptr, 0, Compression::Float16, nullptr);
  cuda::decodeAccumulateEncode(nullptr, nullptr, nullptr, 0, Compression::Float16, nullptr);
  cuda::roundToWire(nullptr, nullptr, 0, Compression::BFloat16, nullptr);
  cuda::encode(nullptr, nullptr, 0, Compression::Int8, 0.5, nullptr);
  cuda::decode(nullptr, nullptr, 0, Compression::Float8, 2.0, nullptr);
  cuda::decodeAccumulate(nullptr, nullptr, 0, Compression::Int8, nullptr);
  cuda::decodeAccumulateEncode(nullptr, nullptr, nullptr, 0, Compression::Float8, nullptr);
  cuda::roundToWire(nullptr, nullptr, 0, Compression::Int8, nullptr);
}

// A failed launch: an Error naming the kernel and the CUDA error.
TEST(hostLaunchFailuresNameTheKernel) {
  expectThrows<Error>(
      [] {
        cuda::detail::checkLaunch(cuda::detail::KernelName{"reduce", "float16", "sum"},
                                  cudaErrorInvalidConfiguration);
      },
      "ringcomm::cuda: launching kernel reduce<float16, sum> failed: "
      "cudaErrorInvalidConfiguration");
  expectThrows<Error>(
      [] {
        cuda::detail::checkLaunch(cuda::detail::KernelName{"encode", "bfloat16"},
                                  cudaErrorLaunchOutOfResources);
      },
      "launching kernel encode<bfloat16> failed: cudaErrorLaunchOutOfResources");
  expectThrows<Error>(
      [] {
        cuda::detail::checkLaunch(cuda::detail::KernelName{"encode", "fp8"},
                                  cudaErrorLaunchOutOfResources);
      },
      "launching kernel encode<fp8> failed: cudaErrorLaunchOutOfResources");
  cuda::detail::checkLaunch(cuda::detail::KernelName{"decode", "float16"}, cudaSuccess);
}
