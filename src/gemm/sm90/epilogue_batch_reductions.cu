// Unity translation unit for the fused programs with reductions: column sums, residual + row sums
// of squares, row sum / max / log-sum-exp partials. Each program keeps its own file (listed here,
// not in CMakeLists.txt); they are compiled together because most of a unit's nvcc time is the
// first instantiation of the CUTLASS epilogue templates: one program alone took ~110 s on one core
// of the CI machine, four of them together 139 s (docs/DEVELOPING.md).
#include "gemm/sm90/epilogue_column_sum.cu"
#include "gemm/sm90/epilogue_residual_sum_squares.cu"
#include "gemm/sm90/epilogue_row_sum.cu"
#include "gemm/sm90/epilogue_row_max.cu"
#include "gemm/sm90/epilogue_row_logsumexp.cu"
