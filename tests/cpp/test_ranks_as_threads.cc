// Many ranks in one process: each rank a thread with its own communicator, meeting through a
// TcpStoreServer on loopback and talking over shared memory or TCP, exactly as separate processes
// would (the shared-memory segments are mapped once per rank, the TCP links are real sockets).
// In one process the sanitizers see every rank at once: tests/test_sanitizers.py runs these under
// ASan + UBSan and under TSan, where the engine's threads, the callers' threads and the failure
// paths (a rank that aborts, one that shuts down while others wait) race for real.
//
// The results are checked exactly: inputs are small integers, whose sums are exact in any order.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "ringcomm/communicator.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "ringcomm/options.h"
#include "ringcomm/store.h"
#include "ringcomm/types.h"

using namespace ringcomm;
using namespace std::chrono_literals;

namespace {

const std::string kRanksSecret = "ranks-as-threads test secret";

Config configFor(TransportKind transport, std::chrono::milliseconds timeout = 60s) {
  Config config;
  config.transport = transport;
  config.secret = kRanksSecret;
  config.timeout = timeout;
  config.stallWarning = 0ms;
  // Small rings and slots, so that multi-segment paths (wrap-around, several rounds) run with
  // small messages and the test stays fast under the sanitizers.
  config.shmRingBytes = 64 * 1024;
  config.shmSlotBytes = 64 * 1024;
  config.segmentBytes = 16 * 1024;
  return config;
}

// Runs body(rank, communicator) on `size` threads, each rank with its own communicator and store
// client. The first failure of any rank is rethrown here, after every thread has ended.
// `configOf(rank)`: each rank's configuration (its host, in the tests of several hosts).
void runRanks(int size, const std::function<Config(int)>& configOf,
              const std::function<void(int, Communicator&)>& body, const std::string& scope) {
  TcpStoreServer server("127.0.0.1", 0, kRanksSecret);
  std::mutex mutex;
  std::exception_ptr failure;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), 30s, kRanksSecret);
        std::shared_ptr<Communicator> comm =
            Communicator::createInScope(store, scope, rank, size, configOf(rank));
        body(rank, *comm);
        comm->shutdown();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  server.stop();
  if (failure) std::rethrow_exception(failure);
}

void runRanks(int size, const Config& config, const std::function<void(int, Communicator&)>& body,
              const std::string& scope) {
  runRanks(size, [&](int) { return config; }, body, scope);
}

// What rank r contributes at index i: small integers, so that sums are exact.
float valueOf(int rank, size_t i) { return static_cast<float>((rank + 1) * 3 + i % 7); }

