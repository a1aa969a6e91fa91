// 8-bit wire codecs with a scale per block of values (codec.h): the block's scale first, then one
// byte per value. A run's blocks start at its first value; its last block may be short.
//
//   int8: the scale is a bfloat16 (two bytes: float32's top half), the block's largest magnitude
//         / 127 rounded to nearest; each value is round(x x (1 / scale)), in [-127, 127]. A block of zeros
//         has scale 0. A block holding a NaN or an infinity has a NaN scale: it decodes to NaN, as
//         the sum it belongs to is.
//   fp8:  as OCP's MX format mxfp8: the scale is 2^e, kept as the byte e + 127 (E8M0), with e the
//         block's largest exponent less 8, so that the largest value lands in [256, 512) and its
//         neighbours keep e4m3's three bits of mantissa; each value is x / 2^e as an e4m3 float
//         (bias 7, subnormals, no infinity), rounded to nearest even and saturated at +-448.
//         A block holding a NaN or an infinity has the NaN scale byte 255.
//
// Block size: 32 values, MX's. Smaller blocks track the magnitudes more closely and cost more scale
// bytes (int8: 2 per block, 6.25% at 32; fp8: 1, 3.1%). Measured (bench/RESULTS.md, "The int8
// block and its scale"): a float32 scale per 32 cost 12.5% more bytes for 2% less error than the
// bfloat16 one; blocks of 64 with a float32 scale, the same bytes as now, 9-26% more error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringcomm::codec::block8 {

constexpr size_t kBlock = 32;
constexpr size_t kInt8ScaleBytes = 2;
constexpr size_t kFp8ScaleBytes = 1;

void encodeInt8(const float* in, uint8_t* out, size_t n);
void decodeInt8(const uint8_t* in, float* out, size_t n, bool accumulate);
void encodeFp8(const float* in, uint8_t* out, size_t n);
void decodeFp8(const uint8_t* in, float* out, size_t n, bool accumulate);

// The same without the AVX2 loops, for the tests that hold the two to the same bytes.
namespace portable {
void encodeInt8(const float* in, uint8_t* out, size_t n);
void decodeInt8(const uint8_t* in, float* out, size_t n, bool accumulate);
void encodeFp8(const float* in, uint8_t* out, size_t n);
void decodeFp8(const uint8_t* in, float* out, size_t n, bool accumulate);
}  // namespace portable

// One e4m3 value (OCP FP8: bias 7, no infinity, 0x7F and 0xFF are NaN) from a float already
// scaled, rounded to nearest even, saturated at +-448; and back.
uint8_t toE4m3(float x);
float fromE4m3(uint8_t code);

}  // namespace ringcomm::codec::block8
