// Wire codecs for compressed all-reduce: float32 values travel as 16-bit floats (fp16, bf16), or
// as 8 bits with a scale per block of kBlock values (int8, fp8; codec_block8.h).
//
// Compression is lossy only on the wire: a receiver widens what arrives to float32 and
// accumulates in float32, and a partial sum is narrowed again only to be sent on. The ring applies
// these at segment boundaries (src/algorithms/ring.cc); the reduction arithmetic is the core's.
// Each call encodes a run of values on its own: a block codec's blocks start at the run's first
// value, so runs need no alignment.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringcomm/types.h"

namespace ringcomm::codec {

// Bytes `count` float32 values take on the wire.
size_t wireBytes(size_t count, Compression compression);
// Bytes per value to set aside for runs that may start at any value: a run of n values starting
// at value i fits in [i * wireStride, (i + n) * wireStride).
size_t wireStride(Compression compression);

void encode(const float* source, void* wire, size_t count, Compression compression);
void decode(const void* wire, float* destination, size_t count, Compression compression);
// destination[i] += widen(wire[i])
void decodeAccumulate(const void* wire, float* destination, size_t count,
                      Compression compression);

// buffer[i] *= factor, as Horovod scales (prescale_factor, postscale_factor): float32 and float64
// in their own precision, float16 and bfloat16 in float32, integers in float64 truncated toward
// zero (saturating beyond their range). Bool data throws InvalidArgument.
void scale(void* buffer, size_t count, DataType type, double factor);

}  // namespace ringcomm::codec
