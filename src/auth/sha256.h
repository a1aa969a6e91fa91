// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): what the handshakes prove knowledge of the
// job's secret with. Small and self-contained, so a source build needs no crypto library; checked
// against the standards' test vectors (tests/cpp/test_auth.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringcomm::auth {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& text) { update(text.data(), text.size()); }
  Digest finish();  // the object is spent afterwards

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t blockUsed_ = 0;
  uint64_t totalBytes_ = 0;
};

Digest sha256(const void* data, size_t size);

// HMAC-SHA256 of the concatenation of `parts` under `key`.
Digest hmacSha256(const std::string& key, std::initializer_list<std::string> parts);

// Equal without revealing where two digests differ (no early exit).
bool sameDigest(const Digest& a, const Digest& b);

}  // namespace ringcomm::auth
