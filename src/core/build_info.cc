#include "ringcomm/build_info.h"

#include <string>

#include "codec/codec_f16c.h"
#include "reduce/dispatch.h"
#include "device/device_path.h"
#include "device/mps.h"
#include "transport/tcp/sealed_stream.h"
#include "transport/ucx/ucx_network.h"

namespace ringcomm {

BuildInfo buildInfo() {
  BuildInfo info;
#if defined(__clang__)
  info.compiler = __VERSION__;  // "Debian Clang 14.0.6" and the like: it names itself
#elif defined(__GNUC__)
  info.compiler = std::string("GCC ") + __VERSION__;
#endif
  info.reduceKernels = reduce::activeKernelName();
  info.halfCodec = codec::f16c::available() ? "f16c" : "portable";
  if (transport::wireProtectionBuilt()) {
    info.wireProtection = "AES-256-GCM, " + transport::wireProtectionLibrary();
  }
  info.ucx = transport::ucxHeaders();
  // The CUDA half: cuda_path.cc, or no_cuda.cc.
  const device::CudaBuild cuda = device::describeBuild();
  info.cuda = cuda.cuda;
  info.cudaArchitectures = cuda.architectures;
  info.cudaRuntimeVersion = cuda.runtimeVersion;
  info.cudaDriverVersion = cuda.driverVersion;
  return info;
}

UcxInfo ucxInfo() {
  UcxInfo info;
  info.version = transport::ucxVersion(&info.whyNot);
  if (!info.version.empty()) info.lanes = transport::ucxLanes();
  return info;
}

bool mpsRunning(const std::string& pipeDirectory) { return device::mpsRunning(pipeDirectory); }

}  // namespace ringcomm
