// The reduction kernels (src/cuda/reduce_kernels.cu) against the CPU kernels (src/reduce, compiled
// into this test), bit for bit, and against the model of reference.h (float64 / exact integers).
//
// Each type's test runs every op on every count of matrixCounts(), with the three arrays at the
// same misalignment of 0..7 elements (the kernel then vectorises after a scalar head) and at
// mixed misalignments (it cannot, and goes element by element), in three forms: out separate,
// out = a (reduceInto), out = b. Avg is the reduction followed by finishAverage with a random
// divisor, as the schedules do it. Outputs are poisoned before each launch and guarded on both
// sides (support.h), so an element left unwritten or written out of bounds shows.
//
// The "host" tests put the kernels' per-element code (element_ops.cuh, compiled for the host)
// through the same comparisons, which needs no GPU.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "check.h"
#include "kernel_ops.cuh"
#include "cuda/element_ops.cuh"
#include "cuda/kernels.h"
#include "reduce/reduce.h"
#include "reference.h"
#include "support.h"

using namespace ringcomm;
using namespace ringcomm::cudatest;

namespace {

// Element offsets of out, a and b from a 256-byte aligned allocation.
struct Placement {
  size_t out;
  size_t a;
  size_t b;
};

std::vector<Placement> placementsFor(size_t count) {
  // The large count, where each case costs milliseconds: aligned, misaligned alike, mixed.
  if (count > 100000) return {{0, 0, 0}, {3, 3, 3}, {0, 1, 2}};
  std::vector<Placement> placements;
  for (size_t k = 0; k < 8; ++k) placements.push_back({k, k, k});
  placements.push_back({0, 1, 2});
  placements.push_back({5, 0, 0});
  placements.push_back({7, 7, 3});
  return placements;
}

enum class Form { Separate, IntoA, IntoB };
const char* formName(Form form) {
  switch (form) {
    case Form::Separate: return "reduce(out, a, b)";
    case Form::IntoA: return "reduceInto(a, b)";
    case Form::IntoB: return "reduce(b, a, b)";
  }
  return "?";
}

// Divisors for Avg: world sizes, and one above 127 (int8 elements promote to int to divide).
int randomDivisor(Rng& rng) {
  const int divisors[] = {1, 2, 3, 4, 5, 7, 8, 16, 200};
  return divisors[rng.below(sizeof divisors / sizeof divisors[0])];
}

// The CPU's answer: reduceMany into a separate buffer (it allows dst to alias srcs[0] only), then
// finishAverage.
template <typename T>
std::vector<T> cpuReduce(const std::vector<T>& a, const std::vector<T>& b, DataType type,
                         ReduceOp op, int divisor) {
  std::vector<T> out(a.size());
  const void* sources[2] = {a.data(), b.data()};
  reduce::reduceMany(out.data(), sources, 2, a.size(), type, op);
  reduce::finishAverage(out.data(), out.size(), type, op, divisor);
  return out;
}

template <typename Model>
std::vector<typename Model::Storage> modelReduce(const std::vector<typename Model::Storage>& a,
                                                 const std::vector<typename Model::Storage>& b,
                                                 ReduceOp op, int divisor) {
  std::vector<typename Model::Storage> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    out[i] = Model::apply(op, a[i], b[i]);
    if constexpr (Model::kHasAverage) {
      if (op == ReduceOp::Avg) out[i] = Model::divide(out[i], divisor);
    }
  }
  return out;
}

// The kernels' per-element code, run on the host.
template <typename Element>
std::vector<typename Element::Storage> hostReduce(const std::vector<typename Element::Storage>& a,
                                                  const std::vector<typename Element::Storage>& b,
                                                  ReduceOp op, int divisor) {
  std::vector<typename Element::Storage> out(a.size());
  withKernelOp(op, [&](auto operation) {
    using Op = decltype(operation);
    for (size_t i = 0; i < a.size(); ++i) out[i] = cuda::detail::combine<Element, Op>(a[i], b[i]);
  });
  if (op == ReduceOp::Avg) {
    for (auto& value : out) {
      value = cuda::detail::divide<Element>(value, static_cast<typename Element::Divisor>(divisor));
    }
  }
  return out;
}

