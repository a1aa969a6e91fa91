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
#   transport   point-to-point messages: TCP, shared memory, device buffers (tcp/, shm/, cuda/)
#   tuning      the cost model and the link probe
#   algorithms  the schedules
#   engine      the progress thread and the tensor queue
#   core        the communicator, membership, device collectives, the build report
# The public headers (include/ringcomm/) may be included from any layer.
set(RINGCOMM_LAYERS
  common plan reduce codec cuda auth bootstrap transport tuning algorithms engine core)

if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DSOURCE_DIR=<the repository>")
endif()

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
  file(STRINGS "${SOURCE_DIR}/src/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"/]+/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"/]+)/.*" "\\1" included "${line}")
    if(included STREQUAL "ringcomm")
      continue()  # the public API
    endif()
    list(FIND RINGCOMM_LAYERS "${included}" included_index)
    if(included_index EQUAL -1)
      continue()  # not one of the core's folders (a system or third-party header)
    endif()
    if(included_index GREATER layer_index)
      string(STRIP "${line}" shown)
      string(APPEND violations
        "\n  src/${source}: ${shown}: layer '${layer}' includes '${included}', which is above it")
    endif()
  endforeach()
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
