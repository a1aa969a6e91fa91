// Fixed-width integers in the byte order of ringcomm's wire formats (the handshake, sealed
// records): little-endian whatever the host's.
#pragma once

#include <cstdint>

namespace ringcomm {

inline void putLittleEndian32(uint8_t* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline uint32_t getLittleEndian32(const uint8_t* at) {
  return uint32_t{at[0]} | uint32_t{at[1]} << 8 | uint32_t{at[2]} << 16 | uint32_t{at[3]} << 24;
}

}  // namespace ringcomm
