# Warnings on for our own targets only (never for CUTLASS or nanobind headers).
# TILEGRID_WARNINGS_AS_ERRORS (CI turns it on for every host compiler it builds with) makes
# them errors; off by default, so that a newer compiler's new warning never stops a user's build.
option(TILEGRID_WARNINGS_AS_ERRORS "Treat the C++ compiler's warnings as errors" OFF)
function(tilegrid_enable_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${TILEGRID_WARNINGS_AS_ERRORS}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror=all-warnings>)
endfunction()
