#pragma once
// Shared by the kernel-level tuning aids in bench/cuda/: an error check that exits, and the
// steady-state timing they all use (CUDA events around batches of 20 back-to-back launches,
// median of 10 batches after 2 warm-up batches; launch(i) is told the launch's index so that
// it can alternate input sets that do not fit in L2 together). Not part of the library.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                 \
  do {                                                              \
    cudaError_t e = (call);                                         \
    if (e != cudaSuccess) {                                         \
      std::printf("%s failed: %s\n", #call, cudaGetErrorString(e)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

// Median milliseconds a launch.
template <class Launch>
float time_batches(Launch launch) {
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  std::vector<float> ms;
  constexpr int kBatch = 20;
  for (int b = 0; b < 12; ++b) {
    CHECK(cudaEventRecord(start));
    for (int i = 0; i < kBatch; ++i) launch(i);
    CHECK(cudaEventRecord(end));
    CHECK(cudaEventSynchronize(end));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, end));
    if (b >= 2) ms.push_back(t / kBatch);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
