// Reduction kernels per (dtype, op) on host memory. Vectorised loops with runtime dispatch
// (AVX2/F16C where the CPU has them, portable code otherwise); no -march=native.
//
// Determinism contract: for a given (type, op, inputs in a given order) the result is the same
// bitwise on every machine path (vector or scalar) — both paths evaluate the same IEEE operations
// in the same order, element by element. float16/bfloat16 are widened to float32, combined, and
// rounded back to nearest-even after each call (reduceMany accumulates all sources in float32 and
// rounds once). A float result that is NaN is always the canonical quiet NaN: NaN payloads would
// otherwise depend on the order in which the compiler happened to put the operands of + and *.
// Min and Max return NaN when either operand is NaN, like torch.
//
// Pointers must be aligned to their element size; buffers must not overlap except as stated.
// The implementation: loops.h (the loops), kernels_*.cc (one compiled variant each), dispatch.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringcomm/types.h"

namespace ringcomm::reduce {

// dst[i] = dst[i] OP src[i]. Avg behaves as Sum here (the division happens in finishAverage).
// Integer Sum and Prod wrap around. Bool is logical (loops.h): Sum and Max are or, Prod and Min
// are and, any non-zero byte is true and every result is 0 or 1.
void reduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op);

// dst[i] = srcs[0][i] OP srcs[1][i] OP ... OP srcs[n-1][i], evaluated left to right.
// dst may alias srcs[0] (and only srcs[0]). n >= 1 (n == 1 copies); throws InvalidArgument for
// n < 1 or an unknown type or op.
void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType type,
                ReduceOp op);

// For ReduceOp::Avg: buf[i] /= divisor (floats: multiply by nothing, divide exactly;
// integers: truncating division). No-op for the other ops. Throws InvalidArgument for Avg with a
// divisor below 1, and for Avg of Bool (not defined).
void finishAverage(void* buf, size_t count, DataType type, ReduceOp op, int divisor);

// IEEE binary16 / bfloat16 <-> float32, round to nearest even (NaN stays NaN).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace ringcomm::reduce