// The kernels on the device, in one form and placement.
template <typename T>
std::vector<T> deviceReduce(Failures& failures, const std::string& label, const std::vector<T>& a,
                            const std::vector<T>& b, DataType type, ReduceOp op, int divisor,
                            Form form, const Placement& at) {
  const size_t count = a.size();
  Stream stream;
  GuardedArray<T> deviceA(count, at.a, stream);
  GuardedArray<T> deviceB(count, at.b, stream);
  GuardedArray<T> deviceOut(count, at.out, stream);
  deviceA.upload(a);
  deviceB.upload(b);
  deviceOut.poison();
  GuardedArray<T>* result = &deviceOut;
  switch (form) {
    case Form::Separate:
      cuda::reduce(deviceOut.device(), deviceA.device(), deviceB.device(), count, type, op,
                   stream.get());
      break;
    case Form::IntoA:
      cuda::reduceInto(deviceA.device(), deviceB.device(), count, type, op, stream.get());
      result = &deviceA;
      break;
    case Form::IntoB:
      cuda::reduce(deviceB.device(), deviceA.device(), deviceB.device(), count, type, op,
                   stream.get());
      result = &deviceB;
      break;
  }
  cuda::finishAverage(result->device(), count, type, op, divisor, stream.get());
  stream.sync();
  std::vector<T> got = result->download(failures, label);
  if (form == Form::Separate && count <= 100000) {
    auto unchanged = [](size_t) { return std::string(); };
    expectSameBits(failures, label + ": input a changed", deviceA.download(failures, label), a,
                   unchanged);
    expectSameBits(failures, label + ": input b changed", deviceB.download(failures, label), b,
                   unchanged);
  }
  return got;
}

enum class Backend { Device, Host };

template <typename Model, typename Element>
void checkReduce(Backend backend) {
  using T = typename Model::Storage;
  static_assert(std::is_same_v<T, typename Element::Storage>, "model and element disagree");
  Rng rng = rngFor(static_cast<uint64_t>(Model::kType) * 2 + (backend == Backend::Host));
  Failures failures;
  for (size_t count : matrixCounts()) {
    const std::vector<Placement> placements =
        backend == Backend::Device ? placementsFor(count) : std::vector<Placement>{{0, 0, 0}};
    for (const Placement& at : placements) {
      std::vector<T> a(count);
      std::vector<T> b(count);
      Model::fill(rng, a, b);
      auto inputsAt = [&](size_t i) {
        return "a=" + Model::describe(a[i]) + " b=" + Model::describe(b[i]);
      };
      for (ReduceOp op : kReduceOps) {
        if (op == ReduceOp::Avg && !Model::kHasAverage) continue;  // bool: test_errors.cu
        const int divisor = randomDivisor(rng);
        const std::string label =
            std::string(Element::kName) + " " + opName(op) + " count " + std::to_string(count) +
            " offsets (out " + std::to_string(at.out) + ", a " + std::to_string(at.a) + ", b " +
            std::to_string(at.b) + ")" +
            (op == ReduceOp::Avg ? " divisor " + std::to_string(divisor) : std::string());
        const std::vector<T> cpu = cpuReduce(a, b, Model::kType, op, divisor);
        // The model and the CPU kernels must agree first: otherwise it is the reference (or the
        // CPU) that is wrong, and a kernel matching one of them proves little.
        expectSameBits(failures, "model vs CPU kernels, " + label,
                       modelReduce<Model>(a, b, op, divisor), cpu, inputsAt);
        if (backend == Backend::Host) {
          expectSameBits(failures, "kernel element code on the host, " + label,
                         hostReduce<Element>(a, b, op, divisor), cpu, inputsAt);
          continue;
        }
        for (Form form : {Form::Separate, Form::IntoA, Form::IntoB}) {
          const std::string what = std::string(formName(form)) + ", " + label;
          expectSameBits(failures, what,
                         deviceReduce(failures, what, a, b, Model::kType, op, divisor, form, at),
                         cpu, inputsAt);
        }
      }
    }
  }
  failures.throwIfAny();
}

}  // namespace

