#include "transport/tcp/sealed_stream.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/little_endian.h"
#include "ringcomm/errors.h"

namespace ringcomm::transport {
namespace {

constexpr size_t kLengthBytes = 4;
constexpr size_t kTagBytes = 16;
constexpr size_t kNonceBytes = 12;
// Raw bytes read from the socket at once: several records per recv() when they are small.
constexpr size_t kReadAheadBytes = 4 * (kLengthBytes + kMaxRecordBytes + kTagBytes);

// One direction of a link: its key, and the sequence number of its next record.
class Direction {
 public:
  Direction(const auth::Digest& key, bool sealing) : context_(EVP_CIPHER_CTX_new()) {
    const bool ready =
        context_ != nullptr &&
        (sealing ? EVP_EncryptInit_ex(context_, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                 : EVP_DecryptInit_ex(context_, EVP_aes_256_gcm(), nullptr, key.data(),
                                      nullptr)) == 1;
    if (!ready) {
      EVP_CIPHER_CTX_free(context_);
      throw Error("ringcomm: OpenSSL could not set up AES-256-GCM for a link");
    }
  }
  ~Direction() { EVP_CIPHER_CTX_free(context_); }
  Direction(const Direction&) = delete;
  Direction& operator=(const Direction&) = delete;

  // Writes the record of `payload` to `out` (kLengthBytes + bytes + kTagBytes); with no bytes,
  // the record that ends sealing in this direction.
  void seal(const uint8_t* payload, size_t bytes, uint8_t mode, uint8_t* out) {
    putLittleEndian32(out, static_cast<uint32_t>(bytes));
    uint8_t* body = out + kLengthBytes;
    int moved = 0;
    bool ok = EVP_EncryptInit_ex(context_, nullptr, nullptr, nullptr, nextNonce().data()) == 1 &&
              authenticate(out, mode);
    if (bytes == 0) {
      // Nothing to process: the tag covers the length and the mode.
    } else if (mode == static_cast<uint8_t>(WireProtection::Encrypt)) {
      ok = ok && EVP_EncryptUpdate(context_, body, &moved, payload, static_cast<int>(bytes)) == 1;
    } else {
      std::memcpy(body, payload, bytes);
      ok = ok && EVP_EncryptUpdate(context_, nullptr, &moved, payload, static_cast<int>(bytes)) == 1;
    }
    ok = ok && EVP_EncryptFinal_ex(context_, body + bytes, &moved) == 1 &&
         EVP_CIPHER_CTX_ctrl(context_, EVP_CTRL_GCM_GET_TAG, kTagBytes, body + bytes) == 1;
    if (!ok) throw Error("ringcomm: OpenSSL failed to seal a record");
  }

  // Checks the record at `record` (its length already read) and writes its payload to `out`;
  // false when it is not what the peer sealed as this direction's next record.
  bool open(const uint8_t* record, size_t bytes, uint8_t mode, uint8_t* out) {
    const uint8_t* body = record + kLengthBytes;
    int moved = 0;
    bool ok = EVP_DecryptInit_ex(context_, nullptr, nullptr, nullptr, nextNonce().data()) == 1 &&
              authenticate(record, mode);
    if (bytes == 0) {
      // As in seal().
    } else if (mode == static_cast<uint8_t>(WireProtection::Encrypt)) {
      ok = ok && EVP_DecryptUpdate(context_, out, &moved, body, static_cast<int>(bytes)) == 1;
    } else {
      ok = ok && EVP_DecryptUpdate(context_, nullptr, &moved, body, static_cast<int>(bytes)) == 1;
      std::memcpy(out, body, bytes);
    }
    void* tag = const_cast<uint8_t*>(body + bytes);  // OpenSSL's API is not const; it only reads
    ok = ok && EVP_CIPHER_CTX_ctrl(context_, EVP_CTRL_GCM_SET_TAG, kTagBytes, tag) == 1;
    return ok && EVP_DecryptFinal_ex(context_, out + bytes, &moved) == 1;
  }

  uint64_t sequence() const { return sequence_; }

 private:
  std::array<uint8_t, kNonceBytes> nextNonce() {
    std::array<uint8_t, kNonceBytes> nonce{};
    for (int i = 0; i < 8; ++i) nonce[4 + i] = uint8_t(sequence_ >> (8 * i));
    ++sequence_;
    return nonce;
  }

  // The length and the mode, as data the tag covers: a mode the peer did not use fails.
  bool authenticate(const uint8_t* length, uint8_t mode) {
    uint8_t header[kLengthBytes + 1];
    std::memcpy(header, length, kLengthBytes);
    header[kLengthBytes] = mode;
    int moved = 0;
    return EVP_CipherUpdate(context_, nullptr, &moved, header, sizeof(header)) == 1;
  }

  EVP_CIPHER_CTX* context_;
  uint64_t sequence_ = 0;
};

class SealedStream : public ByteStream {
 public:
  SealedStream(std::unique_ptr<ByteStream> inner, int peer, WireProtection mode,
               const auth::LinkKeys& keys)
      : inner_(std::move(inner)),
        peer_(peer),
        mode_(static_cast<uint8_t>(mode)),
        sending_(keys.send, true),
        receiving_(keys.receive, false) {}

