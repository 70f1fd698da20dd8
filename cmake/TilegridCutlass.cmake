# Locates the CUTLASS/CuTe headers (version 4.2, see docs/DEPENDENCIES.md) and defines the
# interface target tilegrid::cutlass. Order: TILEGRID_CUTLASS_INCLUDE_DIR if given, then the
# pinned PyPI package nvidia-cutlass==4.2.0.0 of the Python that builds us, which ships the
# headers under cutlass_library/source/include.
if(NOT TILEGRID_CUTLASS_INCLUDE_DIR)
  # scikit-build-core names its interpreter Python_EXECUTABLE; otherwise look for one
  # (an active virtual environment comes first).
  if(DEFINED Python_EXECUTABLE)
    set(_tilegrid_python "${Python_EXECUTABLE}")
  else()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(_tilegrid_python "${Python3_EXECUTABLE}")
  endif()
  if(_tilegrid_python)
    execute_process(
      COMMAND "${_tilegrid_python}" -c
        "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE _tilegrid_cutlass_guess
      OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET)
    if(_tilegrid_cutlass_guess AND EXISTS "${_tilegrid_cutlass_guess}/cute/tensor.hpp")
      set(TILEGRID_CUTLASS_INCLUDE_DIR "${_tilegrid_cutlass_guess}" CACHE PATH "" FORCE)
    endif()
  endif()
endif()

if(TILEGRID_CUTLASS_INCLUDE_DIR AND EXISTS "${TILEGRID_CUTLASS_INCLUDE_DIR}/cute/tensor.hpp")
  set(TILEGRID_HAVE_CUTLASS ON)
  add_library(tilegrid_cutlass INTERFACE)
  add_library(tilegrid::cutlass ALIAS tilegrid_cutlass)
  target_include_directories(tilegrid_cutlass SYSTEM INTERFACE "${TILEGRID_CUTLASS_INCLUDE_DIR}")
  message(STATUS "tilegrid: CUTLASS/CuTe headers in ${TILEGRID_CUTLASS_INCLUDE_DIR}")
else()
  set(TILEGRID_HAVE_CUTLASS OFF)
  message(STATUS "tilegrid: CUTLASS/CuTe headers not found (pip install nvidia-cutlass==4.2.0.0 "
                 "or pass -DTILEGRID_CUTLASS_INCLUDE_DIR=<cutlass>/include); Hopper kernels that "
                 "need them are left out")
endif()
