import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from tilegrid import _C

from attention_reference import reference
from conftest import poison_, requires_cuda

HEAD_DIMS = [64, 96, 128, 192, 256]
# Output tolerance (max abs error, unit-scale inputs): the output rounded once to its type.
ATOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def check(out, lse, ref_out, ref_lse, dtype):
    assert not out.isnan().any() and not lse.isnan().any()
    assert (out.double() - ref_out).abs().max().item() <= ATOL[dtype]
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    if finite.any():
        assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= 1e-4


@pytest.mark.parametrize("seqlen", [1, 17, 113, 128, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_reference_on_odd_seqlens(seqlen, causal):
    q = torch.randn(2, seqlen, 2, 64)
    k, v = torch.randn(2, seqlen, 2, 64), torch.randn(2, seqlen, 2, 64)
    out, lse = tg.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    for b in range(2):
        ro, rl = reference(q[b], k[b], v[b], causal=causal)
        check(out[b], lse[b], ro, rl, torch.float32)


def test_long_sequence_2049():
    q, k, v = (torch.randn(1, 2049, 1, 64) for _ in range(3))
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    ro, rl = reference(q[0], k[0], v[0], causal=True)
    check(out[0], lse[0], ro, rl, torch.float32)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_head_dim_and_dtype(head_dim, dtype):
    q = torch.randn(1, 33, 4, head_dim).to(dtype)
    k, v = torch.randn(1, 50, 4, head_dim).to(dtype), torch.randn(1, 50, 4, head_dim).to(dtype)
    out, lse = tg.flash_attn_func(q, k, v, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    ro, rl = reference(q[0], k[0], v[0])
    check(out[0], lse[0], ro, rl, dtype)


@pytest.mark.parametrize("sq,sk", [(17, 113), (113, 17), (5, 5)])
@pytest.mark.parametrize("window", [(-1, -1), (8, 0), (4, 4), (0, 0), (-1, 3)])
def test_causal_and_windows_align_bottom_right(sq, sk, window):
    q, k, v = torch.randn(1, sq, 2, 64), torch.randn(1, sk, 2, 64), torch.randn(1, sk, 2, 64)
    for causal in (False, True):
        out, lse = tg.flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)
        ro, rl = reference(q[0], k[0], v[0], causal=causal, window=window)
        check(out[0], lse[0], ro, rl, torch.float32)


def test_fully_masked_rows_give_zero_and_minus_infinity():
    # sq > sk with causal: the first sq - sk queries see no key.
    q, k, v = torch.randn(1, 10, 2, 64), torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64)
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.equal(out[0, :6], torch.zeros(6, 2, 64))
    assert torch.isneginf(lse[0, :, :6]).all() and torch.isfinite(lse[0, :, 6:]).all()


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1), (4, 4)])
def test_gqa_and_mqa(hq, hk):
    q, k, v = torch.randn(2, 40, hq, 128), torch.randn(2, 40, hk, 128), torch.randn(2, 40, hk, 128)
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    for b in range(2):
        ro, rl = reference(q[b], k[b], v[b], causal=True)
        check(out[b], lse[b], ro, rl, torch.float32)


def test_softcap_and_custom_scale():
    q, k, v = (torch.randn(1, 30, 2, 64) * 3 for _ in range(3))
    out, lse = tg.flash_attn_func(q, k, v, softmax_scale=0.3, softcap=5.0, return_lse=True)
    ro, rl = reference(q[0], k[0], v[0], scale=0.3, softcap=5.0)
    check(out[0], lse[0], ro, rl, torch.float32)


def test_matches_torch_sdpa_math_backend():
    q, k, v = (torch.randn(2, 4, 77, 64) for _ in range(3))  # SDPA layout (b, h, s, d)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = tg.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    torch.testing.assert_close(out.transpose(1, 2), ref, atol=2e-5, rtol=1e-4)


def test_varlen_with_mixed_and_zero_lengths():
    lens_q, lens_k = [5, 0, 17, 1, 0], [9, 3, 17, 0, 0]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(lens_q), 4, 64)
    k, v = torch.randn(sum(lens_k), 2, 64), torch.randn(sum(lens_k), 2, 64)
    for causal in (False, True):
        out, lse = tg.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True
        )
        assert lse.shape == (4, sum(lens_q))
        for b in range(len(lens_q)):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            if lens_q[b] == 0:
                continue
            ro, rl = reference(q[qs], k[ks], v[ks], causal=causal)
            check(out[qs], lse[:, qs], ro, rl, torch.float32)


