// What this build of the core is, and what it chose on this machine at run time: for
// `python -m ringcomm info` and bug reports.
#pragma once

#include <string>

#include "ringcomm/export.h"

namespace ringcomm {

struct RINGCOMM_API BuildInfo {
  // The C++ compiler that built the core (its __VERSION__).
  std::string compiler;
  // RINGCOMM_BUILD_CUDA=ON: collectives take device memory.
  bool cuda = false;
  // The CMAKE_CUDA_ARCHITECTURES the kernels were compiled for ("80-real;90"); empty without CUDA.
  std::string cudaArchitectures;
  // cudaRuntimeGetVersion() and cudaDriverGetVersion() (1000 * major + 10 * minor); 0 without
  // CUDA, and the driver's 0 when no driver is installed.
  int cudaRuntimeVersion = 0;
  int cudaDriverVersion = 0;
  // The reduction kernels this CPU runs (src/reduce: "avx2" or "portable").
  std::string reduceKernels;
  // The fp16 wire codec this CPU runs (src/codec: "f16c" or "portable").
  std::string halfCodec;
  // What seals TCP links' records (RINGCOMM_WIRE_PROTECTION): "AES-256-GCM, OpenSSL 3.0.19 ...",
  // or "" in a build without OpenSSL.
  std::string wireProtection;
  // The UCX API the build was compiled against ("1.13"; RINGCOMM_TRANSPORT=ucx), "" without.
  // The library loads only when a communicator or ucxInfo() needs it.
  std::string ucx;
};

RINGCOMM_API BuildInfo buildInfo();

// UCX on this machine, for `ringcomm info`: the library that loads ("1.13.1"; "" with why not),
// and the lanes it offers by kind of peer ("same host: posix, sysv; other hosts: tcp (eth0);
// device memory: none"). Loads UCX.
struct RINGCOMM_API UcxInfo {
  std::string version;
  std::string lanes;
  std::string whyNot;
};
RINGCOMM_API UcxInfo ucxInfo();

// Whether a CUDA MPS control daemon listens in `pipeDirectory` (Config::mpsPipeDirectory), at
// its endpoint "control" there, which CUDA clients use: a socket of any type (driver 580 makes
// one that refuses stream connections), which must accept a connection (a daemon that quit
// leaves its socket behind), or a named pipe (older drivers), whose presence is taken as the
// answer. Never blocks, and sends the daemon nothing.
RINGCOMM_API bool mpsRunning(const std::string& pipeDirectory);

}  // namespace ringcomm
