#include "transport/ucx/ucx_network.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "auth/handshake.h"
#include "bootstrap/rendezvous.h"
#include "common/bytes.h"
#include "common/failure.h"
#include "common/log.h"
#include "common/process.h"
#include "ringcomm/errors.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_wire.h"

namespace ringcomm::transport {
namespace {

using ucx_wire::Hello;
using ucx_wire::kFrameMessage;
using ucx_wire::kGoodbyeMessage;
using ucx_wire::kHelloMagic;
using ucx_wire::kHelloMessage;
using ucx_wire::kAddressNonceBytes;
using ucx_wire::proofOf;
using ucx_wire::WireFrame;

// How long setup waits for the store at once before it calls the watch again.
constexpr std::chrono::milliseconds kWatchInterval{100};
// How long closing the endpoints may take at teardown (a dead peer cannot answer).
constexpr std::chrono::milliseconds kCloseWait{1000};
// How long the teardown lets UCX finish what closing queued, and how many progress calls in a row
// that do nothing mean it has.
constexpr std::chrono::milliseconds kDrainWait{200};
constexpr int kIdleProgressCalls = 100;
// How often the processes of peers on this host are looked at (their lanes report no failure).
constexpr std::chrono::milliseconds kLocalPeerCheck{100};

// The loaded UCX, or an error saying why there is none and how to get it.
const UcxApi& requireUcx() {
  std::string whyNot;
  const UcxApi* api = ucxApi(&whyNot);
  if (api == nullptr) throw Error("ringcomm: RINGCOMM_TRANSPORT=ucx, but " + whyNot);
  return *api;
}

class UcxNetwork final : public MessageNetwork {
 public:
  // `netDevice`: the network interface UCX may use (UCX_NET_DEVICES), or "" for UCX's choice.
  UcxNetwork(int rank, int size, std::string secret, const std::string& netDevice)
      : ucx_(requireUcx()), rank_(rank), links_(size), secret_(std::move(secret)) {
    ucp_config_t* config = nullptr;
    ucs_status_t status = ucx_.ucp_config_read(nullptr, nullptr, &config);
    if (status != UCS_OK) fail("reading its configuration (UCX_* variables)", status);
    if (!netDevice.empty()) {
      status = ucx_.ucp_config_modify(config, "NET_DEVICES", netDevice.c_str());
      if (status != UCS_OK) {
        ucx_.ucp_config_release(config);
        fail("setting its NET_DEVICES to " + netDevice, status);
      }
    }
    // UCX's SysV segments are created group-writable (0660); its POSIX ones are this user's
    // alone. Unless UCX_TLS says otherwise, its shared memory goes over POSIX.
    if (std::getenv("UCX_TLS") == nullptr) {
      status = ucx_.ucp_config_modify(config, "TLS", "^sysv");
      if (status != UCS_OK) {
        ucx_.ucp_config_release(config);
        fail("leaving out its SysV shared memory (TLS=^sysv)", status);
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = "ringcomm";
    status = ucx_.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
    ucx_.ucp_config_release(config);
    if (status != UCS_OK) fail("ucp_init", status);
    takesDeviceMemory_ = movesCudaMemory();
    ucp_worker_params_t workerParams{};
    workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // The engine's thread drives the worker; close() may come from any (an abort). A UCX built
    // without threads (--enable-mt) gives a single-threaded worker: close() then signals.
    workerParams.thread_mode = UCS_THREAD_MODE_MULTI;
    status = ucx_.ucp_worker_create(context_, &workerParams, &worker_);
    if (status != UCS_OK) {
      ucx_.ucp_cleanup(context_);
      fail("ucp_worker_create", status);
    }
    ucp_worker_attr_t attributes{};
    attributes.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    multiThreaded_ = ucx_.ucp_worker_query(worker_, &attributes) == UCS_OK &&
                     attributes.thread_mode == UCS_THREAD_MODE_MULTI;
    status = ucx_.ucp_worker_get_efd(worker_, &eventFd_);
    if (status != UCS_OK) {
      teardown();
      fail("ucp_worker_get_efd", status);
    }
    setHandler(kHelloMessage, &dispatch<&UcxNetwork::onHello>, 0);
    // Frames' eager data stays UCX's (one copy into its descriptor, as into ours before), so
    // that every receive can have UCX unpack it, into device memory too (ucp_am_recv_data_nbx).
    setHandler(kFrameMessage, &dispatch<&UcxNetwork::onFrame>, UCP_AM_FLAG_PERSISTENT_DATA);
    setHandler(kGoodbyeMessage, &dispatch<&UcxNetwork::onGoodbye>, 0);
    auth::randomBytes(nonce_, kAddressNonceBytes);
    for (size_t peer = 0; peer < links_.size(); ++peer) {
      links_[peer].network = this;
      links_[peer].rank = static_cast<int>(peer);
    }
  }

  ~UcxNetwork() override { teardown(); }

  [[noreturn]] void fail(const std::string& what, ucs_status_t status) const {
    throw Error("ringcomm: UCX: " + what + " failed: " + ucx_.ucs_status_string(status));
  }

  const char* kind() const override { return "ucx"; }
  bool takesDeviceMemory() const override { return takesDeviceMemory_; }

  // Whether UCX moves CUDA memory here: it has CUDA lanes, and is 1.20 or newer. Older ones
  // need the buffer's CUDA context current on whichever thread progresses the worker (ringcomm
  // progresses from the engine's threads and from callers'), and abort otherwise; since 1.20
  // their CUDA lanes make the buffer's own context current themselves.
  bool movesCudaMemory() const {
    unsigned major = 0;
    unsigned minor = 0;
    unsigned release = 0;
    ucx_.ucp_get_version(&major, &minor, &release);
    if (major == 1 && minor < 20) return false;
    ucp_context_attr_t attributes{};
    attributes.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    return ucx_.ucp_context_query(context_, &attributes) == UCS_OK &&
           (attributes.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  }

  // This rank's nonce and worker address, for the store.
  Bytes publication() const {
    ucp_address_t* address = nullptr;
    size_t length = 0;
    const ucs_status_t status = ucx_.ucp_worker_get_address(worker_, &address, &length);
    if (status != UCS_OK) fail("ucp_worker_get_address", status);
    Bytes bytes(nonce_, nonce_ + kAddressNonceBytes);
    const uint8_t* at = reinterpret_cast<const uint8_t*>(address);
    bytes.insert(bytes.end(), at, at + length);
    ucx_.ucp_worker_release_address(worker_, address);
    return bytes;
  }

  // Opens the endpoint to `peer` from what it published, and sends it the proof. `localPid`: the
  // peer's process where it shares this host (0 otherwise): UCX's shared-memory lanes cannot
  // report a peer's failure, so this rank watches that process instead.
  void open(int peer, const Bytes& published, int localPid, bool eager) {
    if (published.size() <= kAddressNonceBytes) {
      throw Error("ringcomm: UCX: rank " + std::to_string(peer) + " published no worker address");
    }
    Link& link = links_[peer];
    std::memcpy(link.nonce, published.data(), kAddressNonceBytes);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(published.data() + kAddressNonceBytes);
    link.localPid = localPid;
    link.eager = eager;
    params.err_mode = localPid != 0 ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxNetwork::onEndpointError;
    params.err_handler.arg = &link;
    const ucs_status_t status = ucx_.ucp_ep_create(worker_, &params, &link.endpoint);
    if (status == UCS_ERR_UNREACHABLE) {
      // No lane of this rank's UCX reaches any of the peer's: what to set to give it one.
      throw Error("ringcomm: UCX: connecting to rank " + std::to_string(peer) + " failed: " +
                  ucx_.ucs_status_string(status) +
                  ": none of this rank's UCX devices and transports reaches the peer's. UCX uses "
                  "the interface ringcomm's TCP listens on (RINGCOMM_SOCKET_IFNAME names it, "
                  "per host) unless UCX_NET_DEVICES is set; check UCX_NET_DEVICES and UCX_TLS "
                  "on both hosts (ucx_info -d lists the devices), or use RINGCOMM_TRANSPORT=tcp");
    }
    if (status != UCS_OK) {
      fail("connecting to rank " + std::to_string(peer), status);
    }
    expected_.insert(peer);
    sendHello(peer, 0);
  }

  // Whether every peer opened has proved the secret here and accepted this rank's proof.
  bool everyoneProven() const {
    for (int peer : expected_) {
      if (!provenBothWays(peer)) return false;
    }
    return true;
  }

  // Whether `peer` proved the secret here and accepted this rank's proof: its part of the setup
  // is done, and what it does next (it may finish a collective and close while this rank still
  // waits for another peer's proof) is the communicator's to see, not the setup's.
  bool provenBothWays(int peer) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return links_[peer].proven && links_[peer].accepted;
  }

  std::string unproven() const {
    std::ostringstream text;
    for (int peer : expected_) {
      if (provenBothWays(peer)) continue;
      text << (text.tellp() > 0 ? ", " : "") << peer;
    }
    return text.str();
  }

  size_t refused() const { return refused_; }

  // What UCX chose for the endpoint to `peer` (its lanes), as ucp_ep_print_info writes it.
  std::string lanesTo(int peer) const {
    char* text = nullptr;
    size_t length = 0;
    FILE* stream = open_memstream(&text, &length);
    if (stream == nullptr) return {};
    ucx_.ucp_ep_print_info(links_[peer].endpoint, stream);
    std::fclose(stream);
    std::string lanes;
    std::istringstream lines(std::string(text, length));
    std::free(text);
    for (std::string line; std::getline(lines, line);) {
      // "#   lane[0]:  3:tcp/eth0.0 md[1]  ... am am_bw#0" : the lane lines say it all
      const size_t at = line.find("lane[");
      if (at == std::string::npos) continue;
      std::string lane;
      for (char c : line.substr(at)) {  // its columns' padding collapsed
        if (c != ' ' || (!lane.empty() && lane.back() != ' ')) lane += c;
      }
      lanes += (lanes.empty() ? "" : "; ") + lane;
    }
    return lanes;
  }

  void send(int peer, uint64_t sequence, const FrameHeader& header, const void* data,
            Memory memory, std::shared_ptr<Completion> completion) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Link& link = links_[peer];
    if (!link.failure.empty() || closing_) {
      finish(*completion, closing_ ? closedText(peer) : link.failure);
      return;
    }
    auto* state = new Operation_{this, peer, std::move(completion), {}, {}};
    state->header = WireFrame{header, sequence, static_cast<uint32_t>(rank_), 0};
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    // The receiver learns which endpoint sent it. Device memory goes as UCX chooses: its CUDA
    // protocols (a rendezvous by IPC or GPUDirect, staging of its own) are not TCP's.
    const bool eager = link.eager && memory == Memory::Host;
    param.flags = UCP_AM_SEND_FLAG_REPLY | (eager ? UCP_AM_SEND_FLAG_EAGER : 0);
    param.cb.send = &UcxNetwork::onSent;
    param.user_data = state;
    describeMemory(param, data, header.bytes, memory);
    const ucs_status_ptr_t request =
        ucx_.ucp_am_send_nbx(link.endpoint, kFrameMessage, &state->header, sizeof(WireFrame),
                             data, header.bytes, &param);
    settle(request, state);
  }

  const FrameHeader* arrived(int peer, uint64_t sequence) override {
    // The arrival stays where it is until receive() takes it, on this same thread.
    std::lock_guard<std::mutex> lock(mutex_);
    auto& arrivals = links_[peer].arrivals;
    auto found = arrivals.find(sequence);
    return found == arrivals.end() ? nullptr : &found->second.header.frame;
  }

  void receive(int peer, uint64_t sequence, void* data, Memory memory,
               std::shared_ptr<Completion> completion) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& arrivals = links_[peer].arrivals;
    auto found = arrivals.find(sequence);
    Arrival arrival = std::move(found->second);
    arrivals.erase(found);
    // Into device memory UCX unpacks the data it holds (a rendezvous, or eager data it kept:
    // the frame handler asks it to keep all); what was copied out of its callback is host data
    // for host memory only.
    const bool unpackByUcx =
        arrival.rendezvous || (memory == Memory::Cuda && arrival.persistent);
    if (unpackByUcx) {
      auto* state = new Operation_{this, peer, std::move(completion), {}, {}};
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = &UcxNetwork::onReceived;
      param.user_data = state;
      describeMemory(param, data, arrival.length, memory);
      // Releases eager data it unpacks, as ucp_am_data_release would.
      const ucs_status_ptr_t request =
          ucx_.ucp_am_recv_data_nbx(worker_, arrival.data, data, arrival.length, &param);
      settle(request, state);
      return;
    }
    if (memory == Memory::Cuda && arrival.length > 0) {
      finish(*completion, "UCX handed over a message from rank " + std::to_string(peer) +
                              " without keeping it, which cannot go to device memory");
      return;
    }
    if (arrival.length > 0) {
      copyBytes(data, arrival.persistent ? arrival.data : arrival.copy.data(), arrival.length);
    }
    if (arrival.persistent) ucx_.ucp_am_data_release(worker_, arrival.data);
    finish(*completion, {});
  }

