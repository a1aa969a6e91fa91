// TCP links made on first use (transport/tcp/tcp_dialer.h): ranks as dialers in one process,
// each on its own listener. Crossing dials end with one link a pair whatever the interleaving;
// a link that arrived is taken, not dialed again; a dial to a rank that closed names it.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "common/deadline.h"
#include "common/socket.h"
#include "ringcomm/config.h"
#include "ringcomm/errors.h"
#include "transport/tcp/tcp_dialer.h"

using namespace ringcomm;
using transport::ByteStream;
using transport::TcpDialer;

namespace {

Config testConfig() {
  Config config;
  config.secret = "a secret shared by the dialers of this test";
  config.wireProtection = WireProtection::Off;
  return config;
}

// `count` dialers on the loopback, each knowing every other's port.
std::vector<std::unique_ptr<TcpDialer>> dialers(int count, const Config& config) {
  std::vector<net::UniqueFd> listeners;
  std::map<int, TcpDialer::PeerAddress> all;
  for (int rank = 0; rank < count; ++rank) {
    listeners.push_back(net::listenTcp("127.0.0.1", 0));
    all[rank] = {"127.0.0.1", net::localAddress(listeners.back().get()).port(), false};
  }
  std::vector<std::unique_ptr<TcpDialer>> made;
  for (int rank = 0; rank < count; ++rank) {
    std::map<int, TcpDialer::PeerAddress> peers = all;
    peers.erase(rank);
    made.push_back(
        std::make_unique<TcpDialer>(rank, std::move(peers), std::move(listeners[rank]), config));
  }
  return made;
}

Operation operation(int rank) {
  OperationLabel label;
  label.collective = "test";
  return Operation(label, rank, std::chrono::milliseconds(10000));
}

// Sends `value` one way and reads it at the other end.
void carries(ByteStream& from, ByteStream& to, uint32_t value) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  size_t sent = 0;
  while (sent < sizeof(value) && Clock::now() < deadline) {
    sent += from.writeSome(reinterpret_cast<const uint8_t*>(&value) + sent, sizeof(value) - sent);
  }
  uint32_t got = 0;
  size_t read = 0;
  while (read < sizeof(got) && Clock::now() < deadline) {
    read += to.readSome(reinterpret_cast<uint8_t*>(&got) + read, sizeof(got) - read);
  }
  CHECK_EQ(got, value);
}

}  // namespace

TEST(crossing_dials_end_with_one_link_a_pair) {
  const Config config = testConfig();
  for (int round = 0; round < 20; ++round) {
    auto made = dialers(2, config);
    std::unique_ptr<ByteStream> low;
    std::unique_ptr<ByteStream> high;
    std::thread other([&] { high = made[1]->link(0, operation(1)); });
    if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(round * 50));
    low = made[0]->link(1, operation(0));
    other.join();
    CHECK(low != nullptr && high != nullptr);
    carries(*low, *high, 1000 + round);
    carries(*high, *low, 2000 + round);
    CHECK_EQ(made[0]->linkCount(), 1);
    CHECK_EQ(made[1]->linkCount(), 1);
    // Nothing else arrived at either end.
    CHECK(made[0]->takeArrived().empty());
    CHECK(made[1]->takeArrived().empty());
  }
}

TEST(a_link_that_arrived_is_taken_not_dialed_again) {
  auto made = dialers(3, testConfig());
  std::unique_ptr<ByteStream> dialed = made[2]->link(0, operation(2));
  // Rank 0's acceptor took it: rank 0 finds it waiting, by takeArrived or link().
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::vector<std::pair<int, std::unique_ptr<ByteStream>>> arrived;
  while (arrived.empty() && Clock::now() < deadline) {
    arrived = made[0]->takeArrived();
    if (arrived.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_EQ(arrived.size(), size_t{1});
  CHECK_EQ(arrived[0].first, 2);
  carries(*dialed, *arrived[0].second, 7);
  std::unique_ptr<ByteStream> second = made[1]->link(0, operation(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::unique_ptr<ByteStream> taken = made[0]->link(1, operation(0));
  carries(*taken, *second, 8);
  CHECK_EQ(made[0]->linkCount(), 2);
}

TEST(a_dial_to_a_closed_rank_names_it) {
  auto made = dialers(2, testConfig());
  made[1]->close();
  made[1].reset();  // its acceptor gone, its listener closed
  std::string what;
  int peer = -2;
  try {
    made[0]->link(1, operation(0));
  } catch (const TransportError& error) {
    what = error.what();
    peer = error.context().peer;
  }
  CHECK_EQ(peer, 1);
  CHECK(testing::contains(what, "rank 1"));
  made[0]->close();
  try {
    made[0]->link(1, operation(0));
    CHECK(false);
  } catch (const TransportError& error) {
    CHECK(testing::contains(error.what(), "closed"));
  }
}

TEST(a_dial_to_another_communicators_port_is_no_link) {
  // The port a closed communicator's rank gave up, taken by another communicator of the job:
  // each proves the job's secret joined with its own key (connect.cc), so the dial fails its
  // proof, naming the rank, and the other communicator takes no link from it.
  net::UniqueFd zeroListener = net::listenTcp("127.0.0.1", 0);
  net::UniqueFd otherListener = net::listenTcp("127.0.0.1", 0);
  const int otherPort = net::localAddress(otherListener.get()).port();
  Config ours = testConfig();
  ours.secret += "/communicator 1";
  Config theirs = testConfig();
  theirs.secret += "/communicator 2";
  TcpDialer zero(0, {{1, {"127.0.0.1", otherPort, false}}}, std::move(zeroListener), ours);
  TcpDialer other(1, {{0, {"127.0.0.1", 1, false}}}, std::move(otherListener), theirs);
  int peer = -2;
  try {
    zero.link(1, operation(0));
  } catch (const TransportError& error) {
    peer = error.context().peer;
  }
  CHECK_EQ(peer, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(other.takeArrived().empty());
  CHECK_EQ(other.linkCount(), 0);
}
