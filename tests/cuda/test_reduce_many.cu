// reduceMany (src/cuda/reduce_kernels.cu), the IPC all-reduce's single pass over every rank's
// slice, against the CPU's reduce::reduceMany followed by finishAverage, bit for bit: every type,
// op and source count from 2 to kMaxReduceSources, at the counts of matrixCounts().
//
// On the device: sources at the same alignment (vectorised), at the same misalignment (a scalar
// head), and at mixed misalignments (element by element), the output separate and the output
// being the first or the last source (in place, as when a caller reduces into its own input).
// Outputs are poisoned and guarded (support.h), so an element left unwritten or written out of
// bounds shows. The "host" tests run the kernel's per-element code (combineMany, then divide)
// on the CPU, which needs no GPU.
#include <cstddef>
#include <cstdint>
#include <memory>
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

const int kSourceCounts[] = {2, 3, 4, 5, 8, 13, cuda::kMaxReduceSources};

// The output: its own array, or one of the sources.
enum class Target { Separate, FirstSource, LastSource };

const char* targetName(Target target) {
  switch (target) {
    case Target::Separate: return "out separate";
    case Target::FirstSource: return "out = first source";
    case Target::LastSource: return "out = last source";
  }
  return "?";
}

// Where the arrays start, in elements past a 256-byte aligned allocation.
struct Layout {
  const char* name;
  size_t out;
  size_t (*source)(int k);
};

const Layout kLayouts[] = {
    {"aligned", 0, [](int) { return size_t{0}; }},
    {"all at +3", 3, [](int) { return size_t{3}; }},
    {"mixed", 1, [](int k) { return static_cast<size_t>(k % 4); }},
};

template <typename Model>
std::vector<std::vector<typename Model::Storage>> randomSources(Rng& rng, int n, size_t count) {
  // Filled in pairs (the model's fill takes two); an odd count drops the last one's partner.
  using Array = std::vector<typename Model::Storage>;
  std::vector<Array> sources(n + 1, Array(count));
  for (int k = 0; k < n; k += 2) Model::fill(rng, sources[k], sources[k + 1]);
  sources.resize(n);
  return sources;
}

template <typename T>
std::vector<const void*> pointersOf(const std::vector<std::vector<T>>& sources) {
  std::vector<const void*> pointers;
  for (const auto& source : sources) pointers.push_back(source.data());
  return pointers;
}

template <typename T>
std::vector<T> cpuReduceMany(const std::vector<std::vector<T>>& sources, size_t count,
                             DataType type, ReduceOp op, int divisor) {
  std::vector<T> out(count);
  const std::vector<const void*> pointers = pointersOf(sources);
  reduce::reduceMany(out.data(), pointers.data(), static_cast<int>(sources.size()), count, type,
                     op);
  reduce::finishAverage(out.data(), count, type, op, divisor);
  return out;
}

// The kernel's per-element code, run on the host.
template <typename Element>
std::vector<typename Element::Storage> hostReduceMany(
    const std::vector<std::vector<typename Element::Storage>>& sources, size_t count, ReduceOp op,
    int divisor) {
  using T = typename Element::Storage;
  std::vector<const T*> pointers;
  for (const auto& source : sources) pointers.push_back(source.data());
  std::vector<T> out(count);
  withKernelOp(op, [&](auto operation) {
    using Op = decltype(operation);
    for (size_t i = 0; i < count; ++i) {
      out[i] = cuda::detail::combineMany<Element, Op>(pointers.data(),
                                                      static_cast<int>(pointers.size()), i);
      if (op == ReduceOp::Avg) {
        out[i] = cuda::detail::divide<Element>(out[i],
                                               static_cast<typename Element::Divisor>(divisor));
      }
    }
  });
  return out;
}

// The kernel on the device, in one layout and target.
template <typename T>
std::vector<T> deviceReduceMany(Failures& failures, const std::string& label,
                                const std::vector<std::vector<T>>& sources, size_t count,
                                DataType type, ReduceOp op, int divisor, const Layout& layout,
                                Target target) {
  Stream stream;
  const int n = static_cast<int>(sources.size());
  std::vector<std::unique_ptr<GuardedArray<T>>> arrays;
  std::vector<const void*> pointers;
  for (int k = 0; k < n; ++k) {
    arrays.push_back(std::make_unique<GuardedArray<T>>(count, layout.source(k), stream));
    arrays.back()->upload(sources[k]);
    pointers.push_back(arrays.back()->device());
  }
  GuardedArray<T> separate(count, layout.out, stream);
  GuardedArray<T>* out = target == Target::Separate     ? &separate
                         : target == Target::FirstSource ? arrays.front().get()
                                                         : arrays.back().get();
  cuda::reduceMany(out->device(), pointers.data(), n, count, type, op, divisor, stream.get());
  stream.sync();
  std::vector<T> got = out->download(failures, label);
  if (target == Target::Separate && count <= 100000) {
    for (int k = 0; k < n; ++k) {
      expectSameBits(failures, label + ": source " + std::to_string(k) + " changed",
                     arrays[k]->download(failures, label), sources[k],
                     [](size_t) { return std::string(); });
    }
  }
  return got;
}

