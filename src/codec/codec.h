// Wire codecs for compressed all-reduce: float32 values travel as 16-bit floats.
//
// Compression is lossy only on the wire: a receiver widens what arrives to float32 and
// accumulates in float32, and a partial sum is narrowed again only to be sent on. The ring applies
// these at segment boundaries (src/algorithms/ring.cc); the reduction arithmetic is the core's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringcomm/types.h"

namespace ringcomm::codec {

constexpr size_t kWireElementBytes = 2;

void encode(const float* source, uint16_t* wire, size_t count, Compression compression);
void decode(const uint16_t* wire, float* destination, size_t count, Compression compression);
// destination[i] += widen(wire[i])
void decodeAccumulate(const uint16_t* wire, float* destination, size_t count,
                      Compression compression);

// buffer[i] *= factor, as Horovod scales (prescale_factor, postscale_factor): float32 and float64
// in their own precision, float16 and bfloat16 in float32, integers in float64 truncated toward
// zero (saturating beyond their range). Bool data throws InvalidArgument.
void scale(void* buffer, size_t count, DataType type, double factor);

}  // namespace ringcomm::codec
