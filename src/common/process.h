// Whether a process on this host is still running.
#pragma once

namespace ringcomm {

// True when process `pid` has exited: it is gone (kill() says ESRCH), or it is a zombie that its
// parent has not reaped yet. kill(pid, 0) alone succeeds for a zombie, so survivors took a rank
// killed between collectives for alive until its launcher reaped it (issue 33: they waited out
// their whole timeout where they name it in 0.1 s once it is reaped).
bool processGone(int pid);

}  // namespace ringcomm