def test_torch_compile_traces_the_op():
    q, k, v = (torch.randn(1, 16, 2, 64) for _ in range(3))
    f = torch.compile(lambda q, k, v: tg.flash_attn_func(q, k, v, causal=True) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(f(q, k, v), 2 * tg.flash_attn_func(q, k, v, causal=True))
    torch.library.opcheck(torch.ops.tilegrid.flash_attn_forward.default, (q, k, v, 0.0, True, -1, -1, 0.0, False))


def forward_binding(q, k, v):
    """The C++ entry point itself, without the Python layer's padding and copies."""
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device)
    _C.flash_attn_forward(q, k, v, None, False, -1, -1, 0.0, out, lse,
                          torch.cuda.current_stream().cuda_stream if q.is_cuda else 0)


class TestBadInputs:
    def test_unsupported_head_dim(self):
        # The kernels' head dims; flash_attn_func pads others (test_flash_attn_backward.py).
        q = torch.randn(1, 4, 2, 80)
        with pytest.raises(ValueError, match="head dimension must be 64, 96, 128, 192 or 256, got 80"):
            forward_binding(q, q, q)

    def test_mismatched_heads(self):
        q, k = torch.randn(1, 4, 6, 64), torch.randn(1, 4, 4, 64)
        with pytest.raises(ValueError, match=r"heads of q \(6\) must be a multiple of heads of k and v \(4\)"):
            tg.flash_attn_func(q, k, k)

    def test_wrong_dtype(self):
        q = torch.randn(1, 4, 2, 64)
        with pytest.raises(TypeError, match="k must be float32, got float64"):
            tg.flash_attn_func(q, q.double(), q)

    def test_non_contiguous_head_dim(self):
        # The C++ entry point refuses it; flash_attn_func copies it, as FlashAttention does.
        q = torch.randn(1, 4, 64, 2).transpose(2, 3)
        with pytest.raises(ValueError, match="must have a contiguous last dimension"):
            forward_binding(q, q, q)

    def test_cu_seqlens_not_monotone(self):
        q = torch.randn(6, 2, 64)
        cu = torch.tensor([0, 4, 2, 6], dtype=torch.int32)
        with pytest.raises(ValueError, match="cu_seqlens_q must be non-decreasing"):
            tg.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)

    def test_window_size_shape(self):
        q = torch.randn(1, 4, 2, 64)
        with pytest.raises(ValueError, match="window_size must be a pair"):
            tg.flash_attn_func(q, q, q, window_size=3)


# ----------------------------------------------------------------------------------------------
# CUDA kernel. Inputs are drawn in float32, rounded to bf16/fp16, and the float64 reference runs
# on the rounded values. Output tolerances (max abs error, unit-normal inputs): the kernel rounds
# P to the input type before P V (relative 2^-9 for bf16, 2^-12 for fp16) and O once more when
# it stores it (half an ulp: 2^-9 / 2^-12 near 1), so bf16 2e-2 and fp16 3e-3. LSE comes from
# fp32 scores and fp32 exp2/log2: 2e-4.

GPU_DTYPES = [torch.bfloat16, torch.float16]
GPU_ATOL = {torch.bfloat16: 2e-2, torch.float16: 3e-3}
GPU_LSE_ATOL = 2e-4


def gpu_test(f):
    """Marks a CUDA test: reported as skipped, never passed, on a machine without a GPU."""
    return pytest.mark.gpu(requires_cuda(f))


def gpu_inputs(shape_q, shape_k, dtype, scale=1.0):
    q = (torch.randn(shape_q) * scale).to(dtype).cuda()
    k = (torch.randn(shape_k) * scale).to(dtype).cuda()
    v = torch.randn(shape_k).to(dtype).cuda()
    return q, k, v


