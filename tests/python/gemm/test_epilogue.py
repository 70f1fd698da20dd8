import math

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from conftest import poison_, requires_cuda

# Float32 outputs of float64 math: one rounding.
F32 = dict(rtol=1e-6, atol=1e-6)


def product(m, n, k):
    """bfloat16 operands in the forward layout (x @ w.t()) and their float64 product."""
    x = torch.randn(m, k, dtype=torch.bfloat16)
    w = torch.randn(n, k, dtype=torch.bfloat16)
    return x, w.t(), x.double() @ w.t().double()


def empty(*shape, dtype=torch.float32):
    return poison_(torch.empty(*shape, dtype=dtype))


@pytest.mark.parametrize("m", [1, 37, 130])
def test_row_scale_swiglu_with_aux_store(m):
    a, b, ref = product(m, 96, 40)
    scale = torch.rand(m) + 0.5
    pre, h = empty(m, 96, dtype=torch.bfloat16), empty(m, 48)
    prog = tg.epilogue.Program().per_row(scale).store(pre).glu("silu").store(h)
    tg.epilogue.matmul(a, b, prog)
    want_pre = ref * scale.double()[:, None]
    torch.testing.assert_close(pre.double(), want_pre, rtol=2**-8, atol=0)
    want_h = F.silu(want_pre[:, 0::2]) * want_pre[:, 1::2]
    torch.testing.assert_close(h.double(), want_h, **F32)


def test_residual_and_partial_sum_of_squares():
    m, n, tile_n = 37, 200, 64
    a, b, ref = product(m, n, 24)
    residual = torch.randn(m, n, dtype=torch.bfloat16)
    out, partials = empty(m, n), empty(m, math.ceil(n / tile_n))
    prog = (tg.epilogue.Program().tile(residual).store(out)
            .row_partials("sum_squares", partials, tile_n))
    tg.epilogue.matmul(a, b, prog)
    want = ref + residual.double()
    torch.testing.assert_close(out.double(), want, **F32)
    total = tg.epilogue.finish_row_partials("sum_squares", partials)
    torch.testing.assert_close(total.double(), want.square().sum(1), rtol=2e-6, atol=1e-6)


def test_rope_on_qkv_output():
    """Interleaved RoPE on q and k heads of a fused QKV output; v (frequency 0) untouched."""
    hq, hkv, d, m = 4, 2, 16, 37
    n = (hq + 2 * hkv) * d
    a, b, ref = product(m, n, 24)
    positions = torch.arange(m) * 3 + 1
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = torch.cat([inv.repeat(hq + hkv), torch.zeros(hkv * d // 2, dtype=torch.float64)])
    out = empty(m, n)
    tg.epilogue.matmul(a, b, tg.epilogue.Program().rope(positions, freqs.float()).store(out))
    angle = positions.double()[:, None] * freqs.float().double()[None, :]
    rotated = torch.view_as_real(torch.view_as_complex(ref.reshape(m, n // 2, 2).contiguous())
                                 * torch.polar(torch.ones_like(angle), angle)).reshape(m, n)
    torch.testing.assert_close(out.double(), rotated, rtol=1e-6, atol=1e-5)


def test_gradients_match_autograd():
    m, w = 19, 16
    a, b, dy = product(m, w, 24)  # the incoming gradient
    gu = torch.randn(m, 2 * w, dtype=torch.float64)
    dgu = empty(m, 2 * w)
    tg.epilogue.matmul(a, b, tg.epilogue.Program().glu_grad(gu.float(), "gelu_tanh").store(dgu))
    g = gu.float().double().requires_grad_()
    (F.gelu(g[:, 0::2], approximate="tanh") * g[:, 1::2]).backward(dy)
    torch.testing.assert_close(dgu.double(), g.grad, **F32)


def test_column_sums_and_logsumexp():
    m, n = 37, 200
    a, b, ref = product(m, n, 24)
    cols, partials = empty(n), empty(m, 4)
    prog = tg.epilogue.Program().column_sum(cols).row_partials("logsumexp", partials, tile_n=64)
    tg.epilogue.matmul(a, b, prog)
    torch.testing.assert_close(cols.double(), ref.sum(0), rtol=1e-6, atol=1e-5)
    lse = tg.epilogue.finish_row_partials("logsumexp", partials)
    torch.testing.assert_close(lse.double(), ref.logsumexp(1), rtol=4e-6, atol=1e-6)


def test_signature():
    bias = torch.randn(8, dtype=torch.bfloat16)
    prog = tg.epilogue.Program().per_column(bias).glu().store(torch.empty(1, 4))
    assert prog.signature() == "per_column(add, bfloat16) > glu(silu) > store(float32)"


class TestBadPrograms:
    def test_width_after_glu(self):
        a, b, _ = product(4, 48, 8)
        prog = tg.epilogue.Program().glu().store(torch.empty(4, 48))
        with pytest.raises(ValueError, match=r"step 1 \(store\): out must have shape \[4, 24\]"):
            tg.epilogue.matmul(a, b, prog)

    def test_no_output(self):
        a, b, _ = product(4, 8, 8)
        with pytest.raises(ValueError, match="the program writes nothing"):
            tg.epilogue.matmul(a, b, tg.epilogue.Program().elementwise("relu"))

    def test_unknown_activation(self):
        a, b, _ = product(4, 8, 8)
        with pytest.raises(ValueError, match="the activation must be one of 'identity'"):
            prog = tg.epilogue.Program().elementwise("swish").store(torch.empty(4, 8))
            tg.epilogue.matmul(a, b, prog)

    @requires_cuda
    @pytest.mark.gpu
    def test_cuda_tensors_say_fused_kernels_are_missing(self):
        a = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8, 8, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4, 8, device="cuda")
        with pytest.raises(RuntimeError, match="no fused CUDA kernel for the program"):
            tg.epilogue.matmul(a, b, tg.epilogue.Program().store(out))


@requires_cuda
@pytest.mark.gpu
def test_finish_row_partials_on_the_gpu():
    partials = torch.randn(300, 7)
    for op in ["sum", "max", "logsumexp"]:
        torch.testing.assert_close(tg.epilogue.finish_row_partials(op, partials.cuda()).cpu(),
                                   tg.epilogue.finish_row_partials(op, partials), rtol=1e-6,
                                   atol=1e-6)
