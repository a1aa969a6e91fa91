#include "transport/ucx/ucx_api.h"

#include <dlfcn.h>

#include <string>

namespace ringcomm::transport {
namespace {

struct Loaded {
  UcxApi api;
  bool ok = false;
  std::string whyNot;
};

// Where pkg-config found UCX at build time first (a cluster's HPC-X), then the loader's path.
const char* const kLibraries[] = {
#ifdef RINGCOMM_UCX_LIBDIR
    RINGCOMM_UCX_LIBDIR "/libucp.so.0",
#endif
    "libucp.so.0", "libucp.so"};

Loaded load() {
  Loaded loaded;
  void* library = nullptr;
  std::string errors;
  for (const char* name : kLibraries) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* error = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (error != nullptr ? error : name);
  }
  if (library == nullptr) {
    loaded.whyNot = "no UCX library loads here (" + errors +
                    "): install it (Debian/Ubuntu: libucx0; RHEL: ucx) or put a cluster's UCX "
                    "on LD_LIBRARY_PATH";
    return loaded;
  }
  // dlsym on libucp's handle searches what it loaded too (libucs, libuct). Never unloaded: UCX
  // keeps threads and handlers of its own.
  std::string missing;
#define RINGCOMM_UCX_RESOLVE(name)                                                  \
  loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(library, #name));     \
  if (loaded.api.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  RINGCOMM_UCX_FUNCTIONS(RINGCOMM_UCX_RESOLVE)
#undef RINGCOMM_UCX_RESOLVE
  loaded.api.globalOptions = static_cast<ucs_global_opts_t*>(dlsym(library, "ucs_global_opts"));
  if (loaded.api.globalOptions == nullptr) missing += ", ucs_global_opts";
  if (!missing.empty()) {
    loaded.whyNot = "the UCX library here lacks " + missing + " (ringcomm needs UCX 1.13 or newer)";
    return loaded;
  }
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  loaded.api.ucp_get_version(&major, &minor, &release);
  if (major < 1 || (major == 1 && minor < 13)) {
    loaded.whyNot = "the UCX library here is " + std::to_string(major) + "." +
                    std::to_string(minor) + ", older than 1.13, which ringcomm needs";
    return loaded;
  }
  loaded.ok = true;
  return loaded;
}

}  // namespace

const UcxApi* ucxApi(std::string* whyNot) {
  static const Loaded loaded = load();
  if (whyNot != nullptr) *whyNot = loaded.whyNot;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace ringcomm::transport