  void registerMemory(void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = data;
    params.length = bytes;
    ucp_mem_h memory = nullptr;
    // Where it fails (no room to pin), messages register on their own, as unregistered ones do.
    if (ucx_.ucp_mem_map(context_, &params, &memory) != UCS_OK) return;
    registered_[reinterpret_cast<uintptr_t>(data)] = Region{bytes, memory};
  }

  void forgetMemory(void* data) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = registered_.find(reinterpret_cast<uintptr_t>(data));
    if (found == registered_.end()) return;
    ucx_.ucp_mem_unmap(context_, found->second.memory);
    registered_.erase(found);
  }

  bool progress() override {
    std::lock_guard<std::mutex> lock(mutex_);
    driver_ = std::this_thread::get_id();
    if (closing_.load(std::memory_order_relaxed) && !closed_) closeEndpoints();
    watchLocalPeers();
    const uint64_t before = activity_;
    while (ucx_.ucp_worker_progress(worker_) != 0) {
    }
    answerHellos();
    return activity_ != before;
  }

  int eventFd() const override { return eventFd_; }

  bool readyToSleep() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_.load(std::memory_order_relaxed) && !closed_) return false;
    return ucx_.ucp_worker_arm(worker_) == UCS_OK;
  }

  std::string failure(int peer) const override {
    if (closing_.load(std::memory_order_relaxed)) return closedText(peer);
    std::lock_guard<std::mutex> lock(mutex_);
    return links_[peer].failure;
  }

  void close() override {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_.store(true, std::memory_order_relaxed);
    if (closed_) return;
    // A worker that takes calls from any thread closes now, so that peers waiting on this rank
    // fail at once even while the thread driving it is idle; otherwise that thread does it at
    // its next progress (woken, where it sleeps; ucp_worker_signal is for any thread).
    if (multiThreaded_ || driver_ == std::this_thread::get_id()) {
      closeEndpoints();
    } else {
      ucx_.ucp_worker_signal(worker_);
    }
  }

 private:
  struct Arrival {
    WireFrame header{};
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
    uint8_t nonce[kAddressNonceBytes] = {};
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
    WireFrame header;  // a frame's or a hello's: UCX reads it until the send completes
    Hello hello;
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
                      Memory memory) const {
    if (memory == Memory::Cuda) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      param.memory_type = UCS_MEMORY_TYPE_CUDA;
      return;
    }
    if (registered_.empty() || bytes == 0) return;
    const auto at = reinterpret_cast<uintptr_t>(data);
    auto found = registered_.upper_bound(at);
    if (found == registered_.begin()) return;
    --found;
    if (at + bytes > found->first + found->second.bytes) return;
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = found->second.memory;
  }

  static void finish(Completion& completion, const std::string& failure) {
    completion.failure = failure;
    completion.done.store(true, std::memory_order_release);
  }

  std::string closedText(int peer) const {
    return "the UCX link to rank " + std::to_string(peer) + " was closed on this rank";
  }

  void settle(ucs_status_ptr_t request, Operation_* state) {
    if (request == nullptr) {
      finish(*state->completion, {});
      delete state;
    } else if (UCS_PTR_IS_ERR(request)) {
      finish(*state->completion, "UCX could not move a message to or from rank " +
                                     std::to_string(state->peer) + ": " +
                                     ucx_.ucs_status_string(UCS_PTR_STATUS(request)));
      delete state;
    } else {
      state->request = request;  // the callback finishes it
      inFlight_.insert(state);
    }
  }

  void ended(void* request, ucs_status_t status, Operation_* state) {
    std::string failure;
    if (status != UCS_OK) {
      const std::string& cause = links_[state->peer].failure;
      failure = !cause.empty() ? cause
                               : "UCX could not move a message to or from rank " +
                                     std::to_string(state->peer) + ": " +
                                     ucx_.ucs_status_string(status);
    }
    finish(*state->completion, failure);
    inFlight_.erase(state);
    delete state;
    ucx_.ucp_request_free(request);
    ++activity_;
  }

  static void onSent(void* request, ucs_status_t status, void* user) {
    auto* state = static_cast<Operation_*>(user);
    state->network->ended(request, status, state);
  }

  static void onReceived(void* request, ucs_status_t status, size_t, void* user) {
    auto* state = static_cast<Operation_*>(user);
    state->network->ended(request, status, state);
  }

  static void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* link = static_cast<Link*>(arg);
    const UcxApi& ucx_ = link->network->ucx_;
    if (link->failure.empty()) {
      link->failure = status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT
                          ? "rank " + std::to_string(link->rank) +
                                " closed its UCX link (it died or aborted: " +
                                ucx_.ucs_status_string(status) + ")"
                          : "the UCX link to rank " + std::to_string(link->rank) + " failed (" +
                                ucx_.ucs_status_string(status) + ")";
    }
    link->network->forgetProofsOf(link->rank);
    ++link->network->activity_;
  }

  // The endpoints `rank` proved the secret on are gone with its link: UCX may give their
  // addresses to new connections, which must prove it afresh.
  void forgetProofsOf(int rank) {
    for (auto it = provenSenders_.begin(); it != provenSenders_.end();) {
      it = it->second == rank ? provenSenders_.erase(it) : std::next(it);
    }
  }

  using Handler = ucs_status_t (UcxNetwork::*)(const void*, size_t, void*, size_t,
                                               const ucp_am_recv_param_t*);
  template <Handler handler>
  static ucs_status_t dispatch(void* arg, const void* header, size_t headerLength, void* data,
                               size_t length, const ucp_am_recv_param_t* param) {
    return (static_cast<UcxNetwork*>(arg)->*handler)(header, headerLength, data, length, param);
  }

  void setHandler(unsigned id, ucp_am_recv_callback_t callback, uint32_t flags) {
    ucp_am_handler_param_t param{};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    param.id = id;
    param.flags = flags;
    param.cb = callback;
    param.arg = this;
    const ucs_status_t status = ucx_.ucp_worker_set_am_recv_handler(worker_, &param);
    if (status != UCS_OK) {
      teardown();
      fail("ucp_worker_set_am_recv_handler", status);
    }
  }

  // The endpoint a message came from, when its sender said (UCP_AM_SEND_FLAG_REPLY).
  static ucp_ep_h senderOf(const ucp_am_recv_param_t* param) {
    return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
  }

  ucs_status_t onHello(const void* header, size_t headerLength, void*, size_t length,
                       const ucp_am_recv_param_t* param) {
    ++activity_;
    Hello hello;
    const ucp_ep_h sender = senderOf(param);
    if (headerLength != sizeof(Hello) || length != 0 || sender == nullptr) return refuse();
    std::memcpy(&hello, header, sizeof(Hello));
    const int from = static_cast<int>(hello.from);
    if (hello.magic != kHelloMagic || static_cast<int>(hello.to) != rank_ || from < 0 ||
        from >= static_cast<int>(links_.size()) || from == rank_ || hello.answer > 1 ||
        !auth::sameDigest(hello.proof, proofOf(secret_, hello, nonce_))) {
      return refuse();
    }
    // The first endpoint to prove a rank keeps it: a proof from any other is a replay.
    auto known = provenSenders_.find(sender);
    if (known != provenSenders_.end() && known->second != from) return refuse();
    Link& link = links_[from];
    if (link.prover != nullptr && link.prover != sender) {
      if (!link.replayLogged) {
        link.replayLogged = true;
        RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                     "UCX: refused rank %d's proof of the secret from a second endpoint (a "
                     "replay of its hello captured on the fabric): only the first speaks for it",
                     from);
      }
      return refuse();
    }
    link.prover = sender;
    provenSenders_[sender] = from;
    if (hello.answer == 0) {
      link.proven = true;
      helloesToAnswer_.push_back(from);  // not from inside UCX's callback
    } else {
      link.accepted = true;
    }
    return UCS_OK;
  }

  ucs_status_t onFrame(const void* header, size_t headerLength, void* data, size_t length,
                       const ucp_am_recv_param_t* param) {
    ++activity_;
    if (closed_) return UCS_OK;  // nobody will take it: nothing kept for the teardown
    auto known = provenSenders_.find(senderOf(param));
    WireFrame frame;
    if (headerLength != sizeof(WireFrame) || known == provenSenders_.end()) return refuse();
    std::memcpy(&frame, header, sizeof(WireFrame));
    const int from = known->second;
    Link& link = links_[from];
    if (static_cast<int>(frame.from) != from || !link.proven ||
        link.arrivals.count(frame.sequence) != 0) {
      return refuse();
    }
    Arrival arrival;
    arrival.header = frame;
    arrival.header.frame.bytes = length;  // what came, whatever the header claims
    arrival.length = length;
    ucs_status_t keep = UCS_OK;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      arrival.rendezvous = true;
      arrival.data = data;
      keep = UCS_INPROGRESS;
    } else if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0) {
      arrival.persistent = true;
      arrival.data = data;
      keep = UCS_INPROGRESS;
    } else if (length > 0) {
      const uint8_t* at = static_cast<const uint8_t*>(data);
      arrival.copy.assign(at, at + length);
    }
    link.arrivals.emplace(frame.sequence, std::move(arrival));
    return keep;
  }

  ucs_status_t onGoodbye(const void*, size_t, void*, size_t, const ucp_am_recv_param_t* param) {
    ++activity_;
    auto known = provenSenders_.find(senderOf(param));
    if (known == provenSenders_.end()) return refuse();
    Link& link = links_[known->second];
    if (link.failure.empty()) {
      link.failure =
          "rank " + std::to_string(link.rank) + " closed its connection (it died or aborted)";
    }
    return UCS_OK;
  }

  ucs_status_t refuse() {
    ++refused_;
    return UCS_OK;  // UCX drops it (a rendezvous's sender completes without its data read)
  }

  void sendHello(int peer, uint32_t answer) {
    Link& link = links_[peer];
    auto* state = new Operation_{this, peer, std::make_shared<Completion>(), {}, {}};
    Hello& hello = state->hello;
    hello = Hello{kHelloMagic, static_cast<uint32_t>(rank_), static_cast<uint32_t>(peer), answer,
                  {}};
    hello.proof = proofOf(secret_, hello, link.nonce);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    param.cb.send = &UcxNetwork::onSent;
    param.user_data = state;
    settle(ucx_.ucp_am_send_nbx(link.endpoint, kHelloMessage, &state->hello, sizeof(Hello),
                                nullptr, 0, &param),
           state);
  }

  // A hello that came before this rank opened its own endpoint to the sender waits for it.
  void answerHellos() {
    std::vector<int> answering;
    answering.swap(helloesToAnswer_);
    for (int peer : answering) {
      const Link& link = links_[peer];
      if (!link.failure.empty()) continue;
      if (link.endpoint == nullptr) {
        if (!closed_) helloesToAnswer_.push_back(peer);
        continue;
      }
      sendHello(peer, 1);
    }
  }

  // Peers on this host: a process gone is a failed link (checked every kLocalPeerCheck).
  void watchLocalPeers() {
    const Clock::time_point now = Clock::now();
    if (now - lastLocalCheck_ < kLocalPeerCheck) return;
    lastLocalCheck_ = now;
    for (Link& link : links_) {
      if (link.localPid == 0 || !link.failure.empty() || !processGone(link.localPid)) continue;
      link.failure = "rank " + std::to_string(link.rank) + " (pid " +
                     std::to_string(link.localPid) + ") exited";
      ++activity_;
    }
  }

  void closeEndpoints() {
    closed_ = true;
    // What peers sent that nobody will take, first: a rendezvous released tells its sender, on
    // the endpoint it came by (the teardown drains that before the worker goes). Not draining
    // here: an aborting rank's engine has its failure to hand on, which peers wait for.
    releaseArrivals();
    // The goodbyes first: once sent they are on the wire (or in the peer's shared-memory queue),
    // which a forced close does not take back. A peer that cannot take them is cut off when the
    // wait runs out.
    std::vector<void*> sending;
    for (Link& link : links_) {
      if (link.endpoint == nullptr || !link.failure.empty()) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_AM_SEND_FLAG_REPLY;
      const ucs_status_ptr_t request =
          ucx_.ucp_am_send_nbx(link.endpoint, kGoodbyeMessage, nullptr, 0, nullptr, 0, &param);
      if (request != nullptr && !UCS_PTR_IS_ERR(request)) sending.push_back(request);
    }
    awaitRequests(sending);
    // Forced: a flushing close waits for peers that may never answer (the dead, the busy).
    std::vector<void*> closing;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    for (Link& link : links_) {
      if (link.endpoint == nullptr) continue;
      const ucs_status_ptr_t request = ucx_.ucp_ep_close_nbx(link.endpoint, &param);
      link.endpoint = nullptr;
      if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing.push_back(request);
    }
    awaitRequests(closing);
  }

  void releaseArrivals() {
    for (Link& link : links_) {
      for (auto& [sequence, arrival] : link.arrivals) {
        if (arrival.rendezvous || arrival.persistent) {
          ucx_.ucp_am_data_release(worker_, arrival.data);
        }
      }
      link.arrivals.clear();
    }
  }

  // Progresses until UCX has nothing left to do, for kDrainWait at most: what closing and
  // releasing queued (a cancelled rendezvous, an endpoint's disconnect) must not be pending on
  // an endpoint when the worker destroys it.
  void drain() {
    const Clock::time_point deadline = Clock::now() + kDrainWait;
    int idle = 0;
    while (idle < kIdleProgressCalls && Clock::now() < deadline) {
      idle = ucx_.ucp_worker_progress(worker_) == 0 ? idle + 1 : 0;
    }
  }

  // Progresses until `requests` complete, for kCloseWait at most, and frees them.
  void awaitRequests(std::vector<void*>& requests) {
    const Clock::time_point deadline = Clock::now() + kCloseWait;
    while (!requests.empty() && Clock::now() < deadline) {
      ucx_.ucp_worker_progress(worker_);
      for (auto it = requests.begin(); it != requests.end();) {
        if (ucx_.ucp_request_check_status(*it) != UCS_INPROGRESS) {
          ucx_.ucp_request_free(*it);
          it = requests.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (void* request : requests) ucx_.ucp_request_free(request);
    requests.clear();
  }

  void teardown() {
    if (worker_ != nullptr) {
      if (!closed_) closeEndpoints();
      releaseArrivals();
      drain();
      for (auto& [start, region] : registered_) ucx_.ucp_mem_unmap(context_, region.memory);
      registered_.clear();
      // What a lost peer never answered (a rendezvous it was to read, on a lane that reports no
      // failure) UCX warns of as the worker goes: accounted for here, so not a warning.
      ucs_log_component_config_t& log = ucx_.globalOptions->log_component;
      const ucs_log_level_t level = log.log_level;
      if (!inFlight_.empty() && level == UCS_LOG_LEVEL_WARN) log.log_level = UCS_LOG_LEVEL_ERROR;
      ucx_.ucp_worker_destroy(worker_);
      log.log_level = level;
      worker_ = nullptr;
      for (Operation_* state : inFlight_) {
        finish(*state->completion, closedText(state->peer));
        delete state;
      }
      inFlight_.clear();
    }
    if (context_ != nullptr) {
      ucx_.ucp_cleanup(context_);
      context_ = nullptr;
    }
  }

  const UcxApi& ucx_;
  int rank_;
  std::vector<Link> links_;
  std::string secret_;
  uint8_t nonce_[kAddressNonceBytes] = {};
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

}  // namespace

std::string ucxHeaders() {
  return std::to_string(UCP_API_MAJOR) + "." + std::to_string(UCP_API_MINOR);
}

std::string ucxVersion(std::string* whyNot) {
  const UcxApi* ucx = ucxApi(whyNot);
  if (ucx == nullptr) return "";
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  ucx->ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

// UCX's network device: the interface ringcomm's own TCP listens on (RINGCOMM_SOCKET_IFNAME,
// the listen address, or the route to the store), whatever each host calls it. UCX's choice
// where UCX_NET_DEVICES is set, where this host has RDMA (its devices are UCX's to pick, and
// TCP's interface is not theirs), or where the ranks listen on loopback (one host).
static std::string netDeviceFor(const std::string& listenAddress) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr || ucxOffersRdma()) return "";
  if (listenAddress.empty() || listenAddress.rfind("127.", 0) == 0) return "";
  return bootstrap::interfaceOf(listenAddress);
}

std::unique_ptr<MessageNetwork> connectUcx(Store& store, int rank,
                                           const bootstrap::Rendezvous& rendezvous,
                                           const std::vector<int>& peers, const Config& config,
                                           const Operation& op,
                                           const std::function<void()>& watch) {
  const int size = static_cast<int>(rendezvous.ranks.size());
  auto network = std::make_unique<UcxNetwork>(rank, size, config.secret,
                                              netDeviceFor(rendezvous.ranks[rank].address));
  const bool rendezvousChosen = std::getenv("UCX_RNDV_THRESH") != nullptr;
  store.set("ucx/" + std::to_string(rank), network->publication());
  std::vector<std::string> keys;
  for (int peer : peers) keys.push_back("ucx/" + std::to_string(peer));
  for (;;) {
    try {
      store.wait(keys, std::max(std::chrono::milliseconds(1),
                                std::min(kWatchInterval, op.remaining())));
      break;
    } catch (const TimeoutError&) {
      if (watch) watch();
      if (op.expired()) {
        raisePeerFailure<TimeoutError>(op, -1, "timed out waiting for peers' UCX addresses");
      }
    }
  }
  for (int peer : peers) {
    try {
      const bootstrap::RankRecord& record = rendezvous.ranks[peer];
      const bool sameHost = record.hostId == rendezvous.ranks[rank].hostId;
      // To another host without RDMA at both ends the lane is TCP, where a rendezvous only adds
      // round trips (nothing is read in place): frames go eager, as UCX_RNDV_THRESH=inf would
      // have it for them alone (1 MiB all-reduces 1.4x as fast over 1 Gbit/s). Within a host,
      // and over RDMA, UCX chooses (cross-memory attach, zero-copy). UCX_RNDV_THRESH decides
      // where a user sets it.
      const bool rdma = record.rdma && rendezvous.ranks[rank].rdma;
      network->open(peer, store.get("ucx/" + std::to_string(peer), op.remaining()),
                    sameHost ? record.pid : 0, !sameHost && !rdma && !rendezvousChosen);
    } catch (const PeerError&) {
      throw;
    } catch (const Error& error) {
      raisePeerFailure<TransportError>(op, peer, error.what());
    }
  }
  auto lastWatch = Clock::now();
  while (!network->everyoneProven()) {
    if (!network->progress() && network->readyToSleep()) {
      pollfd fd{network->eventFd(), POLLIN, 0};
      ::poll(&fd, 1, static_cast<int>(std::min(kWatchInterval, op.remaining()).count()));
    }
    for (int peer : peers) {
      if (network->provenBothWays(peer)) continue;
      const std::string failure = network->failure(peer);
      if (!failure.empty()) raisePeerFailure<TransportError>(op, peer, failure);
    }
    if (watch && Clock::now() - lastWatch >= kWatchInterval) {
      watch();
      lastWatch = Clock::now();
    }
    if (op.expired()) {
      raisePeerFailure<TimeoutError>(op, -1,
                                     "timed out waiting for ranks " + network->unproven() +
                                         " to prove the job's secret over UCX");
    }
  }
  if (network->refused() > 0) {
    RINGCOMM_LOG(LogLevel::Warn, kLogAuth,
                 "rank %d dropped %zu UCX message(s) from endpoints that had not proved the "
                 "job's secret (strangers, or ranks of another job)",
                 rank, network->refused());
  }
  RINGCOMM_LOG(LogLevel::Info, kLogAuth,
               "%zu UCX link(s) proved the job's secret both ways (HMAC-SHA256 over a fresh "
               "nonce) before any frame; their payloads travel unsealed",
               peers.size());
  if (log::enabled(LogLevel::Info, kLogTransport)) {
    for (int peer : peers) {
      RINGCOMM_LOG(LogLevel::Info, kLogTransport, "rank %d over UCX %s: %s", peer,
                   ucxVersion().c_str(), network->lanesTo(peer).c_str());
    }
  }
  return network;
}

}  // namespace ringcomm::transport