void checkCollectives(int rank, Communicator& comm) {
  const int size = comm.size();
  // 0, 1, a prime, one that spans several ring segments and shared-memory rounds.
  for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, size_t{70001}}) {
    std::vector<float> input(count);
    for (size_t i = 0; i < count; ++i) input[i] = valueOf(rank, i);
    std::vector<float> expected(count, 0.0f);
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < count; ++i) expected[i] += valueOf(r, i);
    }

    for (Algorithm algorithm : {Algorithm::Ring, Algorithm::Tree, Algorithm::Direct}) {
      bool oneHost = true;
      for (int peer = 0; peer < size; ++peer) {
        oneHost = oneHost && (peer == rank || comm.transportTo(peer) == "shm");
      }
      if (algorithm == Algorithm::Direct && !oneHost) continue;
      std::vector<float> output(count, -1.0f);
      AllreduceOptions o;
      o.input = input.data();
      o.output = output.data();
      o.count = count;
      o.algorithm = algorithm;
      comm.allreduce(o)->wait();
      CHECK(output == expected);
    }

    // Asynchronous: several in flight at once, completed in order.
    std::vector<std::vector<int64_t>> buffers(3, std::vector<int64_t>(count, rank + 1));
    std::vector<WorkPtr> works;
    for (auto& buffer : buffers) {
      AllreduceOptions o;
      o.input = buffer.data();
      o.output = buffer.data();
      o.count = count;
      o.type = DataType::Int64;
      o.op = ReduceOp::Max;
      works.push_back(comm.allreduce(o));
    }
    for (auto& work : works) work->wait();
    for (auto& buffer : buffers) {
      CHECK(std::all_of(buffer.begin(), buffer.end(), [&](int64_t v) { return v == size; }));
    }

    std::vector<float> gathered(count * size, -1.0f);
    AllgatherOptions g;
    g.input = input.data();
    g.output = gathered.data();
    g.count = count;
    comm.allgather(g)->wait();
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < count; ++i) CHECK_EQ(gathered[r * count + i], valueOf(r, i));
    }

    std::vector<float> scattered(count * size);
    for (size_t i = 0; i < scattered.size(); ++i) scattered[i] = valueOf(rank, i);
    std::vector<float> block(count, -1.0f);
    ReduceScatterOptions rs;
    rs.input = scattered.data();
    rs.output = block.data();
    rs.count = count;
    comm.reduceScatter(rs)->wait();
    for (size_t i = 0; i < count; ++i) {
      float sum = 0.0f;
      for (int r = 0; r < size; ++r) sum += valueOf(r, rank * count + i);
      CHECK_EQ(block[i], sum);
    }

    const int root = static_cast<int>(count % size);
    std::vector<float> broadcast(count);
    for (size_t i = 0; i < count; ++i) broadcast[i] = rank == root ? valueOf(root, i) : -1.0f;
    BroadcastOptions b;
    b.buffer = broadcast.data();
    b.count = count;
    b.root = root;
    comm.broadcast(b)->wait();
    for (size_t i = 0; i < count; ++i) CHECK_EQ(broadcast[i], valueOf(root, i));

    std::vector<int32_t> sent(count * size);
    std::vector<int32_t> received(count * size, -1);
    for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<int32_t>(rank * 1000003 + i);
    AlltoallOptions a;
    a.input = sent.data();
    a.output = received.data();
    a.count = count;
    a.type = DataType::Int32;
    comm.alltoall(a)->wait();
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < count; ++i) {
        CHECK_EQ(received[r * count + i], static_cast<int32_t>(r * 1000003 + rank * count + i));
      }
    }

    comm.barrier(BarrierOptions{})->wait();
  }

  // Point to point around the ring, both directions at once (each posts its receive first).
  std::vector<uint8_t> out(10007, static_cast<uint8_t>(rank));
  std::vector<uint8_t> in(out.size(), 0xff);
  RecvOptions r;
  r.buffer = in.data();
  r.bytes = in.size();
  r.peer = (rank + size - 1) % size;
  r.tag = 7;
  WorkPtr received = comm.recv(r);
  SendOptions s;
  s.buffer = out.data();
  s.bytes = out.size();
  s.peer = (rank + 1) % size;
  s.tag = 7;
  WorkPtr sent = comm.send(s);
  sent->wait();
  received->wait();
  CHECK(std::all_of(in.begin(), in.end(), [&](uint8_t v) { return v == (rank + size - 1) % size; }));
}

}  // namespace

TEST(ranks_as_threads_collectives_over_shared_memory) {
  runRanks(4, configFor(TransportKind::Shm), checkCollectives, "threads/shm/");
}

TEST(ranks_as_threads_collectives_over_tcp) {
  runRanks(3, configFor(TransportKind::Tcp), checkCollectives, "threads/tcp/");
}

// Five ranks: not a power of two (the tree folds one in), an odd ring.
TEST(ranks_as_threads_five_ranks_over_shared_memory) {
  runRanks(5, configFor(TransportKind::Shm), checkCollectives, "threads/shm5/");
}

// Two hosts of 2 and 3 ranks (RINGCOMM_HOSTID's field): the schedules that know the hosts, with
// their steps within a host through each other's memory (process_vm_readv works on one's own
// process too) and TCP between the hosts; all-to-all grouped by host.
TEST(ranks_as_threads_two_hosts) {
  runRanks(
      5,
      [](int rank) {
        Config config = configFor(TransportKind::Auto);
        config.hostId = rank < 2 ? "threads-host-a" : "threads-host-b";
        return config;
      },
      checkCollectives, "threads/hosts/");
}

