#include "ringcomm/build_info.h"

#include <string>
#include <sys/stat.h>

#include "codec/codec_f16c.h"
#include "reduce/dispatch.h"
#include "transport/cuda/device_path.h"

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
  device::describeBuild(info);  // the CUDA half: cuda_path.cc, or no_cuda.cc
  return info;
}

bool mpsRunning(const std::string& pipeDirectory) {
  struct stat info {};
  return stat((pipeDirectory + "/control").c_str(), &info) == 0 && S_ISFIFO(info.st_mode);
}

}  // namespace ringcomm
