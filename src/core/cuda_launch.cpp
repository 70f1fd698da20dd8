#include "core/cuda_launch.h"

#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "core/cuda_check.h"

namespace tilegrid::cuda {
namespace {

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

int device_attribute(cudaDeviceAttr attribute, int device) {
  static std::map<std::pair<int, int>, int> cache;
  std::lock_guard lock(cache_mutex());
  auto key = std::make_pair(int(attribute), device);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int value = 0;
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  cache.emplace(key, value);
  return value;
}

}  // namespace

int multiprocessor_count(int device) {
  return device_attribute(cudaDevAttrMultiProcessorCount, device);
}

int compute_capability(int device) {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, device) * 10 +
         device_attribute(cudaDevAttrComputeCapabilityMinor, device);
}

int max_active_blocks(const void* kernel, int threads, size_t dynamic_smem, int device) {
  static std::map<std::tuple<const void*, int, size_t, int>, int> cache;
  std::lock_guard lock(cache_mutex());
  auto key = std::make_tuple(kernel, threads, dynamic_smem, device);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  CudaDeviceGuard guard(device);
  int blocks = 0;
  TG_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, dynamic_smem));
  cache.emplace(key, blocks);
  return blocks;
}

void allow_dynamic_smem(const void* kernel, int bytes, const char* what) {
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  static std::set<std::tuple<const void*, int, int>> done;
  const auto key = std::make_tuple(kernel, bytes, device);
  {
    std::lock_guard lock(cache_mutex());
    if (done.count(key) != 0) return;
  }
  const int limit = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  TG_CHECK(bytes <= limit, what, " needs ", bytes,
           " bytes of shared memory per block; this GPU allows ", limit);
  TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  std::lock_guard lock(cache_mutex());
  done.insert(key);
}

}  // namespace tilegrid::cuda
