// UcxNetwork: the MessageNetwork over one UCP worker, with an endpoint per peer.
//
// Defined in three parts: ucx_worker.cc (the worker and its endpoints: made, progressed, closed),
// ucx_messages.cc (frames sent and received, registered memory) and ucx_proof.cc (the proof of
// the job's secret an endpoint gives before its frames count). connectUcx (ucx_network.cc) makes
// one; ucx_network.h says what it guarantees.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/deadline.h"
#include "ringcomm/errors.h"
#include "ringcomm/store.h"
#include "transport/frame.h"
#include "transport/message_network.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_wire.h"

namespace ringcomm::transport {

class UcxNetwork final : public MessageNetwork {
 public:
  // `netDevice`: the network interface UCX may use (UCX_NET_DEVICES), or "" for UCX's choice.
  UcxNetwork(int rank, int size, std::string secret, const std::string& netDevice);

  ~UcxNetwork() override { teardown(); }

  [[noreturn]] void fail(const std::string& what, ucs_status_t status) const {
    throw Error("ringcomm: UCX: " + what + " failed: " + ucx_.ucs_status_string(status));
  }

  const char* kind() const override { return "ucx"; }
  bool reaches(int peer) const override {
    return peer >= 0 && peer < static_cast<int>(links_.size()) && links_[peer].opened;
  }
  bool takesDeviceMemory() const override { return takesDeviceMemory_; }

  // Whether UCX moves CUDA memory here: it has CUDA lanes, and is 1.20 or newer. Older ones
  // need the buffer's CUDA context current on whichever thread progresses the worker (ringcomm
  // progresses from the engine's threads and from callers'), and abort otherwise; since 1.20
  // their CUDA lanes make the buffer's own context current themselves.
  bool movesCudaMemory() const;

  // This rank's nonce and worker address, for the store.
  Bytes publication() const;

  // Opens the endpoint to `peer` from what it published, and sends it the proof. `localPid`: the
  // peer's process where it shares this host (0 otherwise): UCX's shared-memory lanes cannot
  // report a peer's failure, so this rank watches that process instead.
  void open(int peer, const Bytes& published, int localPid, bool eager);

  // Whether every peer opened has proved the secret here and accepted this rank's proof.
  bool everyoneProven() const;

  // Whether `peer` proved the secret here and accepted this rank's proof: its part of the setup
  // is done, and what it does next (it may finish a collective and close while this rank still
  // waits for another peer's proof) is the communicator's to see, not the setup's.
  bool provenBothWays(int peer) const;

  std::string unproven() const;

  size_t refused() const { return refused_; }

  // What UCX chose for the endpoint to `peer` (its lanes), as ucp_ep_print_info writes it.
  std::string lanesTo(int peer) const;

  void send(int peer, uint64_t sequence, const FrameHeader& header, const void* data,
            Memory memory, std::shared_ptr<Completion> completion) override;

  const FrameHeader* arrived(int peer, uint64_t sequence) override;

  void receive(int peer, uint64_t sequence, void* data, Memory memory,
               std::shared_ptr<Completion> completion) override;

  void registerMemory(void* data, size_t bytes) override;

  void forgetMemory(void* data) override;

  bool progress() override;

  int eventFd() const override { return eventFd_; }

  bool readyToSleep() override;

  std::string failure(int peer) const override;

  void close() override;

 private:
  struct Arrival {
    ucx_wire::WireFrame header{};
    void* data = nullptr;  // UCX's: persistent data, or the rendezvous descriptor
    size_t length = 0;
    bool rendezvous = false;
    bool persistent = false;
    Bytes copy;  // data UCX does not keep past the callback
  };
  struct Link {
    UcxNetwork* network = nullptr;
    int rank = -1;
    ucp_ep_h endpoint = nullptr;
    uint8_t nonce[ucx_wire::kAddressNonceBytes] = {};
    bool opened = false;  // open() made its endpoint: this network reaches it
    int localPid = 0;  // watched for its exit (a peer on this host), or 0
    bool eager = false;  // every frame eager (see connectUcx)
    bool proven = false;    // it proved the secret here
    bool accepted = false;  // it accepted this rank's proof
    // The endpoint its proof first came on: the only one that may speak for it. A proof is the
    // same bytes every time (the nonce is the communicator's), so another endpoint bringing it
    // replays one captured on the fabric.
    ucp_ep_h prover = nullptr;
    bool replayLogged = false;
    std::string failure;
    std::map<uint64_t, Arrival> arrivals;  // by sequence; UCX may deliver them out of order
  };
  // A send or rendezvous receive in flight: UCX's callback ends it.
  struct Operation_ {
    UcxNetwork* network;
    int peer;
    std::shared_ptr<Completion> completion;
    ucx_wire::WireFrame header;  // a frame's or a hello's: UCX reads it until the send completes
    ucx_wire::Hello hello;
    void* request = nullptr;  // UCX's, while in flight
  };

