// Unity translation unit for the fused programs of activations: bias + GELU + aux store, GELU's
// backward with the bias gradient, SwiGLU / GeGLU with and without the pre-activation saved. Each
// program keeps its own file (listed here, not in CMakeLists.txt); they are compiled together
// because most of a unit's nvcc time is the first instantiation of the CUTLASS epilogue templates:
// one program alone took ~110 s on one core of the CI machine, four of them together 139 s
// (docs/DEVELOPING.md).
#include "gemm/sm90/epilogue_bias_gelu_aux.cu"
#include "gemm/sm90/epilogue_gelu_grad_column_sum.cu"
#include "gemm/sm90/epilogue_glu.cu"
#include "gemm/sm90/epilogue_store_glu.cu"
