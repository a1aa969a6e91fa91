// The UCX network between two ranks (threads here, each with its own UCP worker): frames arrive in
// order with their headers, small and large (rendezvous); a stranger that knows a rank's worker
// address but not the job's secret gets nothing accepted, whatever it sends; nor does one that
// replays a rank's captured hello from an endpoint of its own.
// Built only where CMake found UCX.
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "common/deadline.h"
#include "ringcomm/config.h"
#include "ringcomm/store.h"
#include "transport/frame.h"
#include "transport/ucx/ucx_network.h"
#include "transport/ucx/ucx_wire.h"

using namespace ringcomm;
using namespace ringcomm::transport;
using namespace std::chrono_literals;

namespace {

bootstrap::Rendezvous twoRanksOnTwoHosts() {
  bootstrap::Rendezvous rendezvous;
  rendezvous.ranks.resize(2);
  rendezvous.ranks[0].hostId = "host-a";
  rendezvous.ranks[1].hostId = "host-b";
  return rendezvous;
}

Config configWith(const std::string& secret) {
  Config config;
  config.secret = secret;
  config.timeout = 20s;
  return config;
}

// Both ranks' networks, connected through `store` (each built on its own thread).
std::vector<std::unique_ptr<MessageNetwork>> connectTwo(Store& store, const std::string& secret) {
  std::vector<std::unique_ptr<MessageNetwork>> networks(2);
  std::vector<std::exception_ptr> failures(2);
  std::vector<std::thread> threads;
  const bootstrap::Rendezvous rendezvous = twoRanksOnTwoHosts();
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        OperationLabel label;
        label.collective = "connecting to peers over UCX";
        const Operation op(label, rank, 20s);
        networks[rank] = connectUcx(store, rank, rendezvous, {1 - rank}, configWith(secret), op,
                                    nullptr);
      } catch (...) {
        failures[rank] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
  return networks;
}

// Progresses both until `done`, or fails after 10 s.
template <typename Done>
void progressUntil(const std::vector<std::unique_ptr<MessageNetwork>>& networks, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    for (const auto& network : networks) network->progress();
    CHECK(std::chrono::steady_clock::now() < deadline);
  }
}

// A process that knows rank 0's worker address (its store entry) but not the secret: it speaks
// UCX to it directly, with the messages a rank would send.
class Stranger {
 public:
  explicit Stranger(const Bytes& published) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    ucp_config_t* config = nullptr;
    CHECK(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
    CHECK(ucp_init(&params, config, &context_) == UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t workerParams{};
    CHECK(ucp_worker_create(context_, &workerParams, &worker_) == UCS_OK);
    ucp_ep_params_t epParams{};
    epParams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    epParams.address =
        reinterpret_cast<const ucp_address_t*>(published.data() + ucx_wire::kAddressNonceBytes);
    CHECK(ucp_ep_create(worker_, &epParams, &endpoint_) == UCS_OK);
  }

  ~Stranger() {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* request = ucp_ep_close_nbx(endpoint_, &param);
    while (request != nullptr && !UCS_PTR_IS_ERR(request) &&
           ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp_worker_progress(worker_);
    }
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) ucp_request_free(request);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  // Sends an active message `id` with `header` and `payload`, as a rank would (asking for the
  // reply endpoint), and waits until it has left.
  void send(unsigned id, const void* header, size_t headerBytes,
            const std::vector<uint8_t>& payload,
            const std::vector<std::unique_ptr<MessageNetwork>>& networks) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    void* request = ucp_am_send_nbx(endpoint_, id, header, headerBytes, payload.data(),
                                    payload.size(), &param);
    CHECK(!UCS_PTR_IS_ERR(request));
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (request != nullptr && ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp_worker_progress(worker_);
      for (const auto& network : networks) network->progress();
      CHECK(std::chrono::steady_clock::now() < deadline);
    }
    if (request != nullptr) ucp_request_free(request);
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h endpoint_ = nullptr;
};

// Whatever a stranger sent, rank 1's own first frame is the first rank 0 takes from it.
void rankOnesFirstFrameArrivesFirst(
    const std::vector<std::unique_ptr<MessageNetwork>>& networks) {
  std::vector<uint8_t> real(8, 1);
  auto sent = std::make_shared<MessageNetwork::Completion>();
  networks[1]->send(0, 1, FrameHeader{kFrameMagic, 6, 0, 0, real.size()}, real.data(),
                    Memory::Host, sent);
  progressUntil(networks, [&] { return networks[0]->arrived(1, 1) != nullptr; });
  CHECK_EQ(networks[0]->arrived(1, 1)->tag, 6u);
}

}  // namespace