def run_poisoned(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0):
    """The kernel through the bindings, into outputs poisoned with NaN."""
    out = poison_(torch.empty(q.shape, dtype=q.dtype, device=q.device))  # contiguous
    lse = poison_(torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device))
    _C.flash_attn_forward(q, k, v, scale, causal, window[0], window[1], softcap,
                          out, lse, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return out, lse


def run_varlen_poisoned(q, k, v, cu_q, cu_k, max_q, max_k, causal=False, window=(-1, -1)):
    out = poison_(torch.empty_like(q))
    lse = poison_(torch.empty(q.shape[1], q.shape[0], device=q.device))
    _C.flash_attn_varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, None, causal, window[0],
                                 window[1], 0.0, out, lse, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return out, lse


def check_gpu(out, lse, q, k, v, dtype, **kw):
    """Every sequence of a dense batch against the float64 reference."""
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert not out.isnan().any() and not lse.isnan().any()
    for b in range(q.shape[0]):
        ro, rl = reference(q[b].cpu(), k[b].cpu(), v[b].cpu(), **kw)
        err = (out[b].cpu().double() - ro).abs().max().item()
        assert err <= GPU_ATOL[dtype], f"max |out - ref| = {err}"
        finite = torch.isfinite(rl)
        assert torch.equal(torch.isfinite(lse[b].cpu()), finite)
        assert torch.isneginf(lse[b].cpu()[~finite]).all()
        assert torch.equal(out[b].cpu().transpose(0, 1)[~finite], torch.zeros_like(out[b].cpu().transpose(0, 1)[~finite]))
        if finite.any():
            lse_err = (lse[b].cpu().double()[finite] - rl[finite]).abs().max().item()
            assert lse_err <= GPU_LSE_ATOL, f"max |lse - ref| = {lse_err}"


@pytest.mark.parametrize("seqlen", [1, 17, 113, 128, 1000, 2049])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
@gpu_test
def test_gpu_matches_reference_on_odd_seqlens(seqlen, causal, dtype, head_dim):
    batch = 2 if seqlen <= 1000 else 1
    q, k, v = gpu_inputs((batch, seqlen, 2, head_dim), (batch, seqlen, 2, head_dim), dtype)
    out, lse = run_poisoned(q, k, v, causal=causal)
    check_gpu(out, lse, q, k, v, dtype, causal=causal)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("sq,sk", [(113, 1000), (1000, 113), (128, 128), (17, 2049)])
@pytest.mark.parametrize("causal", [False, True])
@gpu_test
def test_gpu_every_head_dim_and_seqlen_pair(head_dim, dtype, sq, sk, causal):
    q, k, v = gpu_inputs((1, sq, 2, head_dim), (1, sk, 2, head_dim), dtype)
    out, lse = run_poisoned(q, k, v, causal=causal)
    check_gpu(out, lse, q, k, v, dtype, causal=causal)


@pytest.mark.parametrize("sq,sk", [(17, 113), (113, 17), (128, 128), (1000, 1000), (300, 2049)])
@pytest.mark.parametrize("window", [(8, 0), (4, 4), (0, 0), (-1, 3), (100, -1), (200, 50)])
@pytest.mark.parametrize("head_dim", [64, 256])
@gpu_test
def test_gpu_windows_align_bottom_right(sq, sk, window, head_dim):
    dtype = torch.bfloat16
    q, k, v = gpu_inputs((1, sq, 2, head_dim), (1, sk, 2, head_dim), dtype)
    for causal in (False, True):
        out, lse = run_poisoned(q, k, v, causal=causal, window=window)
        check_gpu(out, lse, q, k, v, dtype, causal=causal, window=window)


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@gpu_test
def test_gpu_fully_masked_rows_give_zero_and_minus_infinity(dtype):
    # sq > sk with causal: the first sq - sk queries see no key; a window (0, 0) past the
    # keys leaves rows empty inside a tile that also holds visible rows.
    q, k, v = gpu_inputs((1, 300, 2, 128), (1, 40, 2, 128), dtype)
    out, lse = run_poisoned(q, k, v, causal=True)
    assert torch.equal(out[0, :260].cpu(), torch.zeros(260, 2, 128, dtype=dtype))
    assert torch.isneginf(lse[0, :, :260]).all() and torch.isfinite(lse[0, :, 260:]).all()
    check_gpu(out, lse, q, k, v, dtype, causal=True)
    out, lse = run_poisoned(q, k, v, window=(0, 0))
    check_gpu(out, lse, q, k, v, dtype, window=(0, 0))


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1), (4, 4)])
@pytest.mark.parametrize("head_dim", [96, 192])
@gpu_test
def test_gpu_gqa_and_mqa(hq, hk, head_dim):
    dtype = torch.float16
    q, k, v = gpu_inputs((2, 200, hq, head_dim), (2, 333, hk, head_dim), dtype)
    for causal in (False, True):
        out, lse = run_poisoned(q, k, v, causal=causal)
        check_gpu(out, lse, q, k, v, dtype, causal=causal)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("dtype", GPU_DTYPES)
