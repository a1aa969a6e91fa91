// The rendezvous (bootstrap/rendezvous.h) among ranks played by threads on one in-process store:
// every rank learns every record alike, the store answers a number of requests that grows with
// the job and not with its square, and a rank that never arrives is named by every other.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "check.h"
#include "common/deadline.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

using namespace ringcomm;

namespace {

// Counts the requests a store answers.
class CountingStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    ++requests;
    inner_.set(key, value);
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    ++requests;
    return inner_.get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    ++requests;
    return inner_.add(key, delta);
  }
  std::optional<Bytes> tryGet(const std::string& key, std::chrono::milliseconds within) override {
    ++requests;
    return inner_.tryGet(key, within);
  }
  // One request, as TcpStore makes it.
  std::vector<std::optional<Bytes>> tryGetMany(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds within) override {
    ++requests;
    return inner_.tryGetMany(keys, within);
  }
  std::atomic<int> requests{0};

 private:
  HashStore inner_;
};

bootstrap::RankRecord recordOf(int rank) {
  bootstrap::RankRecord record;
  record.hostId = "host-" + std::to_string(rank / 4) + "/boot/net:[" + std::to_string(rank) + "]";
  record.address = "10.0.0." + std::to_string(rank / 4 + 1);
  record.port = 20000 + rank;
  record.pid = 1000 + rank;
  record.mailboxPort = 30000 + rank;
  record.rdma = rank % 2 == 1;
  return record;
}

// Every rank's rendezvous but those in `absent` (which never arrive): what each learned, or its
// error.
struct Arrival {
  bootstrap::Rendezvous learned;
  std::string error;
};

std::vector<Arrival> meet(Store& store, int size, const std::vector<int>& absent,
                          std::chrono::milliseconds timeout) {
  std::vector<Arrival> outcomes(static_cast<size_t>(size));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    if (std::find(absent.begin(), absent.end(), rank) != absent.end()) continue;
    ranks.emplace_back([&, rank] {
      try {
        outcomes[static_cast<size_t>(rank)].learned =
            bootstrap::rendezvous(store, rank, size, recordOf(rank), timeout);
      } catch (const TimeoutError& error) {
        outcomes[static_cast<size_t>(rank)].error = error.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  return outcomes;
}

}  // namespace

TEST(everyRankLearnsEveryRecordAlikeWithRequestsLinearInTheJob) {
  for (const int size : {1, 2, 7, 64}) {
    CountingStore store;
    const auto outcomes = meet(store, size, {}, std::chrono::seconds(10));
    for (const Arrival& outcome : outcomes) {
      CHECK_EQ(outcome.error, std::string());
      CHECK_EQ(outcome.learned.jobKey, outcomes[0].learned.jobKey);
      CHECK(!outcome.learned.jobKey.empty());
      CHECK_EQ(outcome.learned.ranks.size(), static_cast<size_t>(size));
      for (int peer = 0; peer < size; ++peer) {
        const bootstrap::RankRecord& got = outcome.learned.ranks[static_cast<size_t>(peer)];
        const bootstrap::RankRecord want = recordOf(peer);
        CHECK_EQ(got.hostId, want.hostId);
        CHECK_EQ(got.address, want.address);
        CHECK_EQ(got.port, want.port);
        CHECK_EQ(got.pid, want.pid);
        CHECK_EQ(got.mailboxPort, want.mailboxPort);
        CHECK_EQ(got.rdma, want.rdma);
      }
    }
    // Each rank posts and counts its record, rank 0 waits for the count, reads them all in one
    // request and posts them, the others read that: 3 a rank and 3 more, not one a pair.
    CHECK(store.requests.load() <= 3 * size + 3);
  }
}

TEST(aRankThatNeverArrivesIsNamedByEveryOther) {
  for (const int late : {0, 3}) {
    CountingStore store;
    const auto outcomes = meet(store, 5, {late}, std::chrono::milliseconds(300));
    for (int rank = 0; rank < 5; ++rank) {
      if (rank == late) continue;
      const std::string& error = outcomes[static_cast<size_t>(rank)].error;
      CHECK(error.find("rank " + std::to_string(late) + " did not arrive") != std::string::npos);
    }
  }
}

TEST(rankZeroGoesOnWhereTheRankThatCompletedTheCountDiedBeforeSayingSo) {
  // Rank 1 posts its record and counts it, completing the count, and dies before it posts that
  // every record is there: rank 0 reads the count itself and goes on, a look later (1 s), rather
  // than wait out its timeout and call rank 0 late.
  CountingStore store;
  std::string error;
  bootstrap::Rendezvous learned;
  std::thread rankZero([&] {
    try {
      learned = bootstrap::rendezvous(store, 0, 2, recordOf(0), std::chrono::seconds(20));
    } catch (const Error& failure) {
      error = failure.what();
    }
  });
  store.get("rank/0", std::chrono::seconds(5));
  while (store.add("records", 0) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  store.set("rank/1", Bytes{'x'});  // a record of one byte: rank 0 passes it on as it is
  const auto counted = Clock::now();
  store.add("records", 1);
  rankZero.join();
  CHECK(Clock::now() - counted < std::chrono::seconds(3));
  CHECK_EQ(error, std::string());
  CHECK_EQ(learned.ranks.size(), size_t{2});
}
