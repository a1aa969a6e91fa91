// Unit tests of the rendezvous stores: HashStore, PrefixStore, Store::wait, TcpStoreServer and
// TcpStore (over loopback only), and the socket helpers they stand on.
#include <dirent.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "auth/handshake.h"
#include "bootstrap/store_protocol.h"
#include "check.h"
#include "common/socket.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"

using namespace ringcomm;
using namespace std::chrono_literals;

namespace {

constexpr const char* kLoopback = "127.0.0.1";
const std::string kStoreSecret = "the test job's secret";

Bytes bytesOf(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string textOf(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

bool startsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}
using ::ringcomm::testing::contains;

// Runs body, which must throw ErrorType; returns the error's message.
template <typename ErrorType, typename Body>
std::string messageOf(Body body) {
  try {
    body();
  } catch (const ErrorType& error) {
    return error.what();
  } catch (const std::exception& error) {
    throw ringcomm::testing::CheckFailure{std::string("threw the wrong error: ") + error.what()};
  }
  throw ringcomm::testing::CheckFailure{"expected an error, none was thrown"};
}

// A port nobody listens on right now (the kernel's pick, released at once).
int unusedPort() {
  net::UniqueFd listener = net::listenTcp(kLoopback, 0);
  return net::localAddress(listener.get()).port();
}

double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A client that speaks the wire format by hand, to send what TcpStore never would (after the
// handshake, which it passes with the job's secret).
struct RawClient {
  net::UniqueFd fd;
  explicit RawClient(int port) : fd(net::connectTcp(kLoopback, port, net::deadlineAfter(5s))) {
    auth::connectHandshake(fd.get(), kStoreSecret, auth::Purpose::Store, auth::Caller{},
                           net::deadlineAfter(5s), "the test store");
  }
  void send(const Bytes& frame) {
    net::writeFully(fd.get(), frame.data(), frame.size(), net::deadlineAfter(5s));
  }
  Bytes receive() {
    uint8_t header[4];
    net::readFully(fd.get(), header, 4, net::deadlineAfter(5s));
    Bytes body(storeproto::loadU32(header));
    net::readFully(fd.get(), body.data(), body.size(), net::deadlineAfter(5s));
    return body;
  }
};

}  // namespace

// ---- HashStore, PrefixStore, Store::wait --------------------------------------------------------

TEST(hashStoreSetGetAdd) {
  HashStore store;
  store.set("a", bytesOf("1"));
  store.set("a", bytesOf("2"));  // overwrite
  CHECK_EQ(textOf(store.get("a", 0ms)), "2");
  CHECK_EQ(store.add("n", 5), 5);
  CHECK_EQ(store.add("n", -2), 3);
  CHECK_EQ(textOf(store.get("n", 0ms)), "3");  // counters are decimal text
  CHECK_EQ(store.add("a", 10), 12);            // continues from a set() of "2"
  store.set("blob", Bytes{0, 1, 2});
  std::string message = messageOf<InvalidArgument>([&] { store.add("blob", 1); });
  CHECK(contains(message, "'blob'"));
  store.set("empty", Bytes{});
  CHECK(store.get("empty", 0ms).empty());
}

TEST(hashStoreGetBlocksUntilSet) {
  HashStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    store.set("late", bytesOf("here"));
  });
  auto start = std::chrono::steady_clock::now();
  Bytes value = store.get("late", 10s);
  auto end = std::chrono::steady_clock::now();
  setter.join();
  CHECK_EQ(textOf(value), "here");
  CHECK(secondsBetween(start, end) >= 0.04);
}

TEST(hashStoreGetTimeoutNamesKeyAndSeconds) {
  HashStore store;
  try {
    store.get("rank3/addr", 100ms);
    CHECK(false);
  } catch (const TimeoutError& error) {
    CHECK_EQ(std::string(error.what()), "store get('rank3/addr') timed out after 0.1 s");
    CHECK(error.context().elapsedSeconds >= 0.1);
    CHECK(contains(error.context().operation, "rank3/addr"));
  }
}

