# The CUDA kernels of the core (src/cuda) and their unit tests (tests/cuda), included at the end
# of the top-level CMakeLists.txt.
#
# Off by default: the ordinary build (pip install) stays CPU-only and needs no nvcc; the core then
# gets src/device/no_cuda.cc, which refuses device buffers with a message saying how to rebuild.
# With it on:
#   ringcomm_cuda_kernels    a static library of the kernels, for the device path (src/device)
#   ringcomm_cuda_tests      the kernels' tests; exit code 0 when they pass, 77 when there is no
#                            CUDA device, and with --host-only the checks that need none
# and the device path of the core (src/device/cuda_path.cc: staging, IPC) joins the core's
# objects (ringcomm_objects), linked with the kernels and the CUDA runtime.
# The kernels and their tests need only the core's headers (include/, src/), not the library.
option(RINGCOMM_BUILD_CUDA "Build the CUDA kernels (src/cuda) and their tests; needs nvcc" OFF)

if(RINGCOMM_BUILD_CUDA)
  # nvcc 13 builds for sm_75 and newer. Machine code for sm_80 (A100; it also runs on the sm_86 and
  # sm_89 cards) and sm_90 (H100, H200), plus sm_90 PTX that the driver compiles for GPUs newer
  # than both. Each architecture is another full device compile, which CI does on 2 cores; pass
  # -DCMAKE_CUDA_ARCHITECTURES=native (or a list) to build for something else.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)

  # --fmad=false: nvcc would otherwise fuse a multiply and an add into one FMA, which rounds once
  # where the CPU kernels round twice; the kernels must give the CPU's bits. For the same reason
  # never --use_fast_math: it flushes subnormals to zero and approximates division.
  set(RINGCOMM_CUDA_FLAGS
    "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>"
    "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>"
  )

  add_library(ringcomm_cuda_kernels STATIC
    src/cuda/reduce_kernels.cu
    src/cuda/codec_kernels.cu
  )
  target_include_directories(ringcomm_cuda_kernels PUBLIC
    ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/src
  )
  target_compile_options(ringcomm_cuda_kernels PRIVATE ${RINGCOMM_CUDA_FLAGS})
  # The shared CUDA runtime, so that a process holds one copy of it however many libraries use it
  # (torch and CuPy load it too); a static copy inside the core would keep runtime state apart.
  target_link_libraries(ringcomm_cuda_kernels PUBLIC CUDA::cudart)
  set_target_properties(ringcomm_cuda_kernels PROPERTIES
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Shared
    POSITION_INDEPENDENT_CODE ON
    # Internal to the core, like its other objects (CMakeLists.txt).
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
  )

  # The device path: host code that calls the CUDA runtime and enqueues the kernels, part of the
  # core's objects (hidden like the rest of them).
  if(TARGET ringcomm_objects)
    target_sources(ringcomm_objects PRIVATE
      ${PROJECT_SOURCE_DIR}/src/device/cuda_path.cc
      ${PROJECT_SOURCE_DIR}/src/device/device_state.cc
      ${PROJECT_SOURCE_DIR}/src/device/staging.cc
      ${PROJECT_SOURCE_DIR}/src/device/message_staging.cc
      ${PROJECT_SOURCE_DIR}/src/device/ipc.cc
      ${PROJECT_SOURCE_DIR}/src/queue/queue_device.cc
    )
    target_link_libraries(ringcomm_objects PRIVATE ringcomm_cuda_kernels CUDA::cudart)
    # What `python -m ringcomm info` reports as the kernels' architectures (ringcomm::buildInfo),
    # comma-separated: a ';' would split the definition in two.
    string(REPLACE ";" "," RINGCOMM_CUDA_ARCHITECTURE_LIST "${CMAKE_CUDA_ARCHITECTURES}")
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/device/cuda_path.cc APPEND PROPERTY
      COMPILE_DEFINITIONS "RINGCOMM_CUDA_ARCHITECTURES=\"${RINGCOMM_CUDA_ARCHITECTURE_LIST}\"")
  endif()
  if(TARGET ringcomm_core)
    # The CUDA runtime is the toolkit's shared one: let the installed library find it there when
    # LD_LIBRARY_PATH does not name it.
    set_property(TARGET ringcomm_core APPEND PROPERTY INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
    set_property(TARGET ringcomm_core APPEND PROPERTY BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  endif()

  # The tests compare the kernels with the CPU kernels themselves, so those sources are compiled
  # into the test with the copy routine they call (the core library is not linked).
  file(GLOB RINGCOMM_CUDA_TEST_SOURCES CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/tests/cuda/*.cu
    ${PROJECT_SOURCE_DIR}/tests/cuda/*.cc
  )
  add_executable(ringcomm_cuda_tests
    ${RINGCOMM_CUDA_TEST_SOURCES}
    src/reduce/reduce.cc
    src/reduce/kernels_portable.cc
    src/reduce/kernels_avx2.cc
    src/common/bytes.cc
    src/codec/codec.cc
    src/codec/codec_block8.cc
    src/codec/codec_block8_avx2.cc
    src/codec/codec_f16c.cc
  )
  # tests/cpp for check.h, the TEST / CHECK harness the C++ unit tests use too.
  target_include_directories(ringcomm_cuda_tests PRIVATE
    ${PROJECT_SOURCE_DIR}/tests/cuda
    ${PROJECT_SOURCE_DIR}/tests/cpp
  )
  target_compile_options(ringcomm_cuda_tests PRIVATE ${RINGCOMM_CUDA_FLAGS})
  target_link_libraries(ringcomm_cuda_tests PRIVATE ringcomm_cuda_kernels Threads::Threads)
  set_target_properties(ringcomm_cuda_tests PROPERTIES
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Shared
  )
else()
  if(TARGET ringcomm_objects)
    target_sources(ringcomm_objects PRIVATE ${PROJECT_SOURCE_DIR}/src/device/no_cuda.cc
                                            ${PROJECT_SOURCE_DIR}/src/queue/no_cuda_queue.cc)
  endif()
endif()
