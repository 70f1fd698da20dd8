# Host sanitizers for the CPU library and everything built beside it (its C++ tests, the Python
# module): TILEGRID_SANITIZERS is a comma-separated list handed to -fsanitize=, e.g.
# "address,undefined" (CI builds that with clang). Every sanitizer is built with
# -fno-sanitize-recover, so that a report ends the test with an error rather than scrolling
# past it; frame pointers are kept for the reports' stack traces.
#
# CPU-only: device code is checked by compute-sanitizer (scripts/gpu.sh), and ASan's shadow
# memory and the CUDA driver's mappings need settings of their own to coexist. The Python
# module of such a build runs only with the sanitizer runtime preloaded (LD_PRELOAD).
set(TILEGRID_SANITIZERS "" CACHE STRING
    "Host sanitizers for the C++ code, -fsanitize= list (e.g. address,undefined); empty: none")
if(TILEGRID_SANITIZERS)
  if(TILEGRID_WITH_CUDA)
    message(FATAL_ERROR "TILEGRID_SANITIZERS=${TILEGRID_SANITIZERS} needs a CPU-only build "
                        "(-DTILEGRID_ENABLE_CUDA=OFF); CUDA code is checked with compute-sanitizer")
  endif()
  set(_tilegrid_sanitize_flags -fsanitize=${TILEGRID_SANITIZERS} -fno-sanitize-recover=all
                               -fno-omit-frame-pointer)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "${_tilegrid_sanitize_flags}")
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${CMAKE_REQUIRED_FLAGS}")
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=${TILEGRID_SANITIZERS})
  # The result is cached under a name of its own for each list, so a changed list is checked.
  string(MAKE_C_IDENTIFIER "TILEGRID_SANITIZERS_LINK_${TILEGRID_SANITIZERS}" _tilegrid_sanitizers_ok)
  check_cxx_source_compiles("int main() { return 0; }" ${_tilegrid_sanitizers_ok})
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT ${_tilegrid_sanitizers_ok})
    message(FATAL_ERROR "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} cannot build and link "
                        "with -fsanitize=${TILEGRID_SANITIZERS} (CMakeFiles/CMakeError.log says why)")
  endif()
  add_compile_options(${_tilegrid_sanitize_flags})
  add_link_options(-fsanitize=${TILEGRID_SANITIZERS})
  message(STATUS "tilegrid: sanitizers ${TILEGRID_SANITIZERS} (errors are fatal)")
endif()
