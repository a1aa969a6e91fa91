// The 8-bit codecs' loops (codec_block8.h) with AVX2, 32 values (one block) at a time: the same
// bytes on the wire and the same float32 bits out as the portable loops, which still take a run's
// short last block and CPUs without AVX2. No fused multiply-add anywhere: it would round once
// where the portable loops round twice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringcomm::codec::block8::avx2 {

// Whole blocks only: `blocks` x 32 values.
void encodeInt8(const float* in, uint8_t* out, size_t blocks);
void decodeInt8(const uint8_t* in, float* out, size_t blocks, bool accumulate);
void encodeFp8(const float* in, uint8_t* out, size_t blocks);
void decodeFp8(const uint8_t* in, float* out, size_t blocks, bool accumulate);

// Whether this CPU (and its OS) runs AVX2.
bool available();

}  // namespace ringcomm::codec::block8::avx2
