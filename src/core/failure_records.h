// What the ranks of a communicator record when they fail, and how a failing rank follows them
// back to where the failure started (core/communicator_health.cc's failWith and its in-flight
// check).
//
// "rank 3 closed its connection" or "timed out waiting for rank 3" says little when rank 3 was
// itself stuck behind rank 5, which failed because rank 2 died: over TCP at 6 or 8 ranks each
// survivor saw only its neighbour fail, and none named rank 2 (tests/test_fault_injection.py).
// So every failing rank records why it failed and which peer it blamed, before it closes anything;
// a rank that fails follows the records, rank to rank, to the one that left none (or blamed
// nobody), and its message leads to the culprit.
//
// Where: in the rank's own mailbox (core/membership.h), which is there exactly while the rank
// lives, whatever else died (the job's store is served by rank 0 under mpirun and env://, and may
// lie across the link that broke); and in the job's store too, which keeps it after the rank has
// left, written on a thread of its own so that a dead store does not hold the rank up. A
// communicator of one rank has no mailbox: its records go to the store alone.
//
// Every record carries a MAC under the job's secret, checked where it is read: the job's store
// may be one that proves nothing (torch's TCPStore under init_process_group, torchrun's agent
// store), where anyone who reaches it could otherwise write "rank 2 reported: ..." or a
// collective that turns the error into a MismatchError. A record without a valid MAC is ignored
// (and logged once), as if the rank had recorded nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "core/membership.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

namespace ringcomm {

class FailureRecords {
 public:
  // `membership`: none for a communicator of one rank. `diedWithoutAborting`: whether a peer on
  // this host is gone without having recorded anything (its shared-memory segment says so).
  // `secret`: the job's, which every record's MAC is keyed with.
  FailureRecords(int rank, std::shared_ptr<Store> store, Membership* membership,
                 std::string secret, std::function<bool(int peer)> diedWithoutAborting);
  ~FailureRecords();
  FailureRecords(const FailureRecords&) = delete;
  FailureRecords& operator=(const FailureRecords&) = delete;

  // Records why this rank failed, the peer it blamed (-1: none), and whether ranks disagreed on
  // a collective (a MismatchError, which the ranks that read it raise too).
  void record(const std::string& reason, int blamed, bool mismatch);

  // `error`'s message followed by what the ranks along its chain recorded; sets `mismatch` when
  // one of them failed on ranks that disagreed. Waits at most a second for the records.
  std::string traced(const PeerError& error, bool& mismatch);

  // The in-flight check of a collective `op` that has waited a while for `peer`: publishes what
  // this rank runs (once: `published`) and reads what the peer runs; the description of the
  // peer's collective when it runs another one under the same number, else nothing (the peer
  // runs the same, is behind or ahead, or has not waited this long). Each call bounded, as the
  // store may lie across the very link waited on.
  std::optional<std::string> otherCollectiveOf(const Operation& op, bool& published, int peer);

  // Waits (bounded) until the record has reached the job's store: before a rank leaves.
  void finish();

 private:
  // "sequence kind signature count\n<description>": what the in-flight check compares.
  static std::string inflightRecord(const Operation& op);
  // `text` with its MAC, as stored under `key`; and back: the text, or nothing where the MAC
  // is missing or wrong (a record no rank of this job wrote).
  Bytes sealed(const std::string& key, const std::string& text) const;
  std::optional<std::string> opened(const std::string& key, const Bytes& value) const;
  bool publishInFlight(const std::string& record);
  std::optional<std::string> inFlightOf(int peer);

  struct Recorded {
    int blamed = -1;
    bool mismatch = false;
    std::string reason;
  };
  // `peer`'s record, looked for until `deadline`, or until its mailbox refuses (then `gone` is
  // set: a process that is gone records nothing more).
  std::optional<Recorded> recordOf(int peer, Clock::time_point deadline, bool& gone);

  const int rank_;
  const std::shared_ptr<Store> store_;
  Membership* const membership_;
  const std::string secret_;
  mutable std::atomic<bool> forgeryLogged_{false};
  const std::function<bool(int)> diedWithoutAborting_;
  std::atomic<bool> recorded_{true};  // this rank's own record was taken (else none can be read)
  std::thread reporter_;             // record()'s write into the job's store
};

}  // namespace ringcomm
