#include "auth/handshake.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/little_endian.h"
#include "ringcomm/errors.h"

namespace ringcomm::auth {
namespace {

constexpr uint32_t kMagic = 0x48414352;  // "RCAH" little-endian: ringcomm auth handshake
constexpr uint8_t kVersion = 1;

std::string bytesOf(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

std::string int32Bytes(int32_t value) {
  uint8_t bytes[4];
  putLittleEndian32(bytes, static_cast<uint32_t>(value));
  return bytesOf(bytes, 4);
}

Digest clientProof(const std::string& secret, Purpose purpose, Caller caller,
                   const uint8_t* helloNonce, const uint8_t* replyNonce) {
  return hmacSha256(secret, {"client", std::string(1, static_cast<char>(purpose)),
                             int32Bytes(caller.from), int32Bytes(caller.to),
                             bytesOf(helloNonce, kNonceBytes), bytesOf(replyNonce, kNonceBytes)});
}

Digest serverProof(const std::string& secret, Purpose purpose, Caller caller,
                   const uint8_t* helloNonce, const uint8_t* replyNonce) {
  return hmacSha256(secret, {"server", std::string(1, static_cast<char>(purpose)),
                             int32Bytes(caller.from), int32Bytes(caller.to),
                             bytesOf(replyNonce, kNonceBytes), bytesOf(helloNonce, kNonceBytes)});
}

// The key under which `sender` ("caller" or "listener") protects what it sends on this link.
Digest linkKey(const std::string& secret, Purpose purpose, Caller caller, const char* sender,
               const uint8_t* helloNonce, const uint8_t* replyNonce) {
  return hmacSha256(secret, {"ringcomm link key", sender,
                             std::string(1, static_cast<char>(purpose)), int32Bytes(caller.from),
                             int32Bytes(caller.to), bytesOf(helloNonce, kNonceBytes),
                             bytesOf(replyNonce, kNonceBytes)});
}

}  // namespace

void randomBytes(void* data, size_t size) {
  auto* at = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t got = getrandom(at, size, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("ringcomm: getrandom failed: ") + std::strerror(errno));
    }
    at += got;
    size -= static_cast<size_t>(got);
  }
}

Acceptor::Acceptor(const std::string& secret, Purpose purpose)
    : secret_(secret), purpose_(purpose) {
  randomBytes(nonce_.data(), nonce_.size());
  putLittleEndian32(hello_.data(), kMagic);
  hello_[4] = kVersion;
  hello_[5] = static_cast<uint8_t>(purpose);
  std::memcpy(hello_.data() + 6, nonce_.data(), kNonceBytes);
}

std::optional<std::pair<Caller, Digest>> Acceptor::check(const uint8_t* reply) const {
  if (getLittleEndian32(reply) != kMagic || reply[4] != kVersion ||
      reply[5] != static_cast<uint8_t>(purpose_)) {
    return std::nullopt;
  }
  Caller caller;
  caller.from = static_cast<int32_t>(getLittleEndian32(reply + 6));
  caller.to = static_cast<int32_t>(getLittleEndian32(reply + 10));
  const uint8_t* replyNonce = reply + 14;
  Digest claimed;
  std::memcpy(claimed.data(), reply + 14 + kNonceBytes, kProofBytes);
  if (!sameDigest(claimed, clientProof(secret_, purpose_, caller, nonce_.data(), replyNonce))) {
    return std::nullopt;
  }
  return std::make_pair(caller, serverProof(secret_, purpose_, caller, nonce_.data(), replyNonce));
}

LinkKeys Acceptor::keys(const uint8_t* reply) const {
  Caller caller;
  caller.from = static_cast<int32_t>(getLittleEndian32(reply + 6));
  caller.to = static_cast<int32_t>(getLittleEndian32(reply + 10));
  const uint8_t* replyNonce = reply + 14;
  LinkKeys keys;
  keys.send = linkKey(secret_, purpose_, caller, "listener", nonce_.data(), replyNonce);
  keys.receive = linkKey(secret_, purpose_, caller, "caller", nonce_.data(), replyNonce);
  return keys;
}

Connector::Connector(const std::string& secret, Purpose purpose, Caller caller)
    : secret_(secret), purpose_(purpose), caller_(caller) {}

std::optional<std::array<uint8_t, kReplyBytes>> Connector::reply(const uint8_t* hello) {
  if (getLittleEndian32(hello) != kMagic || hello[4] != kVersion ||
      hello[5] != static_cast<uint8_t>(purpose_)) {
    return std::nullopt;
  }
  std::memcpy(helloNonce_.data(), hello + 6, kNonceBytes);
  randomBytes(replyNonce_.data(), kNonceBytes);
  std::array<uint8_t, kReplyBytes> reply{};
  putLittleEndian32(reply.data(), kMagic);
  reply[4] = kVersion;
  reply[5] = static_cast<uint8_t>(purpose_);
  putLittleEndian32(reply.data() + 6, static_cast<uint32_t>(caller_.from));
  putLittleEndian32(reply.data() + 10, static_cast<uint32_t>(caller_.to));
  std::memcpy(reply.data() + 14, replyNonce_.data(), kNonceBytes);
  const Digest proof =
      clientProof(secret_, purpose_, caller_, helloNonce_.data(), replyNonce_.data());
  std::memcpy(reply.data() + 14 + kNonceBytes, proof.data(), kProofBytes);
  return reply;
}

bool Connector::proves(const uint8_t* proof) const {
  Digest answer;
  std::memcpy(answer.data(), proof, kProofBytes);
  return sameDigest(answer,
                    serverProof(secret_, purpose_, caller_, helloNonce_.data(), replyNonce_.data()));
}

LinkKeys Connector::keys() const {
  LinkKeys keys;
  keys.send = linkKey(secret_, purpose_, caller_, "caller", helloNonce_.data(), replyNonce_.data());
  keys.receive =
      linkKey(secret_, purpose_, caller_, "listener", helloNonce_.data(), replyNonce_.data());
  return keys;
}

LinkKeys connectHandshake(int fd, const std::string& secret, Purpose purpose, Caller caller,
                      Clock::time_point deadline, const std::string& what) {
  auto refused = [&](const std::string& why) -> TransportError {
    return TransportError("ringcomm: " + what + " " + why, FailureContext{what, -1, -1, 0.0});
  };
  uint8_t hello[kHelloBytes];
  try {
    net::readFully(fd, hello, sizeof(hello), deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const TransportError& error) {
    throw refused(std::string("closed the connection before its handshake (") + error.what() +
                  ")");
  }
  Connector connector(secret, purpose, caller);
  const std::optional<std::array<uint8_t, kReplyBytes>> reply = connector.reply(hello);
  if (!reply) {
    throw refused("does not speak ringcomm's handshake (another program, or another version)");
  }
  net::writeFully(fd, reply->data(), reply->size(), deadline);
  uint8_t answer[kProofBytes];
  try {
    net::readFully(fd, answer, sizeof(answer), deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const TransportError&) {
    throw refused("refused this rank's proof of the job's secret: the ranks do not share a "
                  "secret (RINGCOMM_SECRET / RINGCOMM_SECRET_FILE must be the same everywhere), "
                  "or this is another job's port");
  }
  if (!connector.proves(answer)) {
    throw refused("did not prove it knows the job's secret: another job, or an impostor");
  }
  return connector.keys();
}

}  // namespace ringcomm::auth
