// RINGCOMM_API marks what libringcomm.so exports. The core is compiled with hidden visibility
// (CMakeLists.txt), so everything without it stays inside the library: its internals, and a copy
// of libstdc++ that a toolchain may have linked in statically.
//
// On a class it exports the member functions defined in the library, the vtable and the
// typeinfo. Code outside the library needs the typeinfo to catch the errors the core throws
// (bindings/, ringcomm/c10d/csrc) and to derive from Store or Work, so every public class carries
// it, header-only ones too.
#pragma once

#define RINGCOMM_API __attribute__((visibility("default")))

// For what an exported class declares but keeps to itself: the State behind its pointer, whose
// members would otherwise be exported with the class.
#define RINGCOMM_HIDDEN __attribute__((visibility("hidden")))
