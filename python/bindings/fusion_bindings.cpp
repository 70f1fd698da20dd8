// Fusion-pillar bindings. Outputs are allocated by the caller (torch) and passed in.
#include <nanobind/stl/optional.h>

#include "convert.h"
#include "tilegrid/fusion/cross_entropy.h"
#include "tilegrid/fusion/rms_norm.h"
#include "tilegrid/fusion/rope_rotate.h"

namespace tilegrid::python {

void bind_fusion(nb::module_& m) {
  m.def(
      "rms_norm_forward",
      [](nb::ndarray<> x, std::optional<nb::ndarray<>> weight, double eps, nb::ndarray<> y,
         std::optional<nb::ndarray<>> rstd, uintptr_t stream) {
        rms_norm_forward(as_view(x), as_view(weight), eps, as_view(y), as_view(rstd),
                         as_stream(stream));
      },
      nb::arg("x"), nb::arg("weight").none(), nb::arg("eps"), nb::arg("y"), nb::arg("rstd").none(),
      nb::arg("stream") = 0);

  m.def(
      "rms_norm_backward",
      [](nb::ndarray<> dy, nb::ndarray<> x, std::optional<nb::ndarray<>> weight, nb::ndarray<> rstd,
         nb::ndarray<> dx, std::optional<nb::ndarray<>> dweight, uintptr_t stream,
         std::optional<nb::ndarray<>> dresidual) {
        rms_norm_backward(as_view(dy), as_view(x), as_view(weight), as_view(rstd), as_view(dx),
                          as_view(dweight), as_stream(stream), as_view(dresidual));
      },
      nb::arg("dy"), nb::arg("x"), nb::arg("weight").none(), nb::arg("rstd"), nb::arg("dx"),
      nb::arg("dweight").none(), nb::arg("stream") = 0, nb::arg("dresidual").none() = nb::none());

  m.def(
      "cross_entropy_loss_and_grad",
      [](nb::ndarray<> logits, nb::ndarray<> target, int64_t ignore_index, nb::ndarray<> loss,
         std::optional<nb::ndarray<>> grad_scale, uintptr_t stream) {
        cross_entropy_loss_and_grad(as_view(logits), as_view(target), ignore_index, as_view(loss),
                                    as_view(grad_scale), as_stream(stream));
      },
      nb::arg("logits"), nb::arg("target"), nb::arg("ignore_index"), nb::arg("loss"),
      nb::arg("grad_scale").none(), nb::arg("stream") = 0);

  m.def(
      "rope_rotate",
      [](nb::ndarray<> x, nb::ndarray<> positions, nb::ndarray<> inv_freq, bool inverse,
         nb::ndarray<> out, uintptr_t stream) {
        rope_rotate(as_view(x), as_view(positions), as_view(inv_freq), inverse, as_view(out),
                    as_stream(stream));
      },
      nb::arg("x"), nb::arg("positions"), nb::arg("inv_freq"), nb::arg("inverse"), nb::arg("out"),
      nb::arg("stream") = 0);
}

}  // namespace tilegrid::python
