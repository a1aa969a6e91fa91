# How the C++ driver links its runtime libraries into a shared library, asked at configure time
# (its link line, `-###`). Some toolchains' g++ links libstdc++ and libgcc statically, as
# -static-libstdc++ -static-libgcc would. Included from CMakeLists.txt; sets
#   RINGCOMM_RUNTIME_LINK_OPTIONS  link options for every library and module of ringcomm
#
# A static libstdc++ is fine once it stays private: CMakeLists.txt links with --exclude-libs,ALL
# and exports only RINGCOMM_API, so the copy inside libringcomm.so cannot take over the system
# libstdc++ that torch and numpy load, nor be taken over by it (before it was private, ranks got
# port 0 from the rendezvous, or crashed in std::ostream::_M_insert<unsigned long>).
#
# A static libgcc is not: it holds the unwinder, and an exception thrown in libringcomm.so (a
# TimeoutError, a MismatchError) and caught in the Python module or the torch backend must be
# unwound by one unwinder; with a private copy on each side the process aborts at the first
# error. So when the driver links libgcc statically, ringcomm links the shared one, libgcc_s,
# ahead of it, as every other library in the process does. Without a libgcc_s to link, configure
# stops and says which compiler to use instead.

set(RINGCOMM_RUNTIME_LINK_OPTIONS "")
# Links libgcc_s whatever the driver adds after it: ld takes the unwinder from the first library
# that defines it, and --no-as-needed keeps the dependency although the objects name the
# unwinder only through libstdc++.
set(RINGCOMM_SHARED_UNWINDER_LINK_OPTIONS "-Wl,--push-state,--no-as-needed,-lgcc_s,--pop-state")

separate_arguments(_ringcomm_probe_flags UNIX_COMMAND
  "${CMAKE_CXX_FLAGS} ${CMAKE_SHARED_LINKER_FLAGS} ${CMAKE_MODULE_LINKER_FLAGS}")
execute_process(
  COMMAND ${CMAKE_CXX_COMPILER} ${_ringcomm_probe_flags} -shared "-###" -x c++ /dev/null -o probe.so
  RESULT_VARIABLE _ringcomm_probe_result
  OUTPUT_VARIABLE _ringcomm_probe_out
  ERROR_VARIABLE _ringcomm_probe_link_line
)
if(NOT _ringcomm_probe_result EQUAL 0)
  message(STATUS "ringcomm: could not ask ${CMAKE_CXX_COMPILER} how it links (-###); assuming "
                 "the shared libstdc++ and libgcc_s")
else()
  string(REGEX MATCH "(-Bstatic[ \"]+-lstdc\\+\\+|libstdc\\+\\+\\.a)" _ringcomm_static_libstdcxx
         "${_ringcomm_probe_link_line}")
  string(REGEX MATCH "(-lgcc_eh|libgcc_eh\\.a)" _ringcomm_static_unwinder
         "${_ringcomm_probe_link_line}")
  string(REGEX MATCH "-lgcc_s" _ringcomm_shared_unwinder "${_ringcomm_probe_link_line}")
  if(_ringcomm_static_libstdcxx)
    message(STATUS "ringcomm: ${CMAKE_CXX_COMPILER} links libstdc++ statically; "
                   "libringcomm.so keeps its copy private")
  endif()
  if(_ringcomm_static_unwinder AND NOT _ringcomm_shared_unwinder)
    execute_process(
      COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgcc_s.so
      OUTPUT_VARIABLE _ringcomm_libgcc_s
      OUTPUT_STRIP_TRAILING_WHITESPACE
    )
    # -print-file-name prints the bare name when the driver has no such file.
    if(NOT IS_ABSOLUTE "${_ringcomm_libgcc_s}")
      message(FATAL_ERROR
        "ringcomm: ${CMAKE_CXX_COMPILER} links libgcc (the C++ unwinder) statically and has no "
        "shared libgcc_s to link instead. Exceptions thrown by libringcomm.so and caught by the "
        "Python module or the torch backend would abort the process. Build with a compiler that "
        "links the shared runtime, e.g. CXX=/usr/bin/g++ pip install .")
    endif()
    message(STATUS "ringcomm: ${CMAKE_CXX_COMPILER} links libgcc statically; linking the shared "
                   "unwinder (${_ringcomm_libgcc_s}) instead, so that exceptions cross libraries")
    list(APPEND RINGCOMM_RUNTIME_LINK_OPTIONS ${RINGCOMM_SHARED_UNWINDER_LINK_OPTIONS})
  endif()
endif()
