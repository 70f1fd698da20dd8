#include "tilegrid/core/jagged_tensor.h"

#include <cstddef>
#include <vector>

#include "core/cuda_build.h"
#include "tilegrid/core/checks.h"
#ifdef TILEGRID_WITH_CUDA
#include "core/cuda_copy.h"
#include "core/jagged_cuda.h"
#endif

namespace tilegrid {
namespace {

constexpr const char* kOp = "JaggedTensor";

std::vector<int64_t> offsets_on_host(const TensorView& offsets, Stream stream) {
  std::vector<int64_t> host(static_cast<size_t>(offsets.numel()));
  if (offsets.device.is_cpu()) {
    const int64_t* p = offsets.data_ptr<int64_t>();
    for (size_t i = 0; i < host.size(); ++i) host[i] = p[i * offsets.stride(0)];
    return host;
  }
  require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
  check_contiguous(kOp, "joffsets", offsets);
  cuda::copy_to_host(host.data(), offsets.data, host.size() * sizeof(int64_t), offsets.device.index,
                     stream);
#endif
  return host;
}

}  // namespace

void validate_jagged(const TensorView& data, const TensorView& offsets, Stream stream) {
  TG_CHECK_VALUE(data.ndim() >= 1, kOp,
                 ": jdata must have at least one dimension [N, ...], got "
                 "a scalar");
  check_ndim(kOp, "joffsets", offsets, 1);
  check_dtype(kOp, "joffsets", offsets, {DType::Int64});
  check_same_device(kOp, "joffsets", offsets, "jdata", data);
  TG_CHECK_VALUE(offsets.size(0) >= 1, kOp,
                 ": joffsets must have B+1 >= 1 entries, got an empty tensor");
#ifdef TILEGRID_WITH_CUDA
  // On a GPU, one kernel says whether they are right; only a wrong one is copied to the host,
  // to say where it is wrong.
  if (offsets.device.is_cuda()) {
    check_contiguous(kOp, "joffsets", offsets);
    if (cuda::offsets_valid(offsets.data_ptr<const int64_t>(), offsets.size(0) - 1, data.size(0),
                            offsets.device.index, stream))
      return;
  }
#endif
  std::vector<int64_t> host = offsets_on_host(offsets, stream);
  TG_CHECK_VALUE(host.front() == 0, kOp, ": joffsets[0] must be 0, got ", host.front());
  for (size_t b = 1; b < host.size(); ++b)
    TG_CHECK_VALUE(host[b] >= host[b - 1], kOp, ": joffsets must be non-decreasing, got joffsets[",
                   b - 1, "] = ", host[b - 1], " > joffsets[", b, "] = ", host[b]);
  TG_CHECK_VALUE(host.back() == data.size(0), kOp, ": joffsets[-1] must equal the number of rows ",
                 data.size(0), " of jdata, got ", host.back());
}

void jagged_batch_index(const TensorView& offsets, const TensorView& jidx, Stream stream) {
  check_ndim(kOp, "jidx", jidx, 1);
  check_dtype(kOp, "jidx", jidx, {DType::Int32});
  check_dtype(kOp, "joffsets", offsets, {DType::Int64});
  check_same_device(kOp, "jidx", jidx, "joffsets", offsets);
  check_contiguous(kOp, "joffsets", offsets);
  check_contiguous(kOp, "jidx", jidx);
  int64_t num_tensors = offsets.size(0) - 1;
  int64_t num_rows = jidx.size(0);
  if (offsets.device.is_cpu()) {
    const int64_t* off = offsets.data_ptr<int64_t>();
    int32_t* out = jidx.data_ptr<int32_t>();
    for (int64_t b = 0; b < num_tensors; ++b)
      for (int64_t i = off[b]; i < off[b + 1] && i < num_rows; ++i)
        out[i] = static_cast<int32_t>(b);
    return;
  }
  require_cuda_build(kOp);
#ifdef TILEGRID_WITH_CUDA
  cuda::jagged_batch_index(offsets.data_ptr<int64_t>(), num_tensors, jidx.data_ptr<int32_t>(),
                           num_rows, offsets.device.index, stream);
#endif
}

JaggedTensor::JaggedTensor(Tensor jdata, Tensor joffsets, Stream stream)
    : jdata_(std::move(jdata)), joffsets_(std::move(joffsets)) {
  validate_jagged(jdata_, joffsets_, stream);
}

JaggedTensor JaggedTensor::from_trusted_offsets(Tensor jdata, Tensor joffsets) {
  return JaggedTensor(std::move(jdata), std::move(joffsets), Trusted{});
}

Tensor JaggedTensor::jidx(Stream stream) const {
  Tensor out = Tensor::empty({num_rows()}, DType::Int32, device(), stream);
  jagged_batch_index(joffsets_, out, stream);
  return out;
}

}  // namespace tilegrid