TEST(prefixStoreNamespacesKeys) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore first("job1", inner);
  PrefixStore second("job2", inner);
  first.set("addr", bytesOf("one"));
  second.set("addr", bytesOf("two"));
  CHECK_EQ(textOf(first.get("addr", 0ms)), "one");
  CHECK_EQ(textOf(second.get("addr", 0ms)), "two");
  CHECK_EQ(textOf(inner->get("job1/addr", 0ms)), "one");
  CHECK_EQ(first.add("count", 1), 1);
  CHECK_EQ(second.add("count", 7), 7);
  CHECK_EQ(first.add("count", 1), 2);
  // Prefixes nest.
  PrefixStore nested("sub", std::make_shared<PrefixStore>("job1", inner));
  nested.set("k", bytesOf("v"));
  CHECK_EQ(textOf(inner->get("job1/sub/k", 0ms)), "v");
  messageOf<TimeoutError>([&] { second.get("k", 0ms); });
  messageOf<InvalidArgument>([] { PrefixStore("x", nullptr); });
}

TEST(storeWaitDefaultWaitsForEveryKey) {
  HashStore store;
  std::thread setter([&] {
    store.set("a", bytesOf("1"));
    std::this_thread::sleep_for(30ms);
    store.set("b", bytesOf("2"));
  });
  store.wait({"a", "b"}, 10s);
  setter.join();
  std::string message = messageOf<TimeoutError>([&] { store.wait({"a", "missing"}, 50ms); });
  CHECK(startsWith(message, "store wait('missing') timed out after "));
  CHECK(contains(message, "1 of 2 keys present"));
}

// ---- Socket helpers -----------------------------------------------------------------------------

TEST(socketHelpersRoundTripAndDeadlines) {
  net::UniqueFd listener = net::listenTcp(kLoopback, 0);
  int port = net::localAddress(listener.get()).port();
  CHECK(port > 0);
  net::UniqueFd client = net::connectTcp(kLoopback, port, net::deadlineAfter(5s));
  CHECK(net::waitReady(listener.get(), POLLIN, net::deadlineAfter(5s)));
  net::UniqueFd server = net::acceptTcp(listener.get());
  CHECK(server.valid());
  CHECK(!net::acceptTcp(listener.get()).valid());  // nothing else pending
  CHECK_EQ(net::localAddress(client.get()).host(), "127.0.0.1");
  CHECK_EQ(net::peerAddress(server.get()).toString(), net::localAddress(client.get()).toString());

  // More than a socket buffer holds, so both sides have to wait on each other.
  Bytes sent(8 * 1024 * 1024);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = uint8_t(i * 131 + 7);
  Bytes received(sent.size());
  std::thread writer(
      [&] { net::writeFully(client.get(), sent.data(), sent.size(), net::deadlineAfter(20s)); });
  net::readFully(server.get(), received.data(), received.size(), net::deadlineAfter(20s));
  writer.join();
  CHECK(sent == received);

  uint8_t byte = 0;
  std::string message = messageOf<TimeoutError>(
      [&] { net::readFully(server.get(), &byte, 1, net::deadlineAfter(50ms)); });
  CHECK(contains(message, "0 of 1 bytes"));
  client.reset();
  messageOf<TransportError>(
      [&] { net::readFully(server.get(), &byte, 1, net::deadlineAfter(5s)); });

  CHECK_EQ(net::formatHostPort("::1", 80), "[::1]:80");
  CHECK(net::deadlineAfter(std::chrono::milliseconds::max()) == Clock::time_point::max());
}

TEST(socketConnectTimesOutNamingTheAddress) {
  int port = unusedPort();
  auto start = std::chrono::steady_clock::now();
  std::string message = messageOf<TimeoutError>(
      [&] { net::connectTcp(kLoopback, port, net::deadlineAfter(200ms)); });
  double waited = secondsBetween(start, std::chrono::steady_clock::now());
  CHECK(contains(message, "127.0.0.1:" + std::to_string(port)));
  CHECK(contains(message, "refused"));
  CHECK(waited >= 0.2 && waited < 3.0);
  messageOf<InvalidArgument>([] { net::listenTcp(kLoopback, 70000); });
}

// ---- TcpStoreServer / TcpStore ------------------------------------------------------------------

TEST(tcpStoreSetGetAdd) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  CHECK(server.port() > 0);
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  store.set("k", bytesOf("v"));
  CHECK_EQ(textOf(store.get("k", 1s)), "v");
  store.set("k", bytesOf("w"));
  CHECK_EQ(textOf(store.get("k", 0ms)), "w");
  CHECK_EQ(store.add("n", 3), 3);
  CHECK_EQ(store.add("n", -1), 2);
  CHECK_EQ(textOf(store.get("n", 0ms)), "2");
  store.set("empty", Bytes{});
  CHECK(store.get("empty", 0ms).empty());
  std::string message = messageOf<InvalidArgument>([&] { store.add("k", 1); });
  CHECK(contains(message, "'k'"));
  // A refused add() leaves the connection usable.
  CHECK_EQ(store.add("n", 1), 3);
  CHECK_EQ(store.localAddress(), "127.0.0.1");
}