// Many collectives from several caller threads per rank at once: each rank's engine runs them in
// submission order; the callers race for the submit path and the completion callbacks.
TEST(ranks_as_threads_concurrent_callers) {
  runRanks(3, configFor(TransportKind::Auto),
           [](int rank, Communicator& comm) {
             // Every rank must submit in the same order: one caller thread submits, others wait.
             constexpr int kWorks = 64;
             std::vector<std::vector<int32_t>> buffers(kWorks, std::vector<int32_t>(513, rank));
             std::vector<WorkPtr> works(kWorks);
             std::atomic<int> completed{0};
             for (int i = 0; i < kWorks; ++i) {
               AllreduceOptions o;
               o.input = buffers[i].data();
               o.output = buffers[i].data();
               o.count = buffers[i].size();
               o.type = DataType::Int32;
               works[i] = comm.allreduce(o);
               works[i]->onCompletion([&completed](std::exception_ptr) { ++completed; });
             }
             std::vector<std::thread> waiters;
             for (int t = 0; t < 4; ++t) {
               waiters.emplace_back([&, t] {
                 for (int i = t; i < kWorks; i += 4) works[i]->wait();
               });
             }
             for (auto& waiter : waiters) waiter.join();
             const int sum = comm.size() * (comm.size() - 1) / 2;
             for (auto& buffer : buffers) {
               CHECK(std::all_of(buffer.begin(), buffer.end(), [&](int32_t v) { return v == sum; }));
             }
             // Callbacks run after wait() may return: give them a moment.
             for (int i = 0; i < 1000 && completed.load() < kWorks; ++i) std::this_thread::sleep_for(1ms);
             CHECK_EQ(completed.load(), kWorks);
           },
           "threads/callers/");
}

// A rank that aborts in the middle: every other rank raises an error naming a peer, promptly, and
// its communicator is closed; the aborting rank's own later calls raise CommunicatorClosed.
void checkAbortIsSeen(TransportKind transport, const std::string& scope) {
  constexpr int kVictim = 1;
  std::atomic<int> named{0};
  runRanks(3, configFor(transport, 20s),
           [&](int rank, Communicator& comm) {
             std::vector<float> data(20000, 1.0f);
             AllreduceOptions o;
             o.input = data.data();
             o.output = data.data();
             o.count = data.size();
             for (int i = 0; i < 3; ++i) comm.allreduce(o)->wait();
             if (rank == kVictim) {
               comm.abort("the test aborts rank 1");
               try {
                 comm.allreduce(o)->wait();
                 CHECK(false);
               } catch (const CommunicatorClosed&) {
               }
               return;
             }
             const auto start = std::chrono::steady_clock::now();
             try {
               for (int i = 0; i < 1000; ++i) comm.allreduce(o)->wait();
               CHECK(false);  // the victim runs none of them
             } catch (const PeerError& error) {
               CHECK(error.context().peer >= 0);
               ++named;
             }
             CHECK(std::chrono::steady_clock::now() - start < 15s);
             try {
               comm.allreduce(o)->wait();
               CHECK(false);
             } catch (const CommunicatorClosed&) {
             }
           },
           scope);
  CHECK_EQ(named.load(), 2);
}

TEST(ranks_as_threads_abort_is_seen_over_shared_memory) {
  checkAbortIsSeen(TransportKind::Shm, "threads/abort-shm/");
}

TEST(ranks_as_threads_abort_is_seen_over_tcp) {
  checkAbortIsSeen(TransportKind::Tcp, "threads/abort-tcp/");
}

// abort() from another thread of the same rank while its engine is in the middle of collectives
// (a watchdog, a signal handler's thread): the engine's waits and the abort race for the streams
// and the shared-memory flags. Every rank must end with an error, none may hang.
void checkAbortFromAnotherThread(TransportKind transport, const std::string& scope) {
  std::atomic<int> failed{0};
  runRanks(3, configFor(transport, 20s),
           [&](int rank, Communicator& comm) {
             std::vector<float> data(200000, 1.0f);
             std::thread watchdog;
             if (rank == 0) {
               watchdog = std::thread([&comm] {
                 std::this_thread::sleep_for(50ms);
                 comm.abort("the watchdog aborts rank 0");
               });
             }
             try {
               for (int i = 0; i < 100000; ++i) {
                 AllreduceOptions o;
                 o.input = data.data();
                 o.output = data.data();
                 o.count = data.size();
                 o.op = ReduceOp::Max;
                 comm.allreduce(o)->wait();
               }
             } catch (const Error&) {
               ++failed;
             }
             if (watchdog.joinable()) watchdog.join();
           },
           scope);
  CHECK_EQ(failed.load(), 3);
}

TEST(ranks_as_threads_abort_from_another_thread_over_shared_memory) {
  checkAbortFromAnotherThread(TransportKind::Shm, "threads/watchdog-shm/");
}