  const char* kind() const override { return inner_->kind(); }
  int pollFd() const override { return inner_->pollFd(); }
  void close() override { inner_->close(); }

  std::string failure() const override {
    if (!failure_.empty()) return failure_;
    // Whole records already here are delivered before a peer that closed after sending them
    // counts as gone (as a socket delivers what it holds before its end-of-stream).
    return deliverable() ? std::string() : inner_->failure();
  }

  void stopSealing() override { stopPending_ = true; }

  // Seals records of the caller's bytes while the socket takes them; reports a record's bytes as
  // moved once all of it is in the socket (the caller keeps its bytes until then).
  size_t writeSome(const void* data, size_t bytes) override {
    if (!failure_.empty()) return 0;
    const auto* from = static_cast<const uint8_t*>(data);
    size_t moved = 0;
    while (true) {
      if (out_.empty()) {
        if (!sendSealed_) return moved + inner_->writeSome(from + moved, bytes - moved);
        if (moved == bytes) break;
        if (stopPending_) {
          // The last sealed record, empty: the peer reads what follows as it is.
          out_.resize(kLengthBytes + kTagBytes);
          sending_.seal(nullptr, 0, mode_, out_.data());
          outPayload_ = 0;
          outSent_ = 0;
          stopPending_ = false;
          sendSealed_ = false;
          continue;
        }
        const size_t take = std::min(bytes - moved, kMaxRecordBytes);
        out_.resize(kLengthBytes + take + kTagBytes);
        sending_.seal(from + moved, take, mode_, out_.data());
        outPayload_ = take;
        outSent_ = 0;
      }
      while (outSent_ < out_.size()) {
        const size_t n = inner_->writeSome(out_.data() + outSent_, out_.size() - outSent_);
        if (n == 0) return moved;
        outSent_ += n;
      }
      moved += outPayload_;
      out_.clear();
    }
    return moved;
  }

  size_t readSome(void* data, size_t bytes) override {
    if (!failure_.empty()) return 0;
    auto* to = static_cast<uint8_t*>(data);
    size_t moved = 0;
    while (moved < bytes) {
      if (plainBegin_ < plainEnd_) {
        const size_t take = std::min(bytes - moved, plainEnd_ - plainBegin_);
        std::memcpy(to + moved, plain_.data() + plainBegin_, take);
        plainBegin_ += take;
        moved += take;
        continue;
      }
      if (!receiveSealed_) {
        // Unsealed from here on: bytes read ahead first, then the socket's.
        if (rawBegin_ < rawEnd_) {
          const size_t take = std::min(bytes - moved, rawEnd_ - rawBegin_);
          std::memcpy(to + moved, raw_.data() + rawBegin_, take);
          rawBegin_ += take;
          moved += take;
          continue;
        }
        return moved + inner_->readSome(to + moved, bytes - moved);
      }
      if (!openNextRecord()) break;
    }
    return moved;
  }

