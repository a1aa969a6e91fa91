// The names of an enum's values, in one table per enum: toString() looks a value up in it, a
// parser looks a name up in it, and the parser's error lists the names from it, so that the three
// cannot disagree (types.cc; DataType's, in common/data_type_names.h, also names the CUDA kernels'
// element types).
#pragma once

#include <cstddef>
#include <string>

#include "ringcomm/errors.h"

namespace ringcomm {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;
};

// The name of `value`, or `unknown` for a value the table lacks (an integer cast to the enum).
template <typename Enum, size_t N>
constexpr const char* nameIn(const EnumName<Enum> (&names)[N], Enum value,
                             const char* unknown = "unknown") {
  for (const EnumName<Enum>& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return unknown;
}

// The value called `name`; else InvalidArgument("<what> must be one of a, b, c; got '<name>'").
template <typename Enum, size_t N>
Enum parseIn(const EnumName<Enum> (&names)[N], const std::string& name, const char* what) {
  std::string list;
  for (const EnumName<Enum>& entry : names) {
    if (name == entry.name) return entry.value;
    list += (list.empty() ? "" : ", ") + std::string(entry.name);
  }
  throw InvalidArgument(std::string(what) + " must be one of " + list + "; got '" + name + "'");
}

}  // namespace ringcomm