TEST(tcpStoreGetsManyKeysInOneRequest) {
  // A leader reading a thousand ranks' views, or a rendezvous's rank 0 their records: one round
  // trip, each key's value or nothing, in the keys' order, through a PrefixStore too.
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  auto store = std::make_shared<TcpStore>(kLoopback, server.port(), 5s, kStoreSecret);
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) {
    keys.push_back("scope/view/" + std::to_string(i));
    if (i % 3 != 0) store->set(keys.back(), bytesOf("view " + std::to_string(i)));
  }
  const std::vector<std::optional<Bytes>> values = store->tryGetMany(keys, 5s);
  CHECK_EQ(values.size(), keys.size());
  for (int i = 0; i < 1000; ++i) {
    const std::optional<Bytes>& value = values[static_cast<size_t>(i)];
    CHECK_EQ(value.has_value(), i % 3 != 0);
    if (value) CHECK_EQ(textOf(*value), "view " + std::to_string(i));
  }
  PrefixStore scoped("scope", store);
  const auto some = scoped.tryGetMany({"view/1", "view/3", "view/998"}, 5s);
  CHECK(some[0] && !some[1] && some[2] && textOf(*some[2]) == "view 998");
  CHECK(store->tryGetMany({}, 1s).empty());
  // Values past a frame's worth are left for another request, not lost: a reader asks again.
  store->set("big/0", Bytes(40u << 20, 1));
  store->set("big/1", Bytes(40u << 20, 2));
  const auto big = store->tryGetMany({"big/0", "big/1"}, 30s);
  CHECK(big[0] && big[0]->size() == (40u << 20) && !big[1]);
  CHECK(store->tryGetMany({"big/1"}, 30s)[0].has_value());
  // A store gone answers nothing, and does not throw.
  server.stop();
  const auto gone = store->tryGetMany({"scope/view/1"}, 1s);
  CHECK(gone.size() == 1 && !gone[0]);
}

TEST(tcpStoreLargeValue) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  TcpStore writer(kLoopback, server.port(), 5s, kStoreSecret);
  TcpStore reader(kLoopback, server.port(), 5s, kStoreSecret);
  Bytes value(5 * 1024 * 1024);
  for (size_t i = 0; i < value.size(); ++i) value[i] = uint8_t(i * 7 + 1);
  std::thread setter([&] { writer.set("big", value); });
  Bytes got = reader.get("big", 20s);
  setter.join();
  CHECK(got == value);
}

TEST(tcpStoreManyClientsRendezvous) {
  // Every "rank" publishes its address and reads everyone else's, as bootstrap does.
  constexpr int kRanks = 8;
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  std::vector<std::thread> ranks;
  std::vector<std::string> failures(kRanks);
  std::vector<int64_t> arrivals(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
        store.set("rank" + std::to_string(rank) + "/addr", bytesOf("host-" + std::to_string(rank)));
        for (int peer = 0; peer < kRanks; ++peer) {
          Bytes value = store.get("rank" + std::to_string(peer) + "/addr", 10s);
          if (textOf(value) != "host-" + std::to_string(peer)) failures[rank] = "wrong value";
        }
        arrivals[rank] = store.add("arrived", 1);
        store.wait({"rank0/addr", "rank7/addr"}, 1s);
      } catch (const std::exception& error) {
        failures[rank] = error.what();
      }
    });
  }
  for (auto& thread : ranks) thread.join();
  for (int rank = 0; rank < kRanks; ++rank) CHECK_EQ(failures[rank], "");
  std::sort(arrivals.begin(), arrivals.end());
  for (int rank = 0; rank < kRanks; ++rank) CHECK_EQ(arrivals[rank], rank + 1);
}

