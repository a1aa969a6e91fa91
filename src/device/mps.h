// Whether a CUDA MPS control daemon listens in `pipeDirectory` (Config::mpsPipeDirectory), at
// its endpoint "control" there: the IPC all-reduce asks before ranks share a GPU (ipc.h), and
// the public ringcomm::mpsRunning (ringcomm/build_info.h) answers with it. Never blocks, and
// sends the daemon nothing.
#pragma once

#include <string>

namespace ringcomm::device {

bool mpsRunning(const std::string& pipeDirectory);

}  // namespace ringcomm::device
