# The core's layers, bottom to top, and the rule that holds them: a file in src/<layer>/ includes
# headers of its own layer and of layers below it only, never above. Run as a step of the build
# (CMakeLists.txt: the core's objects depend on it), so an upward include fails the build with the
# file, the line and both layers named; tests/test_layers.py checks that it does.
#
#   cmake -DSOURCE_DIR=<repository> [-DSTAMP=<file>] -P cmake/check_layers.cmake
#
#   common      the floor: configuration, logging, tracing, deadlines, sockets, waiting
#   plan        pure arithmetic of blocks and segments, shared by the schedules and the cost model
#   reduce      reduction loops per type and op
#   codec       the wire codecs (fp16, bf16; int8, fp8 with a scale per block)
#   cuda        the CUDA kernels (reductions and codecs on the device)
#   auth        the handshake that proves the job's secret
#   bootstrap   rendezvous stores
#   transport   point-to-point messages: TCP, shared memory, UCX (tcp/, shm/, ucx/)
#   tuning      the cost model and the link probe
#   algorithms  the schedules
#   device      device buffers in collectives and messages: staging through pinned memory, the
#               CUDA IPC all-reduce. Above the schedules, which its collectives run on staged
#               copies (device_collectives.h); below the engine and the core, which only hand it
#               the buffers. The IPC all-reduce still meets its peers through callbacks
#               (device_path.h: Peers, SliceStep): the communicator picks the barrier and the
#               network's half, and the CUDA-only code stays apart from the schedules.
#   engine      the progress thread and its work
#   core        the communicator, membership, the build report
#   queue       the tensor queue (Horovod's model): it runs its fused collectives on a
#               communicator of its own, so it sits above the core
set(RINGCOMM_LAYERS
  common plan reduce codec cuda auth bootstrap transport tuning algorithms device engine core queue)

# The public headers (include/ringcomm/) belong to layers too: each to the layer that implements
# it, so that a layer includes the public headers of its own layer and below, as it does the
# private ones. A public header names its own layer's and lower layers' public headers only
# (checked below as well); one that is not listed here fails the check.
set(RINGCOMM_PUBLIC_HEADER_LAYERS
  export.h=common        # the visibility macro
  types.h=common         # DataType, ReduceOp (src/common/types.cc)
  errors.h=common        # the error hierarchy
  debug.h=common         # logging and the timelines (src/common/log.cc, trace.cc)
  config.h=common        # the configuration (src/common/config.cc)
  options.h=common       # one options struct per collective (src/common/options.cc)
  store.h=bootstrap      # the rendezvous stores (src/bootstrap/)
  shared_memory.h=transport  # memory other processes of the host map (transport/shm/)
  work.h=engine          # async completion (src/engine/work.cc)
  build_info.h=core      # the build report (src/core/build_info.cc)
  communicator.h=core    # the communicator
  tensor_queue.h=queue   # the tensor queue
)

if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DSOURCE_DIR=<the repository>")
endif()

# The layer that `header` (a file name in include/ringcomm/) belongs to, or "" when none is listed.
function(public_header_layer header result)
  set(found "")
  foreach(entry IN LISTS RINGCOMM_PUBLIC_HEADER_LAYERS)
    if(entry MATCHES "^([^=]+)=(.+)$" AND CMAKE_MATCH_1 STREQUAL header)
      set(found "${CMAKE_MATCH_2}")
    endif()
  endforeach()
  set(${result} "${found}" PARENT_SCOPE)
endfunction()

# Appends to `violations` every include of `file` (relative to SOURCE_DIR) that reaches a layer
# above `layer`: a private header "<layer>/..." or a public one "ringcomm/...".
function(check_includes file layer layer_index)
  set(found "${violations}")
  file(STRINGS "${SOURCE_DIR}/${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"/]+/")
  foreach(line IN LISTS includes)
    set(pattern "^[ \t]*#[ \t]*include[ \t]+\"([^\"/]+)/([^\"]*)\".*")
    string(REGEX REPLACE "${pattern}" "\\1" included "${line}")
    string(REGEX REPLACE "${pattern}" "\\2" name "${line}")
    set(what "'${included}'")
    if(included STREQUAL "ringcomm")
      public_header_layer("${name}" included)
      if(NOT included)
        string(STRIP "${line}" shown)
        string(APPEND found "\n  ${file}: ${shown}: include/ringcomm/${name} has no layer "
          "(cmake/check_layers.cmake's RINGCOMM_PUBLIC_HEADER_LAYERS assigns each one)")
        continue()
      endif()
      set(what "'ringcomm/${name}' (layer '${included}')")
    endif()
    list(FIND RINGCOMM_LAYERS "${included}" included_index)
    if(included_index EQUAL -1)
      continue()  # not one of the core's folders (a system or third-party header)
    endif()
    if(included_index GREATER layer_index)
      string(STRIP "${line}" shown)
      string(APPEND found
        "\n  ${file}: ${shown}: layer '${layer}' includes ${what}, which is above it")
    endif()
  endforeach()
  set(violations "${found}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE sources RELATIVE "${SOURCE_DIR}/src"
  "${SOURCE_DIR}/src/*.h" "${SOURCE_DIR}/src/*.cc" "${SOURCE_DIR}/src/*.cu"
  "${SOURCE_DIR}/src/*.cuh")
set(violations "")
foreach(source IN LISTS sources)
  string(REGEX MATCH "^[^/]+" layer "${source}")
  list(FIND RINGCOMM_LAYERS "${layer}" layer_index)
  if(layer_index EQUAL -1)
    string(APPEND violations
      "\n  src/${source}: its folder '${layer}' is not a layer (cmake/check_layers.cmake lists them)")
    continue()
  endif()
  check_includes("src/${source}" "${layer}" "${layer_index}")
endforeach()

file(GLOB public_headers RELATIVE "${SOURCE_DIR}/include/ringcomm"
  "${SOURCE_DIR}/include/ringcomm/*.h")
foreach(header IN LISTS public_headers)
  public_header_layer("${header}" layer)
  if(NOT layer)
    string(APPEND violations "\n  include/ringcomm/${header}: a public header with no layer "
      "(cmake/check_layers.cmake's RINGCOMM_PUBLIC_HEADER_LAYERS assigns each one)")
    continue()
  endif()
  list(FIND RINGCOMM_LAYERS "${layer}" layer_index)
  check_includes("include/ringcomm/${header}" "${layer}" "${layer_index}")
endforeach()

if(violations)
  list(JOIN RINGCOMM_LAYERS " < " order)
  message(FATAL_ERROR
    "ringcomm's layers (${order}): a layer includes only its own headers and those below it."
    "${violations}")
endif()
if(DEFINED STAMP)
  file(TOUCH "${STAMP}")
endif()