TEST(ranks_as_threads_abort_from_another_thread_over_tcp) {
  checkAbortFromAnotherThread(TransportKind::Tcp, "threads/watchdog-tcp/");
}

// abort() from another thread of a rank whose operation waits for a peer that is alive but never
// calls it (torchft aborts its process group so when a quorum changes): the wait ends at once,
// with CommunicatorClosed naming the abort, not at the deadline (30 s). Over shared memory only
// the aborting rank's own flag can end it, since the idle peer never looks; over TCP its sockets
// close under it, which must not read as the peer's failure. `waiting`: "direct" (the
// shared-memory direct schedule; a ring over TCP), "ring" (a wait on the links), "recv".
void checkAbortEndsOwnWait(TransportKind transport, const std::string& waiting,
                           const std::string& scope) {
  std::atomic<bool> done{false};
  runRanks(2, configFor(transport, 30s),
           [&](int rank, Communicator& comm) {
             std::vector<float> data(1024, 1.0f);
             AllreduceOptions o;
             o.input = data.data();
             o.output = data.data();
             o.count = data.size();
             if (waiting == "ring") o.algorithm = Algorithm::Ring;
             comm.allreduce(o)->wait();  // every link made
             if (rank == 1) {
               // Alive and idle until rank 0 is done: its shutdown would end rank 0's wait.
               while (!done.load()) std::this_thread::sleep_for(1ms);
               return;
             }
             WorkPtr work;
             if (waiting == "recv") {
               RecvOptions r;
               r.buffer = data.data();
               r.bytes = sizeof(float) * data.size();
               r.peer = 1;
               r.tag = 7;
               work = comm.recv(r);
             } else {
               work = comm.allreduce(o);
             }
             const auto start = std::chrono::steady_clock::now();
             // Then shut down at once, as torch does when it drops an aborted group: whatever
             // ends the wait first, the error names the abort.
             std::thread aborter([&comm] {
               std::this_thread::sleep_for(50ms);  // either order must work; this one is the case
               comm.abort("the test aborts rank 0");
               comm.shutdown();
             });
             try {
               work->wait();
               CHECK(false);
             } catch (const CommunicatorClosed& error) {
               CHECK(testing::contains(error.what(), "aborted on rank 0: the test aborts rank 0"));
             }
             aborter.join();
             CHECK(std::chrono::steady_clock::now() - start < 10s);
             done.store(true);
           },
           scope);
}

TEST(ranks_as_threads_abort_ends_own_wait_over_shared_memory) {
  for (const std::string waiting : {"direct", "ring", "recv"}) {
    checkAbortEndsOwnWait(TransportKind::Shm, waiting, "threads/abort-own-shm-" + waiting + "/");
  }
}

TEST(ranks_as_threads_abort_ends_own_wait_over_tcp) {
  for (const std::string waiting : {"ring", "recv"}) {
    checkAbortEndsOwnWait(TransportKind::Tcp, waiting, "threads/abort-own-tcp-" + waiting + "/");
  }
}

// Ranks in different collectives: each, after a second of waiting, looks up in the store what its
// peer runs (from the engine thread, while the caller waits) and names the mismatch.
TEST(ranks_as_threads_mismatch_is_named) {
  std::atomic<int> mismatches{0};
  runRanks(2, configFor(TransportKind::Tcp, 30s),
           [&](int rank, Communicator& comm) {
             std::vector<float> input(1000, 1.0f);
             std::vector<float> output(2000, 0.0f);
             try {
               if (rank == 0) {
                 AllreduceOptions o;
                 o.input = input.data();
                 o.output = output.data();
                 o.count = 1000;
                 o.algorithm = Algorithm::Ring;
                 comm.allreduce(o)->wait();
               } else {
                 GatherOptions g;
                 g.input = input.data();
                 g.output = output.data();
                 g.count = 1000;
                 g.root = 1;
                 comm.gather(g)->wait();
               }
               CHECK(false);
             } catch (const MismatchError& error) {
               CHECK(std::string(error.what()).find("rank ") != std::string::npos);
               ++mismatches;
             } catch (const PeerError&) {
               // Told by the other rank's abort, having named nothing itself.
             }
           },
           "threads/mismatch/");
  CHECK(mismatches.load() >= 1);
}
