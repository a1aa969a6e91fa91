// 8-bit wire codecs with a scale per block of values (codec.h): the block's scale first, then one
// byte per value. A run's blocks start at its first value; its last block may be short.
//
//   int8: the scale is a bfloat16 (two bytes: float32's top half), the block's largest magnitude
//         / 127 rounded to nearest; each value is round(x x (1 / scale)), in [-127, 127]. A block
//         of zeros has scale 0.
//   fp8:  as OCP's MX format mxfp8: the scale is 2^e, kept as the byte e + 127 (E8M0), with e the
//         block's largest exponent less 8, so that the largest value lands in [256, 512) and its
//         neighbours keep e4m3's three bits of mantissa; each value is x / 2^e as an e4m3 float
//         (bias 7, subnormals, no infinity), rounded to nearest even and saturated at +-448.
//
// A NaN or an infinity spoils only its own value, never its neighbours: one rank's overflowed
// gradient, or a partial sum that overflowed at a hop, must not turn the finite values around it
// into NaN (with the whole block NaN, a 63-value all-reduce on 3 ranks lost 21 finite values to
// one infinity, a whole chunk). The block's scale is taken from its finite values alone, and
//   int8: a block holding a non-finite value sets the scale's sign bit (kInt8NonFiniteMark; a
//         scale is never negative otherwise). Its finite values code in [-126, 126] (scale: the
//         largest finite magnitude / 126), which frees 127, -127 and -128 for +infinity,
//         -infinity and NaN: every value decodes as what it was, infinities included. Blocks of
//         finite values, nearly all, keep the bytes and the speed they had.
//   fp8:  a NaN or an infinity codes as e4m3's NaN 0x7F: e4m3 has no infinity, and saturating
//         one at 448 would hide it. So under fp8 an infinity arrives as NaN, at its own place.
//         The code is the same for every NaN, whatever its sign: the sign of a NaN sum depends on
//         the order of the operands, which may differ between the CPU and the GPU kernels.
// Either way a non-finite value stays non-finite through every hop's sum and re-encoding, and every
// rank decodes the same bytes: a check for non-finite gradients (torch's GradScaler) finds it on
// every rank, at the same places. The scale byte 255 (fp8) and a NaN
// scale (int8) still decode as NaN for the whole block, but no encoder writes them.
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

// int8's blocks that hold a NaN or an infinity (above): the scale's sign bit marks them, their
// finite codes stay within kInt8MarkedMaxCode, and three codes stand for the non-finite values.
constexpr uint16_t kInt8NonFiniteMark = 0x8000;
constexpr int8_t kInt8MarkedMaxCode = 126;
constexpr int8_t kInt8PlusInfinityCode = 127;
constexpr int8_t kInt8MinusInfinityCode = -127;
constexpr int8_t kInt8NanCode = -128;
// fp8's code for a NaN or an infinity, whatever its sign.
constexpr uint8_t kE4m3NanCode = 0x7F;

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
