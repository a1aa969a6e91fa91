// The proof of the job's secret on UCX endpoints: each peer's hello, checked, answered, and
// remembered by endpoint, so that only proven endpoints' frames count (UcxNetwork, ucx_worker.h).
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "auth/handshake.h"
#include "common/log.h"
#include "transport/ucx/ucx_worker.h"

namespace ringcomm::transport {

using ucx_wire::Hello;
using ucx_wire::kHelloMagic;
using ucx_wire::kHelloMessage;
using ucx_wire::proofOf;

bool UcxNetwork::everyoneProven() const {
  for (int peer : expected_) {
    if (!provenBothWays(peer)) return false;
  }
  return true;
}

bool UcxNetwork::provenBothWays(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return links_[peer].proven && links_[peer].accepted;
}

std::string UcxNetwork::unproven() const {
  std::ostringstream text;
  for (int peer : expected_) {
    if (provenBothWays(peer)) continue;
    text << (text.tellp() > 0 ? ", " : "") << peer;
  }
  return text.str();
}

void UcxNetwork::forgetProofsOf(int rank) {
  for (auto it = provenSenders_.begin(); it != provenSenders_.end();) {
    it = it->second == rank ? provenSenders_.erase(it) : std::next(it);
  }
}

ucs_status_t UcxNetwork::onHello(const void* header, size_t headerLength, void*, size_t length,
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

ucs_status_t UcxNetwork::refuse() {
  ++refused_;
  return UCS_OK;  // UCX drops it (a rendezvous's sender completes without its data read)
}

void UcxNetwork::sendHello(int peer, uint32_t answer) {
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

void UcxNetwork::answerHellos() {
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

}  // namespace ringcomm::transport
