// Attention-pillar bindings. Outputs (out, lse) are allocated by the caller (torch).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "convert.h"
#include "tilegrid/attention/attention.h"
#include "tilegrid/attention/kvcache.h"

namespace tilegrid::python {

namespace {
// softmax_scale None: 1 / sqrt(head_dim).
attention::Params params_of(std::optional<double> softmax_scale, bool causal, int64_t window_left,
                            int64_t window_right, double softcap) {
  attention::Params p;
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = softcap;
  return p;
}
}  // namespace

void bind_attention(nb::module_& m) {
  m.def(
      "flash_attn_forward",
      [](nb::ndarray<> q, nb::ndarray<> k, nb::ndarray<> v, std::optional<double> softmax_scale,
         bool causal, int64_t window_left, int64_t window_right, double softcap, nb::ndarray<> out,
         std::optional<nb::ndarray<>> lse, uintptr_t stream) {
        attention::forward(as_view(q), as_view(k), as_view(v),
                           params_of(softmax_scale, causal, window_left, window_right, softcap),
                           as_view(out), as_view(lse), as_stream(stream));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("softmax_scale").none(), nb::arg("causal"),
      nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"), nb::arg("out"),
      nb::arg("lse").none(), nb::arg("stream") = 0);

  m.def(
      "flash_attn_varlen_forward",
      [](nb::ndarray<> q, nb::ndarray<> k, nb::ndarray<> v, nb::ndarray<> cu_seqlens_q,
         nb::ndarray<> cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
         std::optional<double> softmax_scale, bool causal, int64_t window_left,
         int64_t window_right, double softcap, nb::ndarray<> out, std::optional<nb::ndarray<>> lse,
         uintptr_t stream) {
        attention::forward_varlen(
            as_view(q), as_view(k), as_view(v), as_view(cu_seqlens_q), as_view(cu_seqlens_k),
            max_seqlen_q, max_seqlen_k,
            params_of(softmax_scale, causal, window_left, window_right, softcap), as_view(out),
            as_view(lse), as_stream(stream));
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"),
      nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::arg("softmax_scale").none(),
      nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"),
      nb::arg("out"), nb::arg("lse").none(), nb::arg("stream") = 0);

  m.def(
      "flash_attn_kvcache_forward",
      [](nb::ndarray<> q, nb::ndarray<> k_cache, nb::ndarray<> v_cache, nb::ndarray<> seqlen_k,
         std::optional<nb::ndarray<>> leftpad, std::optional<nb::ndarray<>> cache_batch_idx,
         std::optional<nb::ndarray<>> block_table, std::optional<double> softmax_scale,
         bool causal, int64_t window_left, int64_t window_right, double softcap,
         int64_t num_splits, nb::ndarray<> out, std::optional<nb::ndarray<>> lse,
         bool check_values, uintptr_t stream) {
        attention::KvCache cache;
        cache.k = as_view(k_cache);
        cache.v = as_view(v_cache);
        cache.seqlen_k = as_view(seqlen_k);
        cache.leftpad = as_view(leftpad);
        cache.cache_batch_idx = as_view(cache_batch_idx);
        cache.block_table = as_view(block_table);
        attention::forward_kvcache(
            as_view(q), cache, params_of(softmax_scale, causal, window_left, window_right, softcap),
            num_splits, as_view(out), as_view(lse), check_values, as_stream(stream));
      },
      nb::arg("q"), nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("seqlen_k"),
      nb::arg("leftpad").none(), nb::arg("cache_batch_idx").none(), nb::arg("block_table").none(),
      nb::arg("softmax_scale").none(), nb::arg("causal"), nb::arg("window_left"),
      nb::arg("window_right"), nb::arg("softcap"), nb::arg("num_splits"), nb::arg("out"),
      nb::arg("lse").none(), nb::arg("check_values") = true, nb::arg("stream") = 0);

  m.def(
      "decode_num_splits",
      [](int64_t batch, int64_t heads_kv, int64_t query_rows, int64_t max_keys, int64_t head_dim,
         int device) {
        return attention::decode_num_splits(batch, heads_kv, query_rows, max_keys, head_dim, device);
      },
      nb::arg("batch"), nb::arg("heads_kv"), nb::arg("query_rows"), nb::arg("max_keys"),
      nb::arg("head_dim"), nb::arg("device"));

  m.def(
      "flash_attn_backward",
      [](nb::ndarray<> dout, nb::ndarray<> q, nb::ndarray<> k, nb::ndarray<> v, nb::ndarray<> out,
         nb::ndarray<> lse, std::optional<nb::ndarray<>> dlse, std::optional<double> softmax_scale,
         bool causal, int64_t window_left, int64_t window_right, double softcap, bool deterministic,
         nb::ndarray<> dq, nb::ndarray<> dk, nb::ndarray<> dv, uintptr_t stream) {
        attention::backward(
            as_view(dout), as_view(q), as_view(k), as_view(v), as_view(out), as_view(lse),
            as_view(dlse), params_of(softmax_scale, causal, window_left, window_right, softcap),
            as_view(dq), as_view(dk), as_view(dv), deterministic, as_stream(stream));
      },
      nb::arg("dout"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse"),
      nb::arg("dlse").none(), nb::arg("softmax_scale").none(), nb::arg("causal"),
      nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"), nb::arg("deterministic"),
      nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("stream") = 0);

  m.def(
      "flash_attn_varlen_backward",
      [](nb::ndarray<> dout, nb::ndarray<> q, nb::ndarray<> k, nb::ndarray<> v, nb::ndarray<> out,
         nb::ndarray<> lse, std::optional<nb::ndarray<>> dlse, nb::ndarray<> cu_seqlens_q,
         nb::ndarray<> cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
         std::optional<double> softmax_scale, bool causal, int64_t window_left,
         int64_t window_right, double softcap, bool deterministic, nb::ndarray<> dq,
         nb::ndarray<> dk, nb::ndarray<> dv, uintptr_t stream) {
        attention::backward_varlen(
            as_view(dout), as_view(q), as_view(k), as_view(v), as_view(out), as_view(lse),
            as_view(dlse), as_view(cu_seqlens_q), as_view(cu_seqlens_k), max_seqlen_q, max_seqlen_k,
            params_of(softmax_scale, causal, window_left, window_right, softcap), as_view(dq),
            as_view(dk), as_view(dv), deterministic, as_stream(stream));
      },
      nb::arg("dout"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse"),
      nb::arg("dlse").none(), nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"),
      nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"), nb::arg("softmax_scale").none(),
      nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"),
      nb::arg("deterministic"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("stream") = 0);

  // Private hooks for tilegrid.flash_attn, tests and benchmarks: the head dims whose kernels
  // run on a device, the Hopper forward's variant (sm90_switches as in attention.h) and which
  // kernel ran the latest call of this thread. Which path runs is the kernel choice's
  // (_set_kernel_choice).
  m.def(
      "_attention_kernel_head_dims",
      [](const std::string& device_type, int device_index) {
        return attention::kernel_head_dims(device_type == "cuda" ? Device::cuda(device_index)
                                                                 : Device::cpu());
      },
      nb::arg("device_type"), nb::arg("device_index") = 0);
  m.def("_attention_set_sm90_switches", &attention::set_sm90_switches, nb::arg("sm90_switches"));
  m.def("_attention_last_kernel", [] { return std::string(attention::last_cuda_kernel()); });
}

}  // namespace tilegrid::python