 private:
  // Opens the next whole record into plain_, reading from the socket as needed; false when it
  // has not all arrived yet, or when it failed its check (failure_ then says so).
  bool openNextRecord() {
    // Buffers on first use: a job across many hosts has links that never carry a byte.
    if (raw_.empty()) {
      raw_.resize(kReadAheadBytes);
      plain_.resize(kMaxRecordBytes);
    }
    size_t payload = 0;
    while (true) {
      const size_t have = rawEnd_ - rawBegin_;
      if (have >= kLengthBytes) {
        payload = getLittleEndian32(raw_.data() + rawBegin_);
        if (payload > kMaxRecordBytes) {
          fail("a record of " + std::to_string(payload) + " bytes");
          return false;
        }
        if (have >= kLengthBytes + payload + kTagBytes) break;
      }
      // Room for the rest of the record, at the front of the buffer if need be.
      if (rawBegin_ > 0 && raw_.size() - rawEnd_ < kLengthBytes + kMaxRecordBytes + kTagBytes) {
        std::memmove(raw_.data(), raw_.data() + rawBegin_, have);
        rawBegin_ = 0;
        rawEnd_ = have;
      }
      const size_t n = inner_->readSome(raw_.data() + rawEnd_, raw_.size() - rawEnd_);
      if (n == 0) return false;
      rawEnd_ += n;
    }
    const uint64_t sequence = receiving_.sequence();
    if (!receiving_.open(raw_.data() + rawBegin_, payload, mode_, plain_.data())) {
      fail("record #" + std::to_string(sequence) + " (" + std::to_string(payload) + " bytes)");
      return false;
    }
    rawBegin_ += kLengthBytes + payload + kTagBytes;
    if (rawBegin_ == rawEnd_) rawBegin_ = rawEnd_ = 0;
    plainBegin_ = 0;
    plainEnd_ = payload;
    if (payload == 0) receiveSealed_ = false;  // the peer's last sealed record
    return true;
  }

  bool deliverable() const {
    if (plainBegin_ < plainEnd_) return true;
    const size_t have = rawEnd_ - rawBegin_;
    if (!receiveSealed_) return have > 0;
    return have >= kLengthBytes &&
           have >= kLengthBytes + getLittleEndian32(raw_.data() + rawBegin_) + kTagBytes;
  }

  void fail(const std::string& what) {
    failure_ = "the link to rank " + std::to_string(peer_) + " delivered " + what +
               " that fails its authentication check: bytes were changed, dropped, replayed or "
               "reordered on the way (a relay or a device on the path rewrote them), or the "
               "ranks' RINGCOMM_WIRE_PROTECTION differ; the link is closed";
    inner_->close();
  }

  std::unique_ptr<ByteStream> inner_;
  int peer_;
  uint8_t mode_;
  Direction sending_;
  Direction receiving_;
  std::string failure_;
  // Whether each direction still travels in records; stopSealing() ends the sending one once
  // what is in flight is out, the peer's last sealed record the receiving one.
  bool sendSealed_ = true;
  bool stopPending_ = false;
  bool receiveSealed_ = true;
  // The record being sent: its bytes, how many are in the socket, how many of the caller's.
  std::vector<uint8_t> out_;
  size_t outSent_ = 0;
  size_t outPayload_ = 0;
  // Received bytes not yet opened [rawBegin_, rawEnd_), and an opened payload not yet taken.
  std::vector<uint8_t> raw_;
  size_t rawBegin_ = 0;
  size_t rawEnd_ = 0;
  std::vector<uint8_t> plain_;
  size_t plainBegin_ = 0;
  size_t plainEnd_ = 0;
};

}  // namespace

bool wireProtectionBuilt() { return true; }

std::string wireProtectionLibrary() { return OpenSSL_version(OPENSSL_VERSION); }

std::unique_ptr<ByteStream> sealStream(std::unique_ptr<ByteStream> inner, int peer,
                                       WireProtection mode, const auth::LinkKeys& keys) {
  return std::make_unique<SealedStream>(std::move(inner), peer, mode, keys);
}

}  // namespace ringcomm::transport
