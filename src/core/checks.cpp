#include <string>
#include <string_view>

#include "tilegrid/core/checks.h"

namespace tilegrid {

void check_dtype(std::string_view op, std::string_view arg, const TensorView& t,
                 std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string msg = detail::concat(op, ": ", arg, " must be ");
  int i = 0;
  for (DType d : allowed) {
    if (i++) msg += i == static_cast<int>(allowed.size()) ? " or " : ", ";
    append(msg, d);
  }
  throw TypeError(detail::concat(msg, ", got ", t.dtype));
}

void check_ndim(std::string_view op, std::string_view arg, const TensorView& t, int ndim) {
  TG_CHECK_VALUE(t.ndim() == ndim, op, ": ", arg, " must have ", ndim, " dimension",
                 ndim == 1 ? "" : "s", ", got shape ", t.shape);
}

void check_same_device(std::string_view op, std::string_view arg, const TensorView& t,
                       std::string_view ref_arg, const TensorView& ref) {
  TG_CHECK_VALUE(t.device == ref.device, op, ": ", arg, " is on ", t.device, " but ", ref_arg,
                 " is on ", ref.device, "; all tensors must be on one device");
}

void check_shape(std::string_view op, std::string_view arg, const TensorView& t,
                 const Shape& expected) {
  TG_CHECK_VALUE(t.shape == expected, op, ": ", arg, " must have shape ", expected, ", got ",
                 t.shape);
}

void check_contiguous(std::string_view op, std::string_view arg, const TensorView& t) {
  TG_CHECK_VALUE(t.is_contiguous(), op, ": ", arg, " must be contiguous, got shape ", t.shape,
                 " with strides ", t.strides);
}

void check_last_dim_contiguous(std::string_view op, std::string_view arg, const TensorView& t) {
  TG_CHECK_VALUE(t.ndim() >= 1, op, ": ", arg, " must have at least one dimension");
  TG_CHECK_VALUE(t.size(-1) <= 1 || t.stride(-1) == 1 || t.numel() == 0, op, ": ", arg,
                 " must have a contiguous last dimension (stride 1), got strides ", t.strides,
                 " for shape ", t.shape);
}

void check_data(std::string_view op, std::string_view arg, const TensorView& t) {
  TG_CHECK_VALUE(t.numel() == 0 || t.data != nullptr, op, ": ", arg, " has a null data pointer");
}

}  // namespace tilegrid
