// The Transport's links (transport.h): what reaches each peer, TCP links made on first use
// (tcp/tcp_dialer.h) and adopted, and closing or unsealing them all.
//
// A stream is set once per peer, by the engine thread, under linksMutex_; closeStreams() and
// kindOf() may run on any thread and read the streams under it. The engine thread reads its own
// writes without it.
#include <string>
#include <utility>

#include "ringcomm/errors.h"
#include "transport/transport.h"

namespace ringcomm::transport {

const char* Transport::kindOf(int peer) const {
  const Peer& state = peers_[peer];
  if (state.network != nullptr) return state.network->kind();
  std::lock_guard<std::mutex> lock(linksMutex_);
  if (state.stream) return state.stream->kind();
  return dialer_ && dialer_->reaches(peer) ? "tcp" : "self";
}

bool Transport::linked(int peer) const {
  const Peer& state = peers_[peer];
  if (state.network != nullptr) return true;
  std::lock_guard<std::mutex> lock(linksMutex_);
  return state.stream != nullptr;
}

void Transport::ensureLink(int peer, Peer& state, const Operation& op) {
  if (state.stream) return;
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
  state.stream = std::move(stream);
  if (unsealed_) state.stream->stopSealing();
  if (closed_) state.stream->close();
}

void Transport::closeStreams() {
  {
    std::lock_guard<std::mutex> lock(linksMutex_);
    closed_ = true;
    for (Peer& state : peers_) {
      if (state.stream) state.stream->close();
    }
  }
  if (dialer_) dialer_->close();
  for (const auto& network : networks_) network->close();
}

void Transport::stopSealing() {
  std::lock_guard<std::mutex> lock(linksMutex_);
  unsealed_ = true;
  for (Peer& state : peers_) {
    if (state.stream) state.stream->stopSealing();
  }
}

void Transport::abort() {
  closeStreams();
  for (Peer& state : peers_) {
    state.sends.clear();
    state.recvs.clear();
  }
  active_.clear();
}

}  // namespace ringcomm::transport
