// float32 <-> binary16 with the F16C instructions (x86-64 CPUs since 2013), 8 values at a time.
// Bit-exact with the portable conversions in reduce/half.h (checked for all 2^32 inputs when
// those were written), so ranks on machines with and without F16C agree.
#include "codec/codec_f16c.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "common/cpu_features.h"

namespace ringcomm::codec::f16c {

__attribute__((target("avx,f16c"))) void encode(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i packed = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx,f16c"))) void decode(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}

__attribute__((target("avx,f16c"))) void accumulate(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wide = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), wide));
  }
  for (; i < n; ++i) out[i] += _cvtsh_ss(in[i]);
}

bool available() {
  static const bool supported = __builtin_cpu_supports("avx") && cpu::hasF16c();
  return supported;
}

}  // namespace ringcomm::codec::f16c

#else

namespace ringcomm::codec::f16c {
void encode(const float*, uint16_t*, size_t) {}
void decode(const uint16_t*, float*, size_t) {}
void accumulate(const uint16_t*, float*, size_t) {}
bool available() { return false; }
}  // namespace ringcomm::codec::f16c

#endif
