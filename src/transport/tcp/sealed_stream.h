// A TCP link's bytes in authenticated records, so that nothing on the path (a relay, a router
// that rewrites packets) can change, drop, replay or reorder what a rank receives unnoticed; and,
// when asked, encrypted too. It wraps the link's TcpStream after the handshake, with the keys
// both sides derived from it (auth::LinkKeys), and leaves framing, queues and waiting to
// Transport, which sees a byte stream as before.
//
//     record = length u32 (of the payload, 0..kMaxRecordBytes) | payload | tag[16]
//
// AES-256-GCM (OpenSSL's libcrypto): the nonce is the record's sequence number on this link and
// direction, counted by both sides and never sent, so a replayed, reordered or dropped record
// fails its tag. The authenticated data is the length and the mode; in Integrity mode the
// payload is authenticated but travels as it is (GMAC), in Encrypt mode it is encrypted. A record
// that fails its check ends the link: failure() names the peer, and every collective on it raises
// TransportError.
//
// A record with no payload is the sender's last: what follows it in that direction travels as it
// is (stopSealing(), which RINGCOMM_WIRE_PROTECTION=auto calls on links measured too fast for the
// check to be cheap). Being authenticated like any other, it cannot be forged or moved.
//
// Built only with OpenSSL (CMakeLists.txt); without it, wireProtectionBuilt() is false and
// sealStream() refuses, naming RINGCOMM_WIRE_PROTECTION.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "auth/handshake.h"
#include "ringcomm/config.h"
#include "transport/byte_stream.h"

namespace ringcomm::transport {

// The largest payload of one record: small enough to keep one in cache, large enough that the
// 20 bytes of framing and the per-record setup cost nothing measurable.
constexpr size_t kMaxRecordBytes = 64 * 1024;

// RINGCOMM_WIRE_PROTECTION=auto keeps links between hosts sealed where the agreed link rate is
// at most this (bytes/s): 2.5 Gbit/s. The check costs a core about 0.2 ns a byte each way
// (AES-GCM's GMAC in OpenSSL 3.0, this VM's Zen 3); bench/RESULTS.md ("Protected links") measured
// it at 0-3% of an all-reduce on a 1 Gbit/s link and 25-50% on a 10 Gbit/s one.
constexpr double kAutoSealMaxBytesPerSecond = 2.5e9 / 8;

// Whether this build can protect links (it was linked with OpenSSL's libcrypto).
bool wireProtectionBuilt();
// The library that seals records, as it names itself ("OpenSSL 3.0.19 27 Jan 2026"); "" without.
std::string wireProtectionLibrary();

// The inner stream, wrapped so that its bytes travel in records of `mode` (Integrity or
// Encrypt) under `keys`. Throws InvalidArgument in a build without OpenSSL.
std::unique_ptr<ByteStream> sealStream(std::unique_ptr<ByteStream> inner, int peer,
                                       WireProtection mode, const auth::LinkKeys& keys);

}  // namespace ringcomm::transport
