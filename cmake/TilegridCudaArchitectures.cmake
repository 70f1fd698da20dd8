# Which GPUs the CUDA code is compiled for (included before enable_language(CUDA)).
#
# TILEGRID_CUDA_ARCHS, like PyTorch's TORCH_CUDA_ARCH_LIST:
#   ""        (default) the GPUs of this machine, as nvidia-smi reports their compute
#             capabilities; on a machine without a GPU, "check";
#   "check"   every CUDA translation unit compiled once, for a compile check without a GPU:
#             the portable kernels for sm_80, the Hopper kernels for sm_90a;
#   a list    e.g. "80;90" or "8.0;9.0+PTX": machine code for each compute capability, PTX
#             too for those marked +PTX (for GPUs newer than the list); for a wheel that
#             serves several GPUs.
# The portable kernels are built for every entry; the Hopper kernels (wgmma, setmaxnreg,
# sm_90a only) when 9.0 is among them. Each extra architecture costs a full back-end pass
# per unit: the portable attention units take about 1.5-2 minutes of nvcc each per
# architecture (docs/DEVELOPING.md has the table).
#
# Sets CMAKE_CUDA_ARCHITECTURES (portable units), TILEGRID_BUILD_SM90A (ON/OFF) and
# TILEGRID_CUDA_ARCHS_DESCRIPTION (for the configure log).
set(TILEGRID_CUDA_ARCHS "" CACHE STRING
    "CUDA architectures: empty = this machine's GPUs (check without one), check, or a list such as 80;90 or 8.0;9.0+PTX")

function(_tilegrid_detect_gpus out)
  set(${out} "" PARENT_SCOPE)
  find_program(_tilegrid_nvidia_smi nvidia-smi)
  if(NOT _tilegrid_nvidia_smi)
    return()
  endif()
  execute_process(COMMAND "${_tilegrid_nvidia_smi}" --query-gpu=compute_cap --format=csv,noheader
                  OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 30)
  if(NOT rc EQUAL 0 OR caps STREQUAL "")
    return()
  endif()
  string(REPLACE "\n" ";" caps "${caps}")
  list(REMOVE_DUPLICATES caps)
  set(${out} "${caps}" PARENT_SCOPE)
endfunction()

set(_tilegrid_archs "${TILEGRID_CUDA_ARCHS}")
set(_tilegrid_source "TILEGRID_CUDA_ARCHS")
if(_tilegrid_archs STREQUAL "" AND DEFINED CMAKE_CUDA_ARCHITECTURES)
  # A CMake user's own CMAKE_CUDA_ARCHITECTURES (e.g. 80-real;90) is taken as given.
  set(_tilegrid_archs "${CMAKE_CUDA_ARCHITECTURES}")
  set(_tilegrid_source "CMAKE_CUDA_ARCHITECTURES")
endif()
if(_tilegrid_archs STREQUAL "")
  _tilegrid_detect_gpus(_tilegrid_archs)
  set(_tilegrid_source "the GPUs of this machine")
  if(_tilegrid_archs STREQUAL "")
    set(_tilegrid_archs check)
    set(_tilegrid_source "no GPU found: compile check")
  endif()
endif()

set(TILEGRID_BUILD_SM90A OFF)
if(_tilegrid_archs STREQUAL "check")
  set(CMAKE_CUDA_ARCHITECTURES 80-real)
  set(TILEGRID_BUILD_SM90A ON)
else()
  set(_tilegrid_cmake_archs "")
  foreach(entry IN LISTS _tilegrid_archs)
    string(STRIP "${entry}" entry)
    set(ptx OFF)
    if(entry MATCHES "\\+PTX$")
      set(ptx ON)
      string(REGEX REPLACE "\\+PTX$" "" entry "${entry}")
    endif()
    # 9.0 / 90 / 90-real / 90a: the number alone.
    string(REGEX REPLACE "-(real|virtual)$" "" entry_number "${entry}")
    string(REPLACE "." "" entry_number "${entry_number}")
    string(REGEX REPLACE "a$" "" entry_number "${entry_number}")
    if(NOT entry_number MATCHES "^[0-9]+$")
      message(FATAL_ERROR "tilegrid: ${_tilegrid_source} entry '${entry}' is not a compute "
                          "capability (expected e.g. 80, 9.0 or 9.0+PTX, or 'check')")
    endif()
    if(entry_number STREQUAL "90")
      set(TILEGRID_BUILD_SM90A ON)
    endif()
    if(entry MATCHES "-(real|virtual)$")
      list(APPEND _tilegrid_cmake_archs "${entry_number}${CMAKE_MATCH_0}")
    elseif(ptx)
      list(APPEND _tilegrid_cmake_archs "${entry_number}")
    else()
      list(APPEND _tilegrid_cmake_archs "${entry_number}-real")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _tilegrid_cmake_archs)
  set(CMAKE_CUDA_ARCHITECTURES "${_tilegrid_cmake_archs}")
endif()
set(TILEGRID_CUDA_ARCHS_DESCRIPTION
    "portable kernels for ${CMAKE_CUDA_ARCHITECTURES}, Hopper kernels (sm_90a) ${TILEGRID_BUILD_SM90A} (from ${_tilegrid_source})")
