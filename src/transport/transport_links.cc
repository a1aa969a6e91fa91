// The Transport's links (transport.h): what reaches each peer, TCP links made on first use
// (tcp/tcp_dialer.h) and adopted, and closing or unsealing them all.
//
// A link is set once per peer, by the engine thread, under linksMutex_; closeLinks(), kindOf()
// and the other questions any thread may ask read the links under it. The engine thread reads
// its own writes without it.
#include <string>
#include <utility>

#include "ringcomm/errors.h"
#include "transport/transport.h"

namespace ringcomm::transport {

const char* Transport::kindOf(int peer) const {
  std::lock_guard<std::mutex> lock(linksMutex_);
  const PeerLink* link = peers_[peer].link.get();
  if (link != nullptr) return link->kind();
  return dialer_ && dialer_->reaches(peer) ? "tcp" : "self";
}

bool Transport::linked(int peer) const {
  std::lock_guard<std::mutex> lock(linksMutex_);
  return peers_[peer].link != nullptr;
}

bool Transport::takesDeviceMemory(int peer) const {
  std::lock_guard<std::mutex> lock(linksMutex_);
  const PeerLink* link = peers_[peer].link.get();
  return link != nullptr && link->takesDeviceMemory();
}

void Transport::ensureLink(int peer, Peer& state, const Operation& op) {
  if (state.link) return;
  if (!dialer_ || !dialer_->reaches(peer)) {
    throw Error("ringcomm: internal error: no link to rank " + std::to_string(peer));
  }
  adopt(peer, dialer_->link(peer, op));
}

void Transport::adoptArrived() {
  if (!dialer_) return;
  for (auto& [peer, stream] : dialer_->takeArrived()) adopt(peer, std::move(stream));
}

void Transport::adopt(int peer, std::unique_ptr<ByteStream> stream) {
  std::lock_guard<std::mutex> lock(linksMutex_);
  Peer& state = peers_[peer];
  state.link = streamLink(peer, std::move(stream));
  if (unsealed_) state.link->stopSealing();
  if (closed_) state.link->close();
}

void Transport::closeLinks() {
  {
    std::lock_guard<std::mutex> lock(linksMutex_);
    closed_ = true;
    for (Peer& state : peers_) {
      if (state.link) state.link->close();
    }
  }
  if (dialer_) dialer_->close();
  // A network's links close with it, once for all its peers.
  for (const auto& network : networks_) network->close();
}

void Transport::stopSealing() {
  std::lock_guard<std::mutex> lock(linksMutex_);
  unsealed_ = true;
  for (Peer& state : peers_) {
    if (state.link) state.link->stopSealing();
  }
}

void Transport::abort() {
  closeLinks();
  for (Peer& state : peers_) {
    state.sends.clear();
    state.recvs.clear();
    state.active = false;
  }
  active_.clear();
}

}  // namespace ringcomm::transport
