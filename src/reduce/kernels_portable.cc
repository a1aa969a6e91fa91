// The kernels compiled for the baseline instruction set: what runs on CPUs without AVX2/F16C,
// on aarch64, and in tests that force it to check the vector variant against.
#include "reduce/dispatch.h"
#include "reduce/loops.h"

namespace ringcomm::reduce {

const KernelSet kPortableKernels =
    kernelSetOf<SoftwareHalfCodec, SoftwareBfloat16Codec>("portable");

}  // namespace ringcomm::reduce
