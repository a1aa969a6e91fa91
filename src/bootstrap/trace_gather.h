// Every rank's events to RINGCOMM_TRACE's file, through the rendezvous store: called at the
// shutdown of the communicator that claimed the file (trace::claimTraceFile, common/trace.h).
#pragma once

#include <chrono>

namespace ringcomm {

class Store;

namespace trace {

// Each rank puts its part in `store`, rank 0 waits up to `wait` for them and writes the file with
// what came (naming the ranks missing). A rank that cannot reach the store writes its part alone
// to "<file>.rank<r>.json".
void writeTrace(Store& store, int rank, int size, std::chrono::milliseconds wait);

}  // namespace trace
}  // namespace ringcomm