TEST(tcpStoreGetBlocksUntilALaterSet) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  TcpStore waiter(kLoopback, server.port(), 5s, kStoreSecret);
  TcpStore setter(kLoopback, server.port(), 5s, kStoreSecret);
  std::thread late([&] {
    std::this_thread::sleep_for(150ms);
    setter.set("late", bytesOf("value"));
  });
  auto start = std::chrono::steady_clock::now();
  Bytes value = waiter.get("late", 10s);
  double waited = secondsBetween(start, std::chrono::steady_clock::now());
  late.join();
  CHECK_EQ(textOf(value), "value");
  CHECK(waited >= 0.1 && waited < 5.0);

  // An add() that creates the key also answers a parked get().
  std::thread adder([&] {
    std::this_thread::sleep_for(50ms);
    setter.add("counter", 4);
  });
  CHECK_EQ(textOf(waiter.get("counter", 10s)), "4");
  adder.join();
}

TEST(tcpStoreGetTimeoutNamesKeyAndSeconds) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  try {
    store.get("rank3/addr", 200ms);
    CHECK(false);
  } catch (const TimeoutError& error) {
    CHECK(startsWith(error.what(), "store get('rank3/addr') timed out after 0."));
    CHECK(contains(error.what(), " s"));
    CHECK(error.context().elapsedSeconds >= 0.2 && error.context().elapsedSeconds < 3.0);
  }
  // The server answered the timeout itself, so the connection is still good.
  store.set("rank3/addr", bytesOf("x"));
  CHECK_EQ(textOf(store.get("rank3/addr", 1s)), "x");
}

TEST(tcpStoreAddFromManyThreadsIsExact) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 500;
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  // Half the threads share one client (exercising its mutex), half have their own.
  TcpStore shared(kLoopback, server.port(), 5s, kStoreSecret);
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<TcpStore> own;
      if (t % 2 == 1) own = std::make_unique<TcpStore>(kLoopback, server.port(), 5s, kStoreSecret);
      Store& store = own ? static_cast<Store&>(*own) : static_cast<Store&>(shared);
      for (int i = 0; i < kAddsPerThread; ++i) seen[t].push_back(store.add("total", 1));
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK_EQ(shared.add("total", 0), int64_t(kThreads) * kAddsPerThread);
  // Every add saw a distinct count: the increments were atomic.
  std::vector<int64_t> all;
  for (const auto& values : seen) all.insert(all.end(), values.begin(), values.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) CHECK_EQ(all[i], int64_t(i) + 1);
}

TEST(tcpStoreClientRetriesUntilServerStarts) {
  int port = unusedPort();
  std::string failure;
  std::string value;
  std::thread client([&] {
    try {
      TcpStore store(kLoopback, port, 10s, kStoreSecret);  // the server is not up yet
      value = textOf(store.get("ready", 10s));
    } catch (const std::exception& error) {
      failure = error.what();
    }
  });
  std::this_thread::sleep_for(300ms);
  TcpStoreServer server(kLoopback, port, kStoreSecret);
  TcpStore store(kLoopback, port, 5s, kStoreSecret);
  store.set("ready", bytesOf("yes"));
  client.join();
  CHECK_EQ(failure, "");
  CHECK_EQ(value, "yes");
}

TEST(tcpStoreConnectTimeout) {
  int port = unusedPort();
  std::string message =
      messageOf<TimeoutError>([&] { TcpStore store(kLoopback, port, 200ms, kStoreSecret); });
  CHECK(contains(message, "127.0.0.1:" + std::to_string(port)));
}

TEST(tcpStoreServerStopFailsWaitingClients) {
  auto server = std::make_unique<TcpStoreServer>(kLoopback, 0, kStoreSecret);
  int port = server->port();
  constexpr int kWaiters = 3;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kWaiters; ++i) {
    clients.push_back(std::make_unique<TcpStore>(kLoopback, port, 5s, kStoreSecret));
  }
  std::vector<std::string> errors(kWaiters);
  std::vector<double> waited(kWaiters);
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      auto start = std::chrono::steady_clock::now();
      started++;
      try {
        clients[i]->get("never", 60s);
        errors[i] = "no error";
      } catch (const TransportError& error) {
        errors[i] = error.what();
      } catch (const std::exception& error) {
        errors[i] = std::string("wrong error: ") + error.what();
      }
      waited[i] = secondsBetween(start, std::chrono::steady_clock::now());
    });
  }
  while (started.load() < kWaiters) std::this_thread::yield();
  std::this_thread::sleep_for(100ms);  // let the gets park on the server
  auto stopStart = std::chrono::steady_clock::now();
  server->stop();
  server->stop();  // idempotent
  CHECK(secondsBetween(stopStart, std::chrono::steady_clock::now()) < 2.0);
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < kWaiters; ++i) {
    CHECK(startsWith(errors[i], "store get('never') failed: store at 127.0.0.1:" +
                                    std::to_string(port)));
    CHECK(waited[i] < 5.0);
  }
  // Later calls fail at once too, naming the store.
  std::string message = messageOf<TransportError>([&] { clients[0]->set("k", bytesOf("v")); });
  CHECK(contains(message, "127.0.0.1:" + std::to_string(port)));
  server.reset();
}

