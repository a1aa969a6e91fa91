// The F16C path of the float16 codec (see codec_f16c.cc); available() says whether it may run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringcomm::codec::f16c {

bool available();
void encode(const float* in, uint16_t* out, size_t n);
void decode(const uint16_t* in, float* out, size_t n);
void accumulate(const uint16_t* in, float* out, size_t n);

}  // namespace ringcomm::codec::f16c
