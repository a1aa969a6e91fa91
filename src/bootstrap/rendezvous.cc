#include "bootstrap/rendezvous.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <random>
#include <sstream>

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

Rendezvous rendezvous(Store& store, int rank, int size, const RankRecord& self,
                      std::chrono::milliseconds timeout) {
  Rendezvous result;
  // The job's key names its shared memory; it is no secret (the secret never enters the store).
  if (rank == 0) {
    std::ostringstream job;
    job << std::hex << randomWord();
    store.set("job", toBytes(job.str()));
  }
  result.jobKey = toText(store.get("job", timeout));
  std::ostringstream mine;
  mine << self.hostId << "\n" << self.address << "\n" << self.port << "\n" << self.pid << "\n"
       << self.mailboxPort << "\n" << (self.rdma ? 1 : 0);
  store.set("rank/" + std::to_string(rank), toBytes(mine.str()));

  result.ranks.resize(size);
  for (int peer = 0; peer < size; ++peer) {
    Bytes published;
    try {
      published = store.get("rank/" + std::to_string(peer), timeout);
    } catch (const TimeoutError& error) {
      throw TimeoutError("ringcomm: rendezvous on rank " + std::to_string(rank) + ": rank " +
                             std::to_string(peer) + " did not arrive within " +
                             std::to_string(timeout.count() / 1000.0) + " s",
                         FailureContext{"rendezvous", rank, peer, timeout.count() / 1000.0});
    }
    std::istringstream record(toText(published));
    RankRecord& r = result.ranks[peer];
    std::getline(record, r.hostId);
    std::getline(record, r.address);
    int rdma = 0;
    record >> r.port >> r.pid >> r.mailboxPort >> rdma;
    r.rdma = rdma != 0;
  }
  return result;
}

}  // namespace ringcomm::bootstrap