TEST(ucx_frames_arrive_in_order_small_and_rendezvous) {
  HashStore store;
  auto networks = connectTwo(store, "ucx unit test secret");
  // Each reaches the peer it was connected to, and only it: Transport puts that peer on it.
  CHECK(networks[0]->reaches(1) && !networks[0]->reaches(0) && !networks[0]->reaches(2));
  CHECK(networks[1]->reaches(0) && !networks[1]->reaches(1));
  const size_t large = 4 << 20;  // past every eager threshold: rendezvous
  std::vector<uint8_t> small(100, 7);
  std::vector<uint8_t> big(large);
  for (size_t i = 0; i < large; ++i) big[i] = static_cast<uint8_t>(i * 31 + 5);
  auto first = std::make_shared<MessageNetwork::Completion>();
  auto second = std::make_shared<MessageNetwork::Completion>();
  networks[1]->send(0, 1, FrameHeader{kFrameMagic, 11, 0, 0, small.size()}, small.data(),
                    Memory::Host, first);
  networks[1]->send(0, 2, FrameHeader{kFrameMagic, 12, 0, 0, big.size()}, big.data(),
                    Memory::Host, second);
  progressUntil(networks, [&] { return networks[0]->arrived(1, 2) != nullptr; });
  CHECK(networks[0]->arrived(1, 1) != nullptr);
  CHECK_EQ(networks[0]->arrived(1, 1)->tag, 11u);
  CHECK_EQ(networks[0]->arrived(1, 2)->bytes, large);
  std::vector<uint8_t> smallIn(small.size());
  std::vector<uint8_t> bigIn(large);
  auto took = std::make_shared<MessageNetwork::Completion>();
  networks[0]->receive(1, 1, smallIn.data(), Memory::Host, took);
  auto tookBig = std::make_shared<MessageNetwork::Completion>();
  networks[0]->receive(1, 2, bigIn.data(), Memory::Host, tookBig);
  progressUntil(networks, [&] {
    return took->isDone() && tookBig->isDone() && first->isDone() && second->isDone();
  });
  CHECK(took->failure.empty() && tookBig->failure.empty());
  CHECK(smallIn == small);
  CHECK(bigIn == big);
  // Device memory goes to UCX as such only where its lanes include CUDA ones, which `ringcomm
  // info` lists (Debian's UCX has none; the libucx-cu12 wheel has), in a UCX 1.20 or newer.
  const bool cudaLanes = ucxLanes().find("device memory: none") == std::string::npos;
  CHECK(cudaLanes || !networks[0]->takesDeviceMemory());
}

TEST(ucx_stranger_without_the_secret_gets_nothing_accepted) {
  HashStore store;
  auto networks = connectTwo(store, "the job's secret");
  Stranger stranger(store.get("ucx/0", 1s));
  std::vector<uint8_t> payload(64, 0xee);
  // A frame claiming to be rank 1's first, with no proof before it.
  ucx_wire::WireFrame frame{FrameHeader{kFrameMagic, 5, 0, 0, payload.size()}, 1, 1, 0};
  stranger.send(ucx_wire::kFrameMessage, &frame, sizeof(frame), payload, networks);
  // A hello with a wrong proof, then the frame again.
  ucx_wire::Hello hello{ucx_wire::kHelloMagic, 1, 0, 0, {}};
  stranger.send(ucx_wire::kHelloMessage, &hello, sizeof(hello), {}, networks);
  stranger.send(ucx_wire::kFrameMessage, &frame, sizeof(frame), payload, networks);
  // A goodbye, which would fail rank 0's link to rank 1 if taken.
  stranger.send(ucx_wire::kGoodbyeMessage, nullptr, 0, {}, networks);
  for (int i = 0; i < 100; ++i) networks[0]->progress();
  CHECK(networks[0]->arrived(1, 1) == nullptr);
  CHECK(networks[0]->failure(1).empty());
  rankOnesFirstFrameArrivesFirst(networks);
}

TEST(ucx_replayed_hello_from_another_endpoint_is_refused) {
  // Rank 1's hello to rank 0, as captured on the fabric (the proof is the same bytes each time:
  // made here from the secret, as rank 1 made it), replayed from a stranger's endpoint: it must
  // not make that endpoint speak for rank 1.
  const std::string secret = "the job's secret";
  HashStore store;
  auto networks = connectTwo(store, secret);
  const Bytes published = store.get("ucx/0", 1s);
  Stranger stranger(published);
  ucx_wire::Hello hello{ucx_wire::kHelloMagic, 1, 0, 0, {}};
  hello.proof = ucx_wire::proofOf(secret, hello, published.data());
  stranger.send(ucx_wire::kHelloMessage, &hello, sizeof(hello), {}, networks);
  std::vector<uint8_t> payload(64, 0xee);
  ucx_wire::WireFrame frame{FrameHeader{kFrameMagic, 5, 0, 0, payload.size()}, 1, 1, 0};
  stranger.send(ucx_wire::kFrameMessage, &frame, sizeof(frame), payload, networks);
  for (int i = 0; i < 100; ++i) networks[0]->progress();
  CHECK(networks[0]->arrived(1, 1) == nullptr);
  rankOnesFirstFrameArrivesFirst(networks);
}

TEST(ucx_ranks_with_different_secrets_do_not_connect) {
  HashStore store;
  const bootstrap::Rendezvous rendezvous = twoRanksOnTwoHosts();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      OperationLabel label;
      label.collective = "connecting to peers over UCX";
      const Operation op(label, rank, 1s);
      try {
        connectUcx(store, rank, rendezvous, {1 - rank},
                   configWith(rank == 0 ? "one secret" : "another secret"), op, nullptr);
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // The first to give up names the peers that never proved the secret; the other may instead
  // see that rank's links close as it goes.
  int unproven = 0;
  for (const std::string& error : errors) {
    const bool named = error.find("to prove the job's secret over UCX") != std::string::npos;
    unproven += named ? 1 : 0;
    CHECK(named || error.find("closed its UCX link") != std::string::npos);
  }
  CHECK(unproven >= 1);
}
