// UCX frames: each sent as one active message whose header is the frame's, and received from
// what UCX hands over, into host or device memory (UcxNetwork, ucx_worker.h).
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "common/bytes.h"
#include "transport/ucx/ucx_worker.h"

namespace ringcomm::transport {

using ucx_wire::kFrameMessage;
using ucx_wire::WireFrame;

void UcxNetwork::send(int peer, uint64_t sequence, const FrameHeader& header, const void* data,
                      Memory memory, std::shared_ptr<Completion> completion) {
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

const FrameHeader* UcxNetwork::arrived(int peer, uint64_t sequence) {
  // The arrival stays where it is until receive() takes it, on this same thread.
  std::lock_guard<std::mutex> lock(mutex_);
  auto& arrivals = links_[peer].arrivals;
  auto found = arrivals.find(sequence);
  return found == arrivals.end() ? nullptr : &found->second.header.frame;
}

void UcxNetwork::receive(int peer, uint64_t sequence, void* data, Memory memory,
                         std::shared_ptr<Completion> completion) {
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

void UcxNetwork::registerMemory(void* data, size_t bytes) {
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

void UcxNetwork::forgetMemory(void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = registered_.find(reinterpret_cast<uintptr_t>(data));
  if (found == registered_.end()) return;
  ucx_.ucp_mem_unmap(context_, found->second.memory);
  registered_.erase(found);
}

void UcxNetwork::describeMemory(ucp_request_param_t& param, const void* data, size_t bytes,
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

std::string UcxNetwork::closedText(int peer) const {
  return "the UCX link to rank " + std::to_string(peer) + " was closed on this rank";
}

void UcxNetwork::settle(ucs_status_ptr_t request, Operation_* state) {
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

void UcxNetwork::ended(void* request, ucs_status_t status, Operation_* state) {
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

void UcxNetwork::onSent(void* request, ucs_status_t status, void* user) {
  auto* state = static_cast<Operation_*>(user);
  state->network->ended(request, status, state);
}

void UcxNetwork::onReceived(void* request, ucs_status_t status, size_t, void* user) {
  auto* state = static_cast<Operation_*>(user);
  state->network->ended(request, status, state);
}

ucs_status_t UcxNetwork::onFrame(const void* header, size_t headerLength, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
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

ucs_status_t UcxNetwork::onGoodbye(const void*, size_t, void*, size_t,
                                   const ucp_am_recv_param_t* param) {
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

}  // namespace ringcomm::transport