TEST(tcpStoreServerDestructorIsPromptWithIdleClients) {
  auto start = std::chrono::steady_clock::now();
  {
    TcpStoreServer server(kLoopback, 0, kStoreSecret);
    TcpStore a(kLoopback, server.port(), 5s, kStoreSecret);
    TcpStore b(kLoopback, server.port(), 5s, kStoreSecret);
    a.set("x", bytesOf("1"));
  }
  CHECK(secondsBetween(start, std::chrono::steady_clock::now()) < 2.0);
}

TEST(tcpStoreServerSurvivesMisbehavingClients) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  int port = server.port();
  {
    // Half a request, then gone.
    RawClient half(port);
    Bytes frame = storeproto::Encoder(storeproto::Op::Set).str("k").str("v").finish();
    frame.resize(frame.size() / 2);
    half.send(frame);
  }
  {
    // A parked get whose client leaves before the key arrives.
    RawClient gone(port);
    gone.send(storeproto::Encoder(storeproto::Op::Get).str("later").i64(60000).finish());
  }
  {
    // A length prefix no store message has: the server drops this client only.
    RawClient garbage(port);
    garbage.send(Bytes{0xff, 0xff, 0xff, 0xff, 1, 2, 3});
    uint8_t byte = 0;
    messageOf<TransportError>(
        [&] { net::readFully(garbage.fd.get(), &byte, 1, net::deadlineAfter(5s)); });
  }
  {
    // An unknown opcode is refused, and the connection goes on.
    RawClient odd(port);
    odd.send(storeproto::Encoder(uint8_t(99)).finish());
    Bytes reply = odd.receive();
    CHECK_EQ(int(reply.at(0)), int(storeproto::Status::Error));
    // A set then an immediate hang-up still takes effect.
    odd.send(storeproto::Encoder(storeproto::Op::Set).str("parting").str("gift").finish());
  }
  TcpStore store(kLoopback, port, 5s, kStoreSecret);
  store.set("later", bytesOf("now"));  // wakes nobody: the waiter has gone
  CHECK_EQ(textOf(store.get("later", 1s)), "now");
  CHECK_EQ(textOf(store.get("parting", 5s)), "gift");
  messageOf<TimeoutError>([&] { store.get("k", 0ms); });  // the half set never happened
}

TEST(tcpStoreCheckAndPipelinedRequests) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  RawClient raw(server.port());
  using storeproto::Encoder;
  using storeproto::Op;
  auto check = [&](std::vector<std::string> keys) {
    Encoder request(Op::Check);
    request.u32(uint32_t(keys.size()));
    for (const auto& key : keys) request.str(key);
    raw.send(request.finish());
    Bytes reply = raw.receive();
    storeproto::Decoder decoder(reply.data(), reply.size());
    CHECK_EQ(int(decoder.u8()), int(storeproto::Status::Ok));
    return decoder.u8() == 1;
  };
  CHECK(!check({"a"}));
  // Three requests in one write, the first of which parks: replies still come back in order.
  Bytes batch;
  for (Bytes frame : {Encoder(Op::Get).str("a").i64(10000).finish(),
                      Encoder(Op::Add).str("c").i64(2).finish(),
                      Encoder(Op::Get).str("c").i64(0).finish()}) {
    batch.insert(batch.end(), frame.begin(), frame.end());
  }
  raw.send(batch);
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  std::this_thread::sleep_for(50ms);
  // The add queued behind the parked get has not run yet.
  messageOf<TimeoutError>([&] { store.get("c", 0ms); });
  store.set("a", bytesOf("A"));
  Bytes first = raw.receive();
  CHECK_EQ(int(first.at(0)), int(storeproto::Status::Ok));
  CHECK_EQ(textOf(Bytes(first.begin() + 5, first.end())), "A");
  Bytes second = raw.receive();
  storeproto::Decoder added(second.data(), second.size());
  CHECK_EQ(int(added.u8()), int(storeproto::Status::Ok));
  CHECK_EQ(added.i64(), 2);
  Bytes third = raw.receive();
  CHECK_EQ(textOf(Bytes(third.begin() + 5, third.end())), "2");
  CHECK(check({"a", "c"}));
  CHECK(!check({"a", "c", "zzz"}));
}