enum class Backend { Device, Host };

template <typename Model, typename Element>
void checkReduceMany(Backend backend) {
  using T = typename Model::Storage;
  Rng rng = rngFor(7000 + static_cast<uint64_t>(Model::kType) * 2 + (backend == Backend::Host));
  Failures failures;
  for (int n : kSourceCounts) {
    for (size_t count : matrixCounts()) {
      // The large count (milliseconds a case) at a few source counts only; none on the host.
      const bool large = count > 100000;
      if (large && (backend == Backend::Host || (n != 2 && n != 4 && n != kSourceCounts[6]))) {
        continue;
      }
      const auto sources = randomSources<Model>(rng, n, count);
      auto inputsAt = [&](size_t i) {
        std::string text;
        for (int k = 0; k < n && k < 4; ++k) {
          text += (k ? " " : "") + Model::describe(sources[k][i]);
        }
        return text + (n > 4 ? " ..." : "");
      };
      for (ReduceOp op : kReduceOps) {
        if (op == ReduceOp::Avg && !Model::kHasAverage) continue;
        const int divisor = n;  // as the IPC all-reduce divides: by the rank count
        const std::string label = std::string(Element::kName) + " " + opName(op) + " of " +
                                  std::to_string(n) + " sources, count " + std::to_string(count);
        const std::vector<T> cpu = cpuReduceMany(sources, count, Model::kType, op, divisor);
        if (backend == Backend::Host) {
          expectSameBits(failures, "kernel element code on the host, " + label,
                         hostReduceMany<Element>(sources, count, op, divisor), cpu, inputsAt);
          continue;
        }
        for (const Layout& layout : kLayouts) {
          for (Target target : {Target::Separate, Target::FirstSource, Target::LastSource}) {
            // In place only in the aligned layout: the others add nothing to it.
            if (target != Target::Separate && layout.out != 0) continue;
            const std::string what = label + ", " + layout.name + ", " + targetName(target);
            expectSameBits(failures, what,
                           deviceReduceMany(failures, what, sources, count, Model::kType, op,
                                            divisor, layout, target),
                           cpu, inputsAt);
          }
        }
      }
    }
  }
  failures.throwIfAny();
}

}  // namespace

namespace detail = ringcomm::cuda::detail;

TEST(reduceManyInt8) {
  checkReduceMany<model::Int8Model, detail::Int8Element>(Backend::Device);
}
TEST(reduceManyUint8) {
  checkReduceMany<model::Uint8Model, detail::Uint8Element>(Backend::Device);
}
TEST(reduceManyInt16) {
  checkReduceMany<model::Int16Model, detail::Int16Element>(Backend::Device);
}
TEST(reduceManyInt32) {
  checkReduceMany<model::Int32Model, detail::Int32Element>(Backend::Device);
}
TEST(reduceManyInt64) {
  checkReduceMany<model::Int64Model, detail::Int64Element>(Backend::Device);
}
TEST(reduceManyFloat16) {
  checkReduceMany<model::Float16Model, detail::Float16Element>(Backend::Device);
}
TEST(reduceManyBFloat16) {
  checkReduceMany<model::BFloat16Model, detail::BFloat16Element>(Backend::Device);
}
TEST(reduceManyFloat32) {
  checkReduceMany<model::Float32Model, detail::Float32Element>(Backend::Device);
}
TEST(reduceManyFloat64) {
  checkReduceMany<model::Float64Model, detail::Float64Element>(Backend::Device);
}
TEST(reduceManyBool) {
  checkReduceMany<model::BoolModel, detail::BoolElement>(Backend::Device);
}

TEST(hostReduceManyInt8) {
  checkReduceMany<model::Int8Model, detail::Int8Element>(Backend::Host);
}
TEST(hostReduceManyUint8) {
  checkReduceMany<model::Uint8Model, detail::Uint8Element>(Backend::Host);
}
TEST(hostReduceManyInt16) {
  checkReduceMany<model::Int16Model, detail::Int16Element>(Backend::Host);
}
TEST(hostReduceManyInt32) {
  checkReduceMany<model::Int32Model, detail::Int32Element>(Backend::Host);
}
TEST(hostReduceManyInt64) {
  checkReduceMany<model::Int64Model, detail::Int64Element>(Backend::Host);
}
TEST(hostReduceManyFloat16) {
  checkReduceMany<model::Float16Model, detail::Float16Element>(Backend::Host);
}
TEST(hostReduceManyBFloat16) {
  checkReduceMany<model::BFloat16Model, detail::BFloat16Element>(Backend::Host);
}
TEST(hostReduceManyFloat32) {
  checkReduceMany<model::Float32Model, detail::Float32Element>(Backend::Host);
}
TEST(hostReduceManyFloat64) {
  checkReduceMany<model::Float64Model, detail::Float64Element>(Backend::Host);
}
TEST(hostReduceManyBool) {
  checkReduceMany<model::BoolModel, detail::BoolElement>(Backend::Host);
}
