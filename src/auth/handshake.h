// Mutual challenge-response on a new connection, before anything else crosses it: each side
// proves it knows the job's secret by an HMAC over both sides' fresh nonces, so a proof can be
// neither replayed nor computed by someone without the secret, and nobody needs the secret to
// travel. The store and the data links use it; each names its purpose, and a data link also who
// calls whom, inside the proofs, so a proof for one is useless for another.
//
//     accepting side  ->  Hello: magic u32, version u8, purpose u8, nonce[32]            (38 B)
//     connecting side ->  Reply: magic u32, version u8, purpose u8, from i32, to i32,
//                                nonce[32], proof[32]                                    (78 B)
//                         proof = HMAC(secret, "client" purpose from to helloNonce replyNonce)
//     accepting side  ->  Proof: HMAC(secret, "server" purpose from to replyNonce helloNonce) (32 B)
//
// The accepting side reads exactly the 78 bytes of the reply and nothing more until it has
// checked them, so an unauthenticated peer can make it hold 78 bytes per connection at most.
//
// Both sides then hold the same fresh transcript, from which each derives the link's two keys
// (one per direction) for protecting its frames (transport/tcp/sealed_stream.h):
//     key = HMAC(secret, "ringcomm link key" direction purpose from to helloNonce replyNonce)
// where direction is "caller" or "listener", the side that sends under it. Someone without the
// secret learns nothing of them; a new connection (new nonces) gets new keys.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "auth/sha256.h"
#include "common/socket.h"

namespace ringcomm::auth {

enum class Purpose : uint8_t { Store = 1, Data = 2 };

constexpr size_t kNonceBytes = 32;
constexpr size_t kHelloBytes = 38;
constexpr size_t kReplyBytes = 78;
constexpr size_t kProofBytes = 32;

// Fills `size` bytes from the kernel's random source (getrandom).
void randomBytes(void* data, size_t size);

// Who a checked reply says is calling whom (data links; -1 for the store).
struct Caller {
  int32_t from = -1;
  int32_t to = -1;
};

// The keys of one link, as this side uses them.
struct LinkKeys {
  Digest send{};
  Digest receive{};
};

// The accepting side of one connection, fed by a non-blocking loop: send hello(), collect
// kReplyBytes, check() them, send the proof it returns.
class Acceptor {
 public:
  Acceptor(const std::string& secret, Purpose purpose);
  const std::array<uint8_t, kHelloBytes>& hello() const { return hello_; }
  // The caller and the proof to send back, or nothing when the reply is not from a holder of
  // the secret (or not this protocol, or for another purpose).
  std::optional<std::pair<Caller, Digest>> check(const uint8_t* reply) const;
  // The link's keys, as the accepting side uses them, for a reply check() accepted.
  LinkKeys keys(const uint8_t* reply) const;

 private:
  // A copy: a reference member dangled when an Acceptor outlived the string it was made from
  // (Acceptor("ours", ...) binds a temporary; ASan found it in tests/cpp/test_auth.cc).
  std::string secret_;
  Purpose purpose_;
  std::array<uint8_t, kNonceBytes> nonce_;
  std::array<uint8_t, kHelloBytes> hello_;
};

// The connecting side's two steps, for a caller that drives its own non-blocking loop (the
// liveness probes of core/membership.h ask many mailboxes at once): reply() to the hello, then
// check the proof that comes back with proves().
class Connector {
 public:
  Connector(const std::string& secret, Purpose purpose, Caller caller);
  // The reply to send, or nothing when `hello` is not ringcomm's handshake for this purpose
  // (another program, another version).
  std::optional<std::array<uint8_t, kReplyBytes>> reply(const uint8_t* hello);
  // Whether `proof` (kProofBytes) shows that the accepting side knows the secret; after reply().
  bool proves(const uint8_t* proof) const;
  // The link's keys, as the connecting side uses them; after reply().
  LinkKeys keys() const;

 private:
  std::string secret_;  // a copy, as Acceptor's
  Purpose purpose_;
  Caller caller_;
  std::array<uint8_t, kNonceBytes> helloNonce_{};
  std::array<uint8_t, kNonceBytes> replyNonce_{};
};

// The connecting side, on a blocking socket, by `deadline`. Throws TransportError when the other
// side does not speak the protocol or does not prove the secret (`what` names it: "the store at
// host:port", "rank 3"), and TimeoutError when it does not answer in time. Returns the link's
// keys, as the connecting side uses them.
LinkKeys connectHandshake(int fd, const std::string& secret, Purpose purpose, Caller caller,
                      Clock::time_point deadline, const std::string& what);

}  // namespace ringcomm::auth