TEST(tcpStoreServerHostsAndPorts) {
  for (const char* host : {"", "0.0.0.0", "127.0.0.1", "localhost"}) {
    TcpStoreServer server(host, 0, kStoreSecret);
    TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
    store.set("h", bytesOf(host));
    CHECK_EQ(textOf(store.get("h", 1s)), host);
    CHECK_EQ(store.localAddress(), "127.0.0.1");
  }
  TcpStoreServer first(kLoopback, 0, kStoreSecret);
  std::string message =
      messageOf<TransportError>([&] { TcpStoreServer second(kLoopback, first.port(), kStoreSecret); });
  CHECK(contains(message, "127.0.0.1:" + std::to_string(first.port())));
  messageOf<InvalidArgument>([] { TcpStoreServer bad(kLoopback, -1, kStoreSecret); });
  messageOf<InvalidArgument>([] { TcpStore bad(kLoopback, 0, 1s, kStoreSecret); });
}

TEST(prefixStoreOverTcpStore) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  auto base = std::make_shared<TcpStore>(kLoopback, server.port(), 5s, kStoreSecret);
  PrefixStore a("comm0", base);
  PrefixStore b("comm1", base);
  a.set("rank0", bytesOf("x"));
  b.set("rank0", bytesOf("y"));
  CHECK_EQ(textOf(base->get("comm0/rank0", 0ms)), "x");
  CHECK_EQ(textOf(b.get("rank0", 0ms)), "y");
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    a.set("rank1", bytesOf("z"));
  });
  a.wait({"rank0", "rank1"}, 10s);
  later.join();
  std::string message = messageOf<TimeoutError>([&] { b.wait({"rank1"}, 100ms); });
  CHECK(startsWith(message, "store wait('rank1') timed out after "));
}

TEST(tcpStoreSharedClientSetWhileGetParked) {
  // One TcpStore shared by two threads: the set() must not queue behind the parked get().
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    store.set("k", bytesOf("v"));
  });
  auto start = std::chrono::steady_clock::now();
  Bytes value = store.get("k", 20s);
  setter.join();
  CHECK_EQ(textOf(value), "v");
  CHECK(secondsBetween(start, std::chrono::steady_clock::now()) < 5.0);
}

TEST(tcpStoreSilentServerTimesOut) {
  // Something listens (the kernel completes TCP's handshake) but never sends ringcomm's.
  net::UniqueFd listener = net::listenTcp(kLoopback, 0);
  int port = net::localAddress(listener.get()).port();
  auto start = std::chrono::steady_clock::now();
  std::string message =
      messageOf<TimeoutError>([&] { TcpStore store(kLoopback, port, 1s, kStoreSecret); });
  double waited = secondsBetween(start, std::chrono::steady_clock::now());
  CHECK(contains(message, "did not answer the handshake"));
  CHECK(contains(message, "127.0.0.1:" + std::to_string(port)));
  CHECK(waited < 10.0);
}

namespace {
size_t countEntries(const char* directory) {
  size_t count = 0;
  if (DIR* dir = ::opendir(directory)) {
    while (::readdir(dir) != nullptr) ++count;
    ::closedir(dir);
  }
  return count;
}
}  // namespace

TEST(tcpStoreLeavesNoThreadsOrDescriptors) {
  size_t fdsBefore = countEntries("/proc/self/fd");
  size_t threadsBefore = countEntries("/proc/self/task");
  {
    TcpStoreServer server(kLoopback, 0, kStoreSecret);
    TcpStore a(kLoopback, server.port(), 5s, kStoreSecret);
    auto b = std::make_shared<TcpStore>(kLoopback, server.port(), 5s, kStoreSecret);
    std::thread waiter([&] { b->get("x", 10s); });
    std::this_thread::sleep_for(20ms);
    a.set("x", bytesOf("1"));
    waiter.join();
    RawClient raw(server.port());
    raw.send(Bytes{1, 0});  // half a frame
    server.stop();
  }
  CHECK_EQ(countEntries("/proc/self/fd"), fdsBefore);
  CHECK_EQ(countEntries("/proc/self/task"), threadsBefore);
}