namespace detail = ringcomm::cuda::detail;

TEST(reduceInt8) {
  checkReduce<model::Int8Model, detail::Int8Element>(Backend::Device);
}
TEST(reduceUint8) {
  checkReduce<model::Uint8Model, detail::Uint8Element>(Backend::Device);
}
TEST(reduceInt16) {
  checkReduce<model::Int16Model, detail::Int16Element>(Backend::Device);
}
TEST(reduceInt32) {
  checkReduce<model::Int32Model, detail::Int32Element>(Backend::Device);
}
TEST(reduceInt64) {
  checkReduce<model::Int64Model, detail::Int64Element>(Backend::Device);
}
TEST(reduceFloat16) {
  checkReduce<model::Float16Model, detail::Float16Element>(Backend::Device);
}
TEST(reduceBFloat16) {
  checkReduce<model::BFloat16Model, detail::BFloat16Element>(Backend::Device);
}
TEST(reduceFloat32) {
  checkReduce<model::Float32Model, detail::Float32Element>(Backend::Device);
}
TEST(reduceFloat64) {
  checkReduce<model::Float64Model, detail::Float64Element>(Backend::Device);
}
TEST(reduceBool) {
  checkReduce<model::BoolModel, detail::BoolElement>(Backend::Device);
}

TEST(hostReduceInt8) {
  checkReduce<model::Int8Model, detail::Int8Element>(Backend::Host);
}
TEST(hostReduceUint8) {
  checkReduce<model::Uint8Model, detail::Uint8Element>(Backend::Host);
}
TEST(hostReduceInt16) {
  checkReduce<model::Int16Model, detail::Int16Element>(Backend::Host);
}
TEST(hostReduceInt32) {
  checkReduce<model::Int32Model, detail::Int32Element>(Backend::Host);
}
TEST(hostReduceInt64) {
  checkReduce<model::Int64Model, detail::Int64Element>(Backend::Host);
}
TEST(hostReduceFloat16) {
  checkReduce<model::Float16Model, detail::Float16Element>(Backend::Host);
}
TEST(hostReduceBFloat16) {
  checkReduce<model::BFloat16Model, detail::BFloat16Element>(Backend::Host);
}
TEST(hostReduceFloat32) {
  checkReduce<model::Float32Model, detail::Float32Element>(Backend::Host);
}
TEST(hostReduceFloat64) {
  checkReduce<model::Float64Model, detail::Float64Element>(Backend::Host);
}
TEST(hostReduceBool) {
  checkReduce<model::BoolModel, detail::BoolElement>(Backend::Host);
}

// The legacy default stream (0) is a stream like any other.
TEST(reduceOnTheDefaultStream) {
  const size_t count = 1009;
  std::vector<float> a(count);
  std::vector<float> b(count);
  Rng rng = rngFor(1000);
  model::Float32Model::fill(rng, a, b);
  Stream copies;
  GuardedArray<float> deviceA(count, 0, copies);
  GuardedArray<float> deviceB(count, 0, copies);
  deviceA.upload(a);
  deviceB.upload(b);
  cuda::reduceInto(deviceA.device(), deviceB.device(), count, DataType::Float32, ReduceOp::Sum,
                   nullptr);
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  Failures failures;
  expectSameBits(failures, "float32 sum on stream 0", deviceA.download(failures, "a"),
                 cpuReduce(a, b, DataType::Float32, ReduceOp::Sum, 1),
                 [](size_t) { return std::string(); });
  failures.throwIfAny();
}
