// The server side of the handshake and a proven connection's stream (tcp_link.h).
#include "transport/tcp/tcp_link.h"

#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "ringcomm/errors.h"
#include "transport/tcp/sealed_stream.h"
#include "transport/tcp/tcp_stream.h"

namespace ringcomm::transport {
namespace {

// Connections in their handshake at once; past this the oldest gives way to a newcomer.
constexpr size_t kMaxHandshakesAtOnce = 256;

}  // namespace

WireProtection linkProtection(WireProtection configured, bool otherHost) {
  if (configured != WireProtection::Auto) return configured;
  return otherHost && wireProtectionBuilt() ? WireProtection::Integrity : WireProtection::Off;
}

std::unique_ptr<ByteStream> makeTcpLink(net::UniqueFd fd, int peer, const Config& config,
                                        bool otherHost, const auth::LinkKeys& keys,
                                        bool* sealed) {
  std::unique_ptr<ByteStream> stream = std::make_unique<TcpStream>(
      fd.release(), peer, config.socketBufferBytes, config.linkTimeout);
  const WireProtection protection = linkProtection(config.wireProtection, otherHost);
  if (sealed != nullptr) *sealed = protection != WireProtection::Off;
  if (protection == WireProtection::Off) return stream;
  return sealStream(std::move(stream), peer, protection, keys);
}

bool atDescriptorLimit(const std::exception& error) {
  // net::errnoText's words for EMFILE and ENFILE.
  return std::strstr(error.what(), "descriptor limit, ulimit -n") != nullptr ||
         std::strstr(error.what(), "table of open files is full") != nullptr;
}

// One connection to this rank's listener whose caller has not yet proved the job's secret.
struct HandshakeServer::Pending {
  net::UniqueFd fd;
  std::unique_ptr<auth::Acceptor> acceptor;
  size_t helloSent = 0;
  std::vector<uint8_t> reply;
  Clock::time_point deadline;
};

HandshakeServer::HandshakeServer(int rank, int listener, const std::string& secret)
    : rank_(rank), listener_(listener), secret_(secret) {}

HandshakeServer::~HandshakeServer() = default;

Clock::time_point HandshakeServer::pollFds(std::vector<pollfd>& fds,
                                           Clock::time_point latest) const {
  fds.push_back({listener_, POLLIN, 0});
  for (const Pending& handshake : pending_) {
    const bool helloLeft = handshake.helloSent < auth::kHelloBytes;
    fds.push_back({handshake.fd.get(), static_cast<short>(POLLIN | (helloLeft ? POLLOUT : 0)), 0});
    latest = std::min(latest, handshake.deadline);
  }
  return latest;
}

std::string HandshakeServer::serve(bool listenerReady, const Take& take) {
  std::string failure;
  if (listenerReady) failure = acceptNewcomers();
  advance(Clock::now(), take);
  return failure;
}

// Newcomers: each gets the hello at once.
std::string HandshakeServer::acceptNewcomers() {
  for (;;) {
    net::UniqueFd fd;
    try {
      fd = net::acceptTcp(listener_);
    } catch (const TransportError& error) {
      // Out of descriptors: the handshakes in progress finish or expire first.
      return error.what();
    }
    if (!fd) return {};
    if (pending_.size() >= kMaxHandshakesAtOnce) {
      auto oldest = pending_.begin();
      drop(oldest);
    }
    Pending handshake;
    handshake.fd = std::move(fd);
    handshake.acceptor = std::make_unique<auth::Acceptor>(secret_, auth::Purpose::Data);
    handshake.deadline = Clock::now() + kHandshakeTimeout;
    pending_.push_back(std::move(handshake));
  }
}

// Moves every handshake on as far as its socket allows: the hello out, the reply in, checked;
// a caller that proves the secret naming this rank goes to `take`.
void HandshakeServer::advance(Clock::time_point now, const Take& take) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& handshake = *it;
    try {
      while (handshake.helloSent < auth::kHelloBytes) {
        const size_t n = net::writeSome(handshake.fd.get(),
                                        handshake.acceptor->hello().data() + handshake.helloSent,
                                        auth::kHelloBytes - handshake.helloSent);
        if (n == 0) break;
        handshake.helloSent += n;
      }
      uint8_t bytes[auth::kReplyBytes];
      const size_t n =
          net::readSome(handshake.fd.get(), bytes, auth::kReplyBytes - handshake.reply.size());
      handshake.reply.insert(handshake.reply.end(), bytes, bytes + n);
    } catch (const TransportError&) {
      drop(it);  // gone, or reset
      continue;
    }
    if (handshake.reply.size() < auth::kReplyBytes) {
      if (now >= handshake.deadline) {
        drop(it);
      } else {
        ++it;
      }
      continue;
    }
    const auto accepted = handshake.acceptor->check(handshake.reply.data());
    if (!accepted || accepted->first.to != rank_ ||
        !take(accepted->first.from, handshake.fd, handshake.acceptor->keys(handshake.reply.data()),
              accepted->second)) {
      drop(it);
      continue;
    }
    it = pending_.erase(it);
  }
}

void HandshakeServer::drop(std::list<Pending>::iterator& it) {
  ++refused_;
  it = pending_.erase(it);
}

}  // namespace ringcomm::transport