@gpu_test
def test_gpu_softcap_and_custom_scale(head_dim, dtype):
    q, k, v = gpu_inputs((1, 130, 2, head_dim), (1, 257, 2, head_dim), dtype, scale=3.0)
    for causal in (False, True):
        out, lse = run_poisoned(q, k, v, scale=0.3, causal=causal, softcap=5.0)
        check_gpu(out, lse, q, k, v, dtype, scale=0.3, causal=causal, softcap=5.0)


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@gpu_test
def test_gpu_varlen_with_mixed_and_zero_lengths(dtype, head_dim):
    lens_q, lens_k = [5, 0, 17, 1, 0, 1000, 129, 64], [9, 3, 17, 0, 0, 1000, 300, 2]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    q, k, v = gpu_inputs((sum(lens_q), 4, head_dim), (sum(lens_k), 2, head_dim), dtype)
    for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (16, 16))):
        out, lse = run_varlen_poisoned(q, k, v, cu_q.cuda(), cu_k.cuda(), max(lens_q) + 3,
                                       max(lens_k), causal=causal, window=window)
        assert not out.isnan().any() and not lse.isnan().any()
        for b in range(len(lens_q)):
            qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            if lens_q[b] == 0:
                continue
            check_gpu(out[qs][None], lse[:, qs][None], q[qs][None], k[ks][None], v[ks][None],
                      dtype, causal=causal, window=window)


@gpu_test
def test_gpu_strided_inputs():
    # q from a (b, h, s, d) tensor, k and v slices of one packed (b, s, 2, h, d) tensor.
    dtype = torch.bfloat16
    q = torch.randn(2, 4, 150, 128).to(dtype).cuda().transpose(1, 2)
    kv = torch.randn(2, 170, 2, 4, 128).to(dtype).cuda()
    k, v = kv[:, :, 0], kv[:, :, 1]
    assert not q.is_contiguous() and not k.is_contiguous()
    out, lse = run_poisoned(q, k, v, causal=True)
    check_gpu(out, lse, q, k, v, dtype, causal=True)


@pytest.mark.parametrize("dtype", GPU_DTYPES)
@gpu_test
def test_gpu_public_api_matches_torch_sdpa(dtype):
    q, k, v = gpu_inputs((2, 4, 777, 128), (2, 4, 777, 128), dtype)  # SDPA layout (b, h, s, d)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    out, lse = tg.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                  causal=True, return_lse=True)
    assert out.is_cuda and lse.shape == (2, 4, 777)
    assert (out.transpose(1, 2).float() - ref).abs().max().item() <= GPU_ATOL[dtype]


@gpu_test
def test_gpu_bad_inputs_get_clear_errors():
    q = torch.randn(1, 8, 2, 64, device="cuda")
    with pytest.raises(TypeError, match="on CUDA, q, k and v must be float16 or bfloat16"):
        tg.flash_attn_func(q, q, q)
    qb = torch.randn(1, 8, 2, 65, device="cuda", dtype=torch.bfloat16)[..., :64]
    with pytest.raises(ValueError, match="multiples of 8 elements"):
        forward_binding(qb, qb, qb)  # flash_attn_func copies it instead, as FA does
    torch.testing.assert_close(tg.flash_attn_func(qb, qb, qb), tg.flash_attn_func(*(qb.contiguous(),) * 3))
    qv = torch.randn(6, 2, 64, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        tg.flash_attn_varlen_func(qv, qv, qv, cu, cu.cuda(), 4, 4)
    bad = torch.tensor([0, 4, 2, 6], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="cu_seqlens_q must be non-decreasing"):
        tg.flash_attn_varlen_func(qv, qv, qv, bad, bad, 6, 6)
