// The CUDA kernels of the core: element-wise reductions and the wire codecs (fp16/bf16, and the
// 8-bit int8/fp8 block codecs) on device memory, for the CUDA transport. They compute the same
// bits as the CPU kernels they stand in for (src/reduce, src/codec), so that ranks whose buffers
// live on a GPU and ranks whose buffers live in host memory reduce alike: data-parallel replicas
// must not drift apart.
//
// Every function enqueues one kernel on `stream` and returns without waiting; nothing here
// synchronises the device. A bad argument throws InvalidArgument before anything is enqueued, a
// failed launch throws Error naming the kernel; a fault while the kernel runs surfaces, as with any
// CUDA kernel, at the caller's next synchronisation with the stream.
//
// Same bits as the CPU, that is, as a CPU process that keeps subnormal numbers: the kernels never
// flush them to zero, while a host process that turned on FTZ/DAZ (torch.set_flush_denormal(True)
// does) changes the CPU's float arithmetic on them.
//
// Pointers are device-accessible (device, managed or mapped host memory) and aligned to their
// element size. An output may be the very same array as an input of the same type (each element
// is read before it is written, by the same thread); other overlaps are not allowed. A count of
// zero enqueues nothing and reads no pointer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "ringcomm/types.h"

namespace ringcomm::cuda {

// --- Reductions (reduce_kernels.cu), for every DataType and ReduceOp. ---
//
// As on the CPU (src/reduce/reduce.h): integer Sum and Prod wrap around; bool is logical (Sum and
// Max are or, Prod and Min and; every result is 0 or 1); float16 and bfloat16 are widened to
// float32, combined, and rounded back to nearest even; any NaN result is the canonical quiet NaN;
// Min and Max return NaN when either operand is NaN. Avg is Sum here: the division is
// finishAverage's, after the last step, exactly as the CPU schedules do it.

// out[i] = a[i] OP b[i]
void reduce(void* out, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
            cudaStream_t stream);

// acc[i] = acc[i] OP src[i]: the accumulate-in-place form (reduce with out == a), the CPU's
// reduce::reduceInto.
void reduceInto(void* acc, const void* src, size_t count, DataType type, ReduceOp op,
                cudaStream_t stream);

// The most sources reduceMany takes in one launch.
constexpr int kMaxReduceSources = 32;

// out[i] = srcs[0][i] OP srcs[1][i] OP ... OP srcs[n-1][i], then for Avg divided by `divisor`:
// one pass over every source, as the CPU's reduce::reduceMany followed by finishAverage, bit for
// bit (left to right; float16 and bfloat16 accumulate in float32 and round once, before the
// division). n from 2 to kMaxReduceSources. out may be one of the sources (each element is read
// from every source before it is written, by the same thread). Throws InvalidArgument as
// finishAverage does for Avg (divisor below 1, bool), and for n out of range.
void reduceMany(void* out, const void* const* srcs, int n, size_t count, DataType type,
                ReduceOp op, int divisor, cudaStream_t stream);

// For ReduceOp::Avg: buf[i] /= divisor, as reduce::finishAverage (floats: an exact IEEE division,
// float16/bfloat16 in float32; integers: truncating division). Enqueues nothing for other ops.
// Throws InvalidArgument for Avg with a divisor below 1, and for Avg of Bool.
void finishAverage(void* buf, size_t count, DataType type, ReduceOp op, int divisor,
                   cudaStream_t stream);

// --- The wire codecs (codec_kernels.cu): float32 values travel compressed. ---
//
// One API for every compression, as the CPU codec's (src/codec/codec.h), and bit for bit that
// codec and the scaling the CPU path does around it (codec::scale: a float32 multiply by
// static_cast<float>(factor), skipped when factor is 1), on its wire: a run of `count` values
// takes codec::wireBytes(count, compression) bytes. Compression::None, or a value that is no
// compression, is an InvalidArgument: there is nothing to encode.
//
// - float16 and bfloat16: a 2-byte value per element, so the wire is aligned to 2 bytes; a thread
//   an element (16-byte vectors where the arrays allow).
// - int8 and fp8, the 8-bit block codecs (src/codec/codec_block8.h): per block of 32 values (a
//   run's last block may be short) the block's scale first, then one byte per value; the wire
//   needs no alignment. A block's scale depends on all of its values, so one warp handles a block
//   from reading to writing; an output may still be the very same array as an input of the same
//   type (a block's bytes are all read before any is written).
//
// NaN: the CPU codec does plain float32 arithmetic, so its NaNs are the ones x86 makes: a NaN
// operand comes out quiet with its payload, a NaN made from numbers (inf - inf, 0 * inf) is
// 0xFFC00000. These kernels make the same ones (a GPU left alone would give 0x7FFFFFFF). When
// both operands of an addition are NaN, x86 keeps the first one's payload, and which one the CPU
// compiler put first is not fixed (it may swap the operands of +): there the kernels keep the
// accumulator's. Under the 8-bit codecs a NaN or an infinity spoils only its own value, as on the
// CPU (the block's scale leaves it out, it gets a code of its own); where both factors of a
// product are NaN (an fp8 NaN code in a block with the NaN scale, which no encoder writes) the
// kernels keep the code's.

// wire = encode(source[i] * factor): pre-scaling fused into the compression (codec::scale then
// codec::encode).
void encode(const float* source, void* wire, size_t count, Compression compression, double factor,
            cudaStream_t stream);

// destination[i] = decode(wire)[i] * factor: post-scaling fused into the decompression
// (codec::decode then codec::scale).
void decode(const void* wire, float* destination, size_t count, Compression compression,
            double factor, cudaStream_t stream);

// accumulator[i] += decode(wire)[i], in float32: a reduce-scatter step that forwards nothing
// (codec::decodeAccumulate).
void decodeAccumulate(const void* wire, float* accumulator, size_t count, Compression compression,
                      cudaStream_t stream);

// accumulator[i] += decode(received)[i]; wire = encode(accumulator): reduce, then compress for
// the next hop, in one pass (the CPU ring's decodeAccumulate followed by encode). wire may be
// received itself.
void decodeAccumulateEncode(const void* received, float* accumulator, void* wire, size_t count,
                            Compression compression, cudaStream_t stream);

// wire = encode(values); values[i] = decode(wire)[i]: the rank that owns a chunk keeps the value
// every other rank receives (the CPU ring's roundToWire, an encode then a decode, in one pass).
void roundToWire(float* values, void* wire, size_t count, Compression compression,
                 cudaStream_t stream);

}  // namespace ringcomm::cuda
