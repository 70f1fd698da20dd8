// Unity translation unit for the fused programs of element-wise epilogues: the SwiGLU / GeGLU
// backward, RoPE, row scale, scalar scale or shift. Each program keeps its own file (listed here,
// not in CMakeLists.txt); they are compiled together because most of a unit's nvcc time is the
// first instantiation of the CUTLASS epilogue templates: one program alone took ~110 s on one core
// of the CI machine, four of them together 139 s (docs/DEVELOPING.md).
#include "gemm/sm90/epilogue_glu_grad.cu"
#include "gemm/sm90/epilogue_rope.cu"
#include "gemm/sm90/epilogue_row_scale.cu"
#include "gemm/sm90/epilogue_scalar.cu"
