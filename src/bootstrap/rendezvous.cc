#include "bootstrap/rendezvous.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "ringcomm/errors.h"

namespace ringcomm::bootstrap {
namespace {

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string toText(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

std::string readFirstLine(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

uint64_t randomWord() {
  std::random_device device;  // /dev/urandom on Linux
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

std::string localHostId(const Config& config) {
  if (!config.hostId.empty()) return config.hostId;
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  char netns[128] = {};
  // Two network namespaces on one machine act as two hosts (that is how multi-host is tested).
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  if (n < 0) n = 0;
  return std::string(hostname) + "/" + readFirstLine("/proc/sys/kernel/random/boot_id") + "/" +
         std::string(netns, static_cast<size_t>(n));
}

std::string interfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error("ringcomm: getifaddrs failed");
  std::string found;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if (name != entry->ifa_name) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr, text, sizeof(text));
    found = text;
    break;
  }
  freeifaddrs(list);
  if (found.empty()) {
    throw InvalidArgument("RINGCOMM_SOCKET_IFNAME='" + name + "' names no interface with an IPv4 address");
  }
  return found;
}

std::string interfaceOf(const std::string& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr, text, sizeof(text));
    if (address == text) {
      found = entry->ifa_name;
      break;
    }
  }
  freeifaddrs(list);
  return found;
}

namespace {

std::string recordKey(int rank) { return "rank/" + std::to_string(rank); }

std::string textOf(const RankRecord& record) {
  std::ostringstream text;
  text << record.hostId << "\n" << record.address << "\n" << record.port << "\n" << record.pid
       << "\n" << record.mailboxPort << "\n" << (record.rdma ? 1 : 0);
  return text.str();
}

RankRecord recordOf(const std::string& text) {
  std::istringstream in(text);
  RankRecord record;
  std::getline(in, record.hostId);
  std::getline(in, record.address);
  int rdma = 0;
  in >> record.port >> record.pid >> record.mailboxPort >> rdma;
  record.rdma = rdma != 0;
  return record;
}

// Set by the rank whose record completes the count ("records"), for rank 0 to wait on.
const std::string kEveryRecordKey = "records/all";
// How often rank 0 reads the count itself while it waits (a request each).
constexpr std::chrono::milliseconds kCountLook{1000};

// The first rank whose record is missing, asked at once (-1 where every one is there).
int firstMissing(Store& store, const std::vector<std::string>& keys) {
  const std::vector<std::optional<Bytes>> found =
      store.tryGetMany(keys, std::chrono::milliseconds(200));
  for (size_t peer = 0; peer < found.size(); ++peer) {
    if (!found[peer]) return static_cast<int>(peer);
  }
  return -1;
}

TimeoutError lateRank(int rank, int late, std::chrono::milliseconds timeout) {
  return TimeoutError("ringcomm: rendezvous on rank " + std::to_string(rank) + ": rank " +
                          std::to_string(late) + " did not arrive within " +
                          std::to_string(timeout.count() / 1000.0) + " s",
                      FailureContext{"rendezvous", rank, late, timeout.count() / 1000.0});
}

// Rank 0's gathering of every record, published as one value: the job's key on its first line,
// then each rank's record after a line with its length. It waits for the count of records to be
// complete, then reads them all in one request (Store::tryGetMany: a round trip, not one a rank).
std::string gatherEveryRecord(Store& store, int size, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> keys;
  for (int peer = 0; peer < size; ++peer) keys.push_back(recordKey(peer));
  for (;;) {
    try {
      store.get(kEveryRecordKey, std::max(std::chrono::milliseconds(1),
                                          std::min(kCountLook, millisecondsLeft(deadline))));
      break;
    } catch (const TimeoutError&) {
      // The rank whose record completed the count may have died before it said so.
      if (store.add("records", 0) >= size) break;
      if (Clock::now() >= deadline) {
        throw lateRank(0, std::max(0, firstMissing(store, keys)), timeout);
      }
    }
  }
  std::vector<std::optional<Bytes>> records =
      store.tryGetMany(keys, std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)));
  std::ostringstream job;
  job << std::hex << randomWord();
  std::string all = job.str() + "\n";
  for (int peer = 0; peer < size; ++peer) {
    std::optional<Bytes>& record = records[static_cast<size_t>(peer)];
    // Posted before it was counted: missing here only where the store did not answer in time.
    if (!record) {
      try {
        record = store.get(keys[static_cast<size_t>(peer)],
                           std::max(std::chrono::milliseconds(1), millisecondsLeft(deadline)));
      } catch (const TimeoutError&) {
        throw lateRank(0, peer, timeout);
      }
    }
    all += std::to_string(record->size()) + "\n" + toText(*record);
  }
  return all;
}

Rendezvous parseEveryRecord(const std::string& all, int size) {
  Rendezvous result;
  size_t at = all.find('\n');
  result.jobKey = all.substr(0, at);
  for (int peer = 0; peer < size; ++peer) {
    const size_t lengthEnd = all.find('\n', at + 1);
    const size_t length = std::stoul(all.substr(at + 1, lengthEnd - at - 1));
    result.ranks.push_back(recordOf(all.substr(lengthEnd + 1, length)));
    at = lengthEnd + length;
  }
  return result;
}

}  // namespace

Rendezvous rendezvous(Store& store, int rank, int size, const RankRecord& self,
                      std::chrono::milliseconds timeout) {
  // Every rank posts its record and counts it; rank 0 waits for the count, reads every record
  // in one request and posts them all as one value, which every other rank reads: about 3 x size
  // requests to the store in all, not size^2 (each rank reading each record), which at a
  // thousand ranks is a million round trips to one server; and rank 0 waits a few round trips,
  // not one a rank.
  store.set(recordKey(rank), toBytes(textOf(self)));
  if (store.add("records", 1) == size) store.set(kEveryRecordKey, toBytes("all"));
  if (rank == 0) {
    const std::string all = gatherEveryRecord(store, size, timeout);
    store.set("ranks", toBytes(all));
    return parseEveryRecord(all, size);
  }
  try {
    return parseEveryRecord(toText(store.get("ranks", timeout)), size);
  } catch (const TimeoutError&) {
    // Which rank kept rank 0 waiting: the first whose record is missing (rank 0's own where
    // every other's is there), asked only now.
    std::vector<std::string> keys;
    for (int peer = 0; peer < size; ++peer) keys.push_back(recordKey(peer));
    throw lateRank(rank, std::max(0, firstMissing(store, keys)), timeout);
  }
}

}  // namespace ringcomm::bootstrap