// ---- Strangers: the handshake, and the bounds on what a client may make the server hold ---------

// Connects and reads the server's hello, as a stranger would, then sends `reply`; returns whether
// the server closed the connection within a few seconds.
bool closedAfterSending(int port, const Bytes& reply) {
  net::UniqueFd fd = net::connectTcp(kLoopback, port, net::deadlineAfter(5s));
  uint8_t hello[auth::kHelloBytes];
  net::readFully(fd.get(), hello, sizeof(hello), net::deadlineAfter(5s));
  if (!reply.empty()) net::writeFully(fd.get(), reply.data(), reply.size(), net::deadlineAfter(5s));
  uint8_t byte = 0;
  try {
    net::readFully(fd.get(), &byte, 1, net::deadlineAfter(8s));
  } catch (const TransportError&) {
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
  return false;
}

TEST(tcpStoreRefusesClientsWithoutTheSecret) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  // The wrong secret: refused by the server (and the client says why).
  std::string message =
      messageOf<TransportError>([&] { TcpStore stranger(kLoopback, server.port(), 5s, "guess"); });
  CHECK(contains(message, "refused this rank's proof"));
  // A frame where the handshake should be, random bytes of the handshake's length, and silence
  // (closed at the handshake's deadline, 5 s): at once, so that the deadlines run together.
  const Bytes frame = storeproto::Encoder(storeproto::Op::Set).str("job").str("mine").finish();
  Bytes noise(auth::kReplyBytes);
  auth::randomBytes(noise.data(), noise.size());
  std::vector<std::future<bool>> closed;
  for (const Bytes& sent : {frame, noise, Bytes{}}) {
    closed.push_back(std::async(std::launch::async, closedAfterSending, server.port(), sent));
  }
  for (auto& each : closed) CHECK(each.get());
  CHECK(server.refusedConnections() >= 4);
  // Nothing they sent took effect, and the job's own clients are served.
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  messageOf<TimeoutError>([&] { store.get("job", 0ms); });
  store.set("job", bytesOf("ours"));
  CHECK_EQ(textOf(store.get("job", 1s)), "ours");
}

TEST(tcpStoreClientRefusesAServerWithoutTheSecret) {
  TcpStoreServer impostor(kLoopback, 0, "another job's secret");
  std::string message =
      messageOf<TransportError>([&] { TcpStore store(kLoopback, impostor.port(), 5s, kStoreSecret); });
  CHECK(contains(message, "the store at"));
}

TEST(tcpStoreFloodOfStrangersDoesNotKeepClientsOut) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  // More idle connections than the server lets wait in the handshake.
  std::vector<net::UniqueFd> flood;
  for (int i = 0; i < 400; ++i) {
    flood.push_back(net::connectTcp(kLoopback, server.port(), net::deadlineAfter(5s)));
  }
  const auto start = std::chrono::steady_clock::now();
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  store.set("k", bytesOf("v"));
  CHECK_EQ(textOf(store.get("k", 1s)), "v");
  CHECK(secondsBetween(start, std::chrono::steady_clock::now()) < 2.0);
}

TEST(tcpStoreBoundsWhatAClientMayStore) {
  TcpStoreServer server(kLoopback, 0, kStoreSecret);
  RawClient raw(server.port());
  using storeproto::Encoder;
  using storeproto::Op;
  // A key longer than the store takes: refused, and the connection goes on.
  raw.send(Encoder(Op::Set).str(std::string(storeproto::kMaxKeyBytes + 1, 'k')).str("v").finish());
  CHECK_EQ(int(raw.receive().at(0)), int(storeproto::Status::Error));
  // A check of more keys than a request may name.
  Encoder check(Op::Check);
  check.u32(storeproto::kMaxKeysPerCheck + 1);
  raw.send(check.finish());
  CHECK_EQ(int(raw.receive().at(0)), int(storeproto::Status::Error));
  // A length prefix beyond the largest frame ends the connection before anything is allocated.
  raw.send(Bytes{0xff, 0xff, 0xff, 0x7f});
  uint8_t byte = 0;
  messageOf<TransportError>([&] { net::readFully(raw.fd.get(), &byte, 1, net::deadlineAfter(5s)); });
  // A value over the limit never leaves the client.
  TcpStore store(kLoopback, server.port(), 5s, kStoreSecret);
  messageOf<InvalidArgument>([&] { store.set("big", Bytes(storeproto::kMaxValueBytes + 1)); });
}
