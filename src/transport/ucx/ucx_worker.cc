// The UCX worker and its endpoints: made from the configuration and the peers' addresses,
// progressed, and closed (UcxNetwork, ucx_worker.h).
#include "transport/ucx/ucx_worker.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "auth/handshake.h"
#include "common/process.h"
#include "ringcomm/errors.h"

namespace ringcomm::transport {
namespace {

using ucx_wire::kAddressNonceBytes;
using ucx_wire::kFrameMessage;
using ucx_wire::kGoodbyeMessage;
using ucx_wire::kHelloMessage;

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

}  // namespace

UcxNetwork::UcxNetwork(int rank, int size, std::string secret, const std::string& netDevice)
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

bool UcxNetwork::movesCudaMemory() const {
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

Bytes UcxNetwork::publication() const {
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

void UcxNetwork::open(int peer, const Bytes& published, int localPid, bool eager) {
  if (published.size() <= kAddressNonceBytes) {
    throw Error("ringcomm: UCX: rank " + std::to_string(peer) + " published no worker address");
  }
  Link& link = links_[peer];
  link.opened = true;
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

std::string UcxNetwork::lanesTo(int peer) const {
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

bool UcxNetwork::progress() {
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

bool UcxNetwork::readyToSleep() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closing_.load(std::memory_order_relaxed) && !closed_) return false;
  return ucx_.ucp_worker_arm(worker_) == UCS_OK;
}

std::string UcxNetwork::failure(int peer) const {
  if (closing_.load(std::memory_order_relaxed)) return closedText(peer);
  std::lock_guard<std::mutex> lock(mutex_);
  return links_[peer].failure;
}

void UcxNetwork::close() {
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

void UcxNetwork::onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
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

void UcxNetwork::setHandler(unsigned id, ucp_am_recv_callback_t callback, uint32_t flags) {
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

void UcxNetwork::watchLocalPeers() {
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

void UcxNetwork::closeEndpoints() {
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

void UcxNetwork::releaseArrivals() {
  for (Link& link : links_) {
    for (auto& [sequence, arrival] : link.arrivals) {
      if (arrival.rendezvous || arrival.persistent) {
        ucx_.ucp_am_data_release(worker_, arrival.data);
      }
    }
    link.arrivals.clear();
  }
}

void UcxNetwork::drain() {
  const Clock::time_point deadline = Clock::now() + kDrainWait;
  int idle = 0;
  while (idle < kIdleProgressCalls && Clock::now() < deadline) {
    idle = ucx_.ucp_worker_progress(worker_) == 0 ? idle + 1 : 0;
  }
}

void UcxNetwork::awaitRequests(std::vector<void*>& requests) {
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

void UcxNetwork::teardown() {
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

}  // namespace ringcomm::transport
