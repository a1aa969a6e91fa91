// DataType's names, where constant expressions can read them: toString(DataType) (types.cc) and
// the CUDA kernels' element types (cuda/element_ops.cuh), whose names their launch errors and
// tests print, name a type alike.
#pragma once

#include "common/enum_names.h"
#include "ringcomm/types.h"

namespace ringcomm {

inline constexpr EnumName<DataType> kDataTypeNames[] = {
    {DataType::Int8, "int8"},         {DataType::Uint8, "uint8"},
    {DataType::Int16, "int16"},       {DataType::Int32, "int32"},
    {DataType::Int64, "int64"},       {DataType::Float16, "float16"},
    {DataType::BFloat16, "bfloat16"}, {DataType::Float32, "float32"},
    {DataType::Float64, "float64"},   {DataType::Bool, "bool"},
};

}  // namespace ringcomm
