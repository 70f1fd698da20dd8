# libtilegrid from a file built elsewhere out of these same sources (TILEGRID_PREBUILT_LIBRARY):
# an imported target with the interface src/CMakeLists.txt gives the library (the public
# headers, threads, and with CUDA the TILEGRID_WITH_CUDA definition and the static CUDA
# runtime), so that the Python module and the tests link it without compiling src/. The file
# must come from the same sources, the same CUDA setting (on or off) and CUDA architectures
# that include the GPU's; a mismatch shows as undefined symbols at link time or as missing
# kernel images at run time.
if(NOT EXISTS "${TILEGRID_PREBUILT_LIBRARY}")
  message(FATAL_ERROR "TILEGRID_PREBUILT_LIBRARY: no such file: ${TILEGRID_PREBUILT_LIBRARY}")
endif()
find_package(Threads REQUIRED)
add_library(tilegrid STATIC IMPORTED GLOBAL)
set_target_properties(tilegrid PROPERTIES
  IMPORTED_LOCATION "${TILEGRID_PREBUILT_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/include")
target_link_libraries(tilegrid INTERFACE Threads::Threads)
if(TILEGRID_WITH_CUDA)
  target_compile_definitions(tilegrid INTERFACE TILEGRID_WITH_CUDA)
  target_link_libraries(tilegrid INTERFACE CUDA::cudart_static)
endif()
add_library(tilegrid::tilegrid ALIAS tilegrid)
message(STATUS "tilegrid: linking ${TILEGRID_PREBUILT_LIBRARY} (src/ is not compiled)")