  struct Region {
    size_t bytes;
    ucp_mem_h memory;
  };

  // Says what memory [data, data + bytes) is: device memory as such (UCX still finds out which
  // device through its memory-type cache), host memory by the registration that holds it, where
  // one does.
  void describeMemory(ucp_request_param_t& param, const void* data, size_t bytes,
                      Memory memory) const;

  static void finish(Completion& completion, const std::string& failure) {
    completion.failure = failure;
    completion.done.store(true, std::memory_order_release);
  }

  std::string closedText(int peer) const;

  void settle(ucs_status_ptr_t request, Operation_* state);

  void ended(void* request, ucs_status_t status, Operation_* state);

  static void onSent(void* request, ucs_status_t status, void* user);

  static void onReceived(void* request, ucs_status_t status, size_t, void* user);

  static void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status);

  // The endpoints `rank` proved the secret on are gone with its link: UCX may give their
  // addresses to new connections, which must prove it afresh.
  void forgetProofsOf(int rank);

  using Handler = ucs_status_t (UcxNetwork::*)(const void*, size_t, void*, size_t,
                                               const ucp_am_recv_param_t*);
  template <Handler handler>
  static ucs_status_t dispatch(void* arg, const void* header, size_t headerLength, void* data,
                               size_t length, const ucp_am_recv_param_t* param) {
    return (static_cast<UcxNetwork*>(arg)->*handler)(header, headerLength, data, length, param);
  }

  void setHandler(unsigned id, ucp_am_recv_callback_t callback, uint32_t flags);

  // The endpoint a message came from, when its sender said (UCP_AM_SEND_FLAG_REPLY).
  static ucp_ep_h senderOf(const ucp_am_recv_param_t* param) {
    return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
  }

  ucs_status_t onHello(const void* header, size_t headerLength, void*, size_t length,
                       const ucp_am_recv_param_t* param);

  ucs_status_t onFrame(const void* header, size_t headerLength, void* data, size_t length,
                       const ucp_am_recv_param_t* param);

  ucs_status_t onGoodbye(const void*, size_t, void*, size_t, const ucp_am_recv_param_t* param);

  ucs_status_t refuse();

  void sendHello(int peer, uint32_t answer);

  // A hello that came before this rank opened its own endpoint to the sender waits for it.
  void answerHellos();

  // Peers on this host: a process gone is a failed link (checked every kLocalPeerCheck, ucx_worker.cc).
  void watchLocalPeers();

  void closeEndpoints();

  void releaseArrivals();

  // Progresses until UCX has nothing left to do, for kDrainWait at most: what closing and
  // releasing queued (a cancelled rendezvous, an endpoint's disconnect) must not be pending on
  // an endpoint when the worker destroys it.
  void drain();

  // Progresses until `requests` complete, for kCloseWait at most, and frees them.
  void awaitRequests(std::vector<void*>& requests);

  void teardown();

  const UcxApi& ucx_;
  int rank_;
  std::vector<Link> links_;
  std::string secret_;
  uint8_t nonce_[ucx_wire::kAddressNonceBytes] = {};
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;
  std::set<int> expected_;
  std::set<Operation_*> inFlight_;  // sends and rendezvous receives UCX has not ended
  std::map<uintptr_t, Region> registered_;  // by start address
  std::unordered_map<ucp_ep_h, int> provenSenders_;  // endpoints that proved a rank's secret
  std::vector<int> helloesToAnswer_;
  uint64_t activity_ = 0;  // callbacks so far: progress() reports whether any ran
  size_t refused_ = 0;
  Clock::time_point lastLocalCheck_{};
  std::atomic<bool> closing_{false};
  // Guards what follows and every call into UCX: the engine's thread, and one that closes.
  mutable std::mutex mutex_;
  bool multiThreaded_ = false;
  bool takesDeviceMemory_ = false;  // UCX has CUDA lanes (UCS_MEMORY_TYPE_CUDA)
  std::thread::id driver_;  // the thread that progresses the worker
  bool closed_ = false;
};

}  // namespace ringcomm::transport
