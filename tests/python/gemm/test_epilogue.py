import math

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from conftest import HAS_CUDA, poison_, requires_cuda

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


def test_bias_then_rope_on_qkv_output():
    """per_column(add) > rope: the bias (Qwen2's q/k/v biases) added before the rotation."""
    hq, hkv, d, m = 4, 2, 16, 29
    n = (hq + 2 * hkv) * d
    a, b, ref = product(m, n, 24)
    bias = torch.randn(n, dtype=torch.bfloat16)
    positions = torch.arange(m) * 5 + 2
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = torch.cat([inv.repeat(hq + hkv), torch.zeros(hkv * d // 2, dtype=torch.float64)])
    out = empty(m, n)
    prog = tg.epilogue.Program().per_column(bias, "add").rope(positions, freqs.float()).store(out)
    assert prog.signature() == "per_column(add, bfloat16) > rope > store(float32)"
    tg.epilogue.matmul(a, b, prog)
    biased = ref + bias.double()
    angle = positions.double()[:, None] * freqs.float().double()[None, :]
    rotated = torch.view_as_real(torch.view_as_complex(biased.reshape(m, n // 2, 2).contiguous())
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
    def test_cuda_tensors_without_a_fused_kernel(self):
        """A program outside the compiled set is an error (no unfused fallback); on a Hopper
        GPU it lists the compiled programs, elsewhere it names the compute capability."""
        a = torch.randn(4, 8, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8, 8, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(4, 8, device="cuda")
        with pytest.raises((RuntimeError, ValueError),
                           match="no fused CUDA kernel for the program|compute capability 9.0"):
            tg.epilogue.matmul(a, b, tg.epilogue.Program().store(out))


@requires_cuda
@pytest.mark.gpu
def test_finish_row_partials_on_the_gpu():
    partials = torch.randn(300, 7)
    for op in ["sum", "max", "logsumexp"]:
        torch.testing.assert_close(tg.epilogue.finish_row_partials(op, partials.cuda()).cpu(),
                                   tg.epilogue.finish_row_partials(op, partials), rtol=1e-6,
                                   atol=1e-6)


# Fused sm_90a programs against the CPU evaluator (the same program on CPU copies). bf16
# outputs: both sides round once to bf16, from float32 (GPU, its own summation order) and
# float64 (CPU), so they differ by at most about one bf16 ulp: rtol 2^-7, plus an atol for
# values near 0 of 1e-2 (products of K >= 64 unit normals are O(10)). Float32 partial sums of
# squares: float32 accumulation over K and 256 columns, rtol 1e-4.
HOPPER = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER, reason="needs a compute capability 9.0 GPU")
BF16 = dict(rtol=2**-7, atol=1e-2)
SHAPES = [(200, 512, 64), (1000, 776, 136), (37, 264, 72), (1, 256, 8), (1100, 512, 256)]
# Every fused program is compiled for bfloat16 and float16 a and b, its T operands and stores
# in the same type; float16's 10-bit mantissa keeps the results well inside BF16's bounds.
NAME = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


@pytest.fixture(params=[torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def dt(request):
    return request.param


def cuda_product(m, n, k, dt=torch.bfloat16):
    x = torch.randn(m, k, dtype=dt, device="cuda")
    w = torch.randn(n, k, dtype=dt, device="cuda")
    return x, w.t()


def run_both(a, b, build, outputs):
    """Runs build(*outputs) on the GPU and build(*cpu copies) on the CPU evaluator, all outputs
    poisoned first; returns (gpu outputs, cpu outputs)."""
    gpu = [poison_(o) for o in outputs]
    cpu = [poison_(o.cpu()) for o in outputs]
    tg.epilogue.matmul(a, b, build(*gpu))
    torch.cuda.synchronize()
    ops = [(t.cpu() if isinstance(t, torch.Tensor) else t) for t in build.operands]
    tg.epilogue.matmul(a.cpu(), b.cpu(), build(*cpu, cpu_operands=ops))
    return [o.cpu() for o in gpu], cpu


class Builder:
    """A program as a function of its outputs, with its input operands kept so that the CPU
    run reads copies of the same values."""

    def __init__(self, fn, *operands):
        self.fn, self.operands = fn, operands

    def __call__(self, *outs, cpu_operands=None):
        return self.fn(*(cpu_operands or self.operands), *outs)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fused_bias_gelu_aux(m, n, k, dt):
    a, b = cuda_product(m, n, k, dt)
    bias = torch.randn(n, dtype=dt, device="cuda")
    build = Builder(lambda bias, pre, out: tg.epilogue.Program().per_column(bias).store(pre)
                    .elementwise("gelu_tanh").store(out), bias)
    outs = [torch.empty(m, n, dtype=dt, device="cuda") for _ in range(2)]
    t = NAME[dt]
    assert build(*outs).signature() == (f"per_column(add, {t}) > store({t}) > "
                                        f"elementwise(gelu_tanh) > store({t})")
    gpu, cpu = run_both(a, b, build, outs)
    for g, c in zip(gpu, cpu):
        torch.testing.assert_close(g.float(), c.float(), **BF16)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fused_row_scale(m, n, k, dt):
    a, b = cuda_product(m, n, k, dt)
    scale = torch.rand(m, device="cuda") + 0.5
    build = Builder(lambda scale, out: tg.epilogue.Program().per_row(scale).store(out), scale)
    gpu, cpu = run_both(a, b, build, [torch.empty(m, n, dtype=dt, device="cuda")])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fused_residual_sum_squares(m, n, k, dt):
    a, b = cuda_product(m, n, k, dt)
    residual = torch.randn(m, n, dtype=dt, device="cuda")
    count = math.ceil(n / 256)
    build = Builder(lambda r, out, partials: tg.epilogue.Program().tile(r).store(out)
                    .row_partials("sum_squares", partials, 256), residual)
    outs = [torch.empty(m, n, dtype=dt, device="cuda"),
            torch.empty(m, count, device="cuda")]
    gpu, cpu = run_both(a, b, build, outs)
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    torch.testing.assert_close(gpu[1], cpu[1], rtol=1e-4, atol=1e-3)
    total = tg.epilogue.finish_row_partials("sum_squares", outs[1])
    torch.testing.assert_close(total.cpu(), cpu[1].double().sum(1).float(), rtol=1e-4, atol=1e-3)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("position_dtype", [torch.int32, torch.int64, torch.float32])
@pytest.mark.parametrize("inverse", [False, True])
def test_fused_rope(m, n, k, position_dtype, inverse, dt):
    """RoPE frequencies of head dim 8 on the first two thirds of the columns (q and k), 0 on
    the last third (v); positions up to 2047, so angles up to 2047 radians (float32 angle
    error ~1e-4 rad, well inside the bf16 tolerance)."""
    a, b = cuda_product(m, n, k, dt)
    positions = torch.randint(0, 2048, (m,), device="cuda").to(position_dtype)
    inv = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    pairs = n // 2
    freqs = inv.repeat(pairs // 4 + 1)[:pairs].clone()
    freqs[2 * pairs // 3:] = 0
    freqs = freqs.cuda()
    build = Builder(lambda pos, f, out: tg.epilogue.Program().rope(pos, f, inverse=inverse)
                    .store(out), positions, freqs)
    out = torch.empty(m, n, dtype=dt, device="cuda")
    assert build(out).signature() == ("rope(inverse)" if inverse else "rope") + \
        f" > store({NAME[dt]})"
    gpu, cpu = run_both(a, b, build, [out])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    # Pairs with frequency 0 are the plain product, rounded once.
    v = slice(2 * (2 * pairs // 3), n)
    torch.testing.assert_close(gpu[0][:, v].float(), (a @ b)[:, v].float().cpu(), **BF16)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fused_bias_rope(m, n, k, dt):
    """per_column(add, T) > rope > store(T), the Hopper program against the CPU evaluator."""
    a, b = cuda_product(m, n, k, dt)
    bias = torch.randn(n, dtype=dt, device="cuda")
    positions = torch.randint(0, 2048, (m,), device="cuda")
    inv = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    pairs = n // 2
    freqs = inv.repeat(pairs // 4 + 1)[:pairs].clone()
    freqs[2 * pairs // 3:] = 0
    freqs = freqs.cuda()
    build = Builder(lambda bias, pos, f, out: tg.epilogue.Program().per_column(bias, "add")
                    .rope(pos, f).store(out), bias, positions, freqs)
    out = torch.empty(m, n, dtype=dt, device="cuda")
    assert build(out).signature() == f"per_column(add, {NAME[dt]}) > rope > store({NAME[dt]})"
    gpu, cpu = run_both(a, b, build, [out])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("store_first", [True, False])
def test_fused_store_column_sum(m, n, k, store_first, dt):
    """The product and its float32 sums over M (across M tiles: the finishing kernel).
    Sums of up to 1100 values of size ~sqrt(K) <= 16 in float32: error ~1e-3."""
    a, b = cuda_product(m, n, k, dt)

    def program(out, sums):
        p = tg.epilogue.Program()
        return p.store(out).column_sum(sums) if store_first else p.column_sum(sums).store(out)

    build = Builder(program)
    outs = [torch.empty(m, n, dtype=dt, device="cuda"),
            torch.empty(n, device="cuda")]
    t = NAME[dt]
    assert build(*outs).signature() == (f"store({t}) > column_sum" if store_first
                                        else f"column_sum > store({t})")
    gpu, cpu = run_both(a, b, build, outs)
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    torch.testing.assert_close(gpu[1], cpu[1], rtol=1e-4, atol=1e-2)
    # Again: the final reduction's tile counters start from zero on every call, and the sums
    # come out the same bits (the M tiles are added in a fixed order).
    again = poison_(torch.empty(n, device="cuda"))
    tg.epilogue.matmul(a, b, build(torch.empty(m, n, dtype=dt, device="cuda"), again))
    assert torch.equal(again.cpu(), gpu[1])


@requires_hopper
@pytest.mark.gpu
def test_fused_column_sum_of_no_rows_is_zero(dt):
    a, b = cuda_product(0, 64, 64, dt)
    sums = poison_(torch.empty(64, device="cuda"))
    tg.epilogue.matmul(a, b, tg.epilogue.Program().store(
        torch.empty(0, 64, dtype=dt, device="cuda")).column_sum(sums))
    assert torch.equal(sums.cpu(), torch.zeros(64))


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fused_residual_add(m, n, k, dt):
    """A residual connection added to the product: the sum rounded once."""
    a, b = cuda_product(m, n, k, dt)
    residual = torch.randn(m, n, dtype=dt, device="cuda")
    build = Builder(lambda r, out: tg.epilogue.Program().tile(r).store(out), residual)
    out = torch.empty(m, n, dtype=dt, device="cuda")
    assert build(out).signature() == f"tile(add, {NAME[dt]}) > store({NAME[dt]})"
    gpu, cpu = run_both(a, b, build, [out])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)


@requires_hopper
@pytest.mark.gpu
def test_fused_residual_with_strided_output(dt):
    """Outputs and the residual may have a row stride above N (a multiple of 8)."""
    m, n, k = 300, 512, 64
    a, b = cuda_product(m, n, k, dt)
    residual = torch.randn(m, n + 64, dtype=dt, device="cuda")[:, :n]
    out_wide = torch.empty(m, n + 128, dtype=dt, device="cuda")
    build = Builder(lambda r, out, partials: tg.epilogue.Program().tile(r).store(out)
                    .row_partials("sum_squares", partials, 256), residual)
    gpu, cpu = run_both(a, b, build, [out_wide[:, :n], torch.empty(m, 2, device="cuda")])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    torch.testing.assert_close(gpu[1], cpu[1], rtol=1e-4, atol=1e-3)


# N a multiple of 16 (the halved output's rows a multiple of 8 elements).
GLU_SHAPES = [(200, 512, 64), (1000, 784, 136), (37, 272, 72), (1, 256, 8), (1100, 512, 256)]


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", GLU_SHAPES)
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("save_pre", [False, True])
def test_fused_glu(m, n, k, act, save_pre, dt):
    """SwiGLU / GeGLU on an interleaved gate+up product, written at half the width, with or
    without the [M, N] pre-activation saved."""
    a, b = cuda_product(m, n, k, dt)

    def program(*outs):
        p = tg.epilogue.Program()
        if save_pre:
            p = p.store(outs[0])
        return p.glu(act).store(outs[-1])

    build = Builder(program)
    outs = [torch.empty(m, n // 2, dtype=dt, device="cuda")]
    if save_pre:
        outs.insert(0, torch.empty(m, n, dtype=dt, device="cuda"))
    t = NAME[dt]
    assert build(*outs).signature() == (
        (f"store({t}) > " if save_pre else "") + f"glu({act}) > store({t})")
    gpu, cpu = run_both(a, b, build, outs)
    for g, c in zip(gpu, cpu):
        torch.testing.assert_close(g.float(), c.float(), **BF16)
    # Against torch directly: act(g) * u of the float32 product.
    y = (a.float() @ b.float())
    g, u = y[:, 0::2], y[:, 1::2]
    fn = torch.nn.functional.silu if act == "silu" else (
        lambda x: torch.nn.functional.gelu(x, approximate="tanh"))
    torch.testing.assert_close(gpu[-1].float(), (fn(g) * u).cpu(), **BF16)


@requires_hopper
@pytest.mark.gpu
def test_fused_glu_with_strided_outputs(dt):
    """The halved output and the pre-activation may have row strides above their widths."""
    m, n, k = 300, 512, 64
    a, b = cuda_product(m, n, k, dt)
    out_wide = torch.full((m, n // 2 + 64), 7.0, dtype=dt, device="cuda")
    pre_wide = torch.full((m, n + 128), 7.0, dtype=dt, device="cuda")
    build = Builder(lambda pre, out: tg.epilogue.Program().store(pre).glu("silu").store(out))
    gpu, cpu = run_both(a, b, build, [pre_wide[:, :n], out_wide[:, :n // 2]])
    for g, c in zip(gpu, cpu):
        torch.testing.assert_close(g.float(), c.float(), **BF16)
    # The columns past each view are not written.
    assert bool((out_wide[:, n // 2:] == 7).all()) and bool((pre_wide[:, n:] == 7).all())


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("combine,value", [("multiply", 0.37), ("add", -2.5)])
def test_fused_scalar(m, n, k, combine, value, dt):
    a, b = cuda_product(m, n, k, dt)
    build = Builder(lambda out: tg.epilogue.Program().scalar(value, combine).store(out))
    out = torch.empty(m, n, dtype=dt, device="cuda")
    assert build(out).signature() == f"scalar({combine}) > store({NAME[dt]})"
    gpu, cpu = run_both(a, b, build, [out])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)


# Row partials of float32 values (float32 products of K <= 256 terms): against the float64
# CPU evaluator, rtol 1e-4 with an atol for sums near 0; max and log-sum-exp are within
# float32 rounding of the products (logsumexp adds the SFU's ~1e-7 relative error).
PARTIALS_TOL = {"sum": dict(rtol=1e-4, atol=1e-2), "max": dict(rtol=1e-5, atol=1e-4),
                "logsumexp": dict(rtol=1e-5, atol=1e-4)}
FINISH = {"sum": lambda y: y.sum(1), "max": lambda y: y.amax(1),
          "logsumexp": lambda y: torch.logsumexp(y, 1)}


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("op", ["sum", "max", "logsumexp"])
@pytest.mark.parametrize("store_first", [True, False])
def test_fused_store_row_partials(m, n, k, op, store_first, dt):
    """The product and its per-256-column row partials; finished, they are torch's reduction
    of the float64 product."""
    a, b = cuda_product(m, n, k, dt)

    def program(out, partials):
        p = tg.epilogue.Program()
        return (p.store(out).row_partials(op, partials, 256) if store_first
                else p.row_partials(op, partials, 256).store(out))

    build = Builder(program)
    outs = [torch.empty(m, n, dtype=dt, device="cuda"),
            torch.empty(m, math.ceil(n / 256), device="cuda")]
    t = NAME[dt]
    assert build(*outs).signature() == (f"store({t}) > " if store_first else "") + \
        f"row_partials({op}, 256)" + ("" if store_first else f" > store({t})")
    gpu, cpu = run_both(a, b, build, outs)
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    torch.testing.assert_close(gpu[1], cpu[1], **PARTIALS_TOL[op])
    finished = tg.epilogue.finish_row_partials(op, outs[1]).cpu().double()
    want = FINISH[op](a.cpu().double() @ b.cpu().double())
    torch.testing.assert_close(finished, want, **PARTIALS_TOL[op])


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("op", ["max", "logsumexp"])
def test_fused_row_partials_skip_columns_past_n(op, dt):
    """A negative product with a last N tile of 8 columns: were the tile's 248 columns past N
    (zeros in the accumulator) reduced, its max would be 0 and its log-sum-exp >= log 248."""
    m, n, k = 300, 264, 64
    x = torch.randn(m, k, device="cuda").abs().to(dt)
    w = -torch.randn(n, k, device="cuda").abs().to(dt)
    partials = poison_(torch.empty(m, 2, device="cuda"))
    out = torch.empty(m, n, dtype=dt, device="cuda")
    tg.epilogue.matmul(x, w.t(), tg.epilogue.Program().store(out).row_partials(op, partials))
    y = x.double() @ w.t().double()
    want = torch.stack([FINISH[op](y[:, :256]), FINISH[op](y[:, 256:])], 1)
    torch.testing.assert_close(partials.double(), want, **PARTIALS_TOL[op])


def dgrad_product(m, n, k, dt):
    """dt operands in the data-gradient layout: dy [M, K] and w [K, N], both row-major."""
    dy = torch.randn(m, k, dtype=dt, device="cuda")
    w = torch.randn(k, n, dtype=dt, device="cuda") / 4
    return dy, w


def torch_act(act):
    return F.silu if act == "silu" else (lambda x: F.gelu(x, approximate="tanh"))


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_fused_glu_grad(m, n, k, act, dt):
    """The backward of SwiGLU / GeGLU on the down projection's data gradient dh = dy w: with
    the saved pre-activation pairs (g, u) [M, 2N], the interleaved (dg, du) [M, 2N]."""
    dy, w = dgrad_product(m, n, k, dt)
    pre = torch.randn(m, 2 * n, dtype=dt, device="cuda") * 2
    build = Builder(lambda pre, out: tg.epilogue.Program().glu_grad(pre, act).store(out), pre)
    out = torch.empty(m, 2 * n, dtype=dt, device="cuda")
    assert build(out).signature() == f"glu_grad({act}, {NAME[dt]}) > store({NAME[dt]})"
    gpu, cpu = run_both(dy, w, build, [out])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    # Against torch's autograd of act(g) * u, in float64.
    gu = pre.cpu().double().requires_grad_()
    h = torch_act(act)(gu[:, 0::2]) * gu[:, 1::2]
    h.backward(dy.cpu().double() @ w.cpu().double())
    torch.testing.assert_close(gpu[0].double(), gu.grad, **BF16)


@requires_hopper
@pytest.mark.gpu
def test_fused_glu_grad_with_strided_operands(dt):
    """The saved pairs and the output may have row strides above 2N; the columns past the
    output view are not written."""
    m, n, k = 300, 256, 64
    dy, w = dgrad_product(m, n, k, dt)
    pre = torch.randn(m, 2 * n + 64, dtype=dt, device="cuda")[:, :2 * n]
    out_wide = torch.full((m, 2 * n + 128), 7.0, dtype=dt, device="cuda")
    build = Builder(lambda pre, out: tg.epilogue.Program().glu_grad(pre, "silu").store(out), pre)
    gpu, cpu = run_both(dy, w, build, [out_wide[:, :2 * n]])
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    assert bool((out_wide[:, 2 * n:] == 7).all())


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("store_first", [True, False])
def test_fused_gelu_grad_column_sum(m, n, k, store_first, dt):
    """The backward of bias + GELU on the next layer's data gradient: d(pre) = (dy w) *
    gelu'(pre), stored, and its sums over M (the bias gradient)."""
    dy, w = dgrad_product(m, n, k, dt)
    pre = torch.randn(m, n, dtype=dt, device="cuda") * 2

    def program(pre, out, sums):
        p = tg.epilogue.Program().elementwise_grad("gelu_tanh", pre)
        return p.store(out).column_sum(sums) if store_first else p.column_sum(sums).store(out)

    build = Builder(program, pre)
    outs = [torch.empty(m, n, dtype=dt, device="cuda"), torch.empty(n, device="cuda")]
    gpu, cpu = run_both(dy, w, build, outs)
    torch.testing.assert_close(gpu[0].float(), cpu[0].float(), **BF16)
    torch.testing.assert_close(gpu[1], cpu[1], rtol=1e-4, atol=1e-2)
    # Against torch's autograd of gelu(pre + bias) in float64.
    x = pre.cpu().double().requires_grad_()
    bias = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    F.gelu(x + bias, approximate="tanh").backward(dy.cpu().double() @ w.cpu().double())
    torch.testing.assert_close(gpu[0].double(), x.grad, **BF16)
    torch.testing.assert_close(gpu[1].double(), bias.grad, rtol=1e-4, atol=1e-2)


@requires_hopper
@pytest.mark.gpu
class TestFusedConstraints:
    def test_unknown_program_lists_the_compiled_ones(self):
        a, b = cuda_product(64, 64, 64)
        out = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match=r"(?s)no fused CUDA kernel.*per_row\(multiply, "
                                             r"float32\) > store\(T\).*T: a and b's dtype"):
            tg.epilogue.matmul(a, b, tg.epilogue.Program().elementwise("relu").store(out))

    def test_data_gradient_layout(self):
        a = torch.randn(64, 64, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(64, 64, dtype=torch.bfloat16, device="cuda")  # row-major [K, N]
        out = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
        prog = tg.epilogue.Program().per_row(torch.ones(64, device="cuda")).store(out)
        with pytest.raises(ValueError, match="forward layout"):
            tg.epilogue.matmul(a, b, prog)

    def test_backward_programs_need_the_data_gradient_layout(self):
        a, b = cuda_product(64, 64, 64)
        pre = torch.randn(64, 128, dtype=torch.bfloat16, device="cuda")
        out = torch.empty(64, 128, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match="glu_grad.* data-gradient layout .*got a and b in "
                                             "the forward layout"):
            tg.epilogue.matmul(a, b, tg.epilogue.Program().glu_grad(pre, "silu").store(out))

    def test_n_multiple_of_8(self):
        a, b = cuda_product(64, 36, 64)
        out = torch.empty(64, 36, dtype=torch.bfloat16, device="cuda")
        prog = tg.epilogue.Program().per_row(torch.ones(64, device="cuda")).store(out)
        with pytest.raises(ValueError, match="N to be a multiple of 8"):
            tg.epilogue.matmul(a, b, prog)

    def test_glu_needs_n_multiple_of_16(self):
        a, b = cuda_product(64, 264, 64)
        out = torch.empty(64, 136, dtype=torch.bfloat16, device="cuda")[:, :132]
        with pytest.raises(ValueError, match="multiple of 16"):
            tg.epilogue.matmul(a, b, tg.epilogue.Program().glu("silu").store(out))

    def test_row_partials_tile_must_be_the_kernel_tile(self):
        a, b = cuda_product(64, 512, 64)
        r = torch.randn(64, 512, dtype=torch.bfloat16, device="cuda")
        out = torch.empty(64, 512, dtype=torch.bfloat16, device="cuda")
        prog = (tg.epilogue.Program().tile(r).store(out)
                .row_partials("sum_squares", torch.empty(64, 4, device="cuda"), 128))
        with pytest.raises(ValueError, match="no fused CUDA kernel"):
            tg.epilogue.matmul(a, b, prog)

    def test_float32_operands(self):
        a = torch.randn(64, 64, device="cuda")
        out = torch.empty(64, 64, device="cuda")
        prog = tg.epilogue.Program().per_row(torch.ones(64, device="cuda")).store(out)
        with pytest.raises(TypeError, match="a must be bfloat16 or float16, got float32"):
            tg.epilogue.matmul(a, a.t(), prog)

    def test_store_in_another_dtype(self):
        """Stores are in a and b's dtype: a float16 product stored as bfloat16 has no kernel."""
        a, b = cuda_product(64, 64, 64, torch.float16)
        out = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
        prog = tg.epilogue.Program().per_row(torch.ones(64, device="cuda")).store(out)
        with pytest.raises(ValueError, match=r"no fused CUDA kernel.*on float16 a and b "
                                             r"\(per_row\(multiply, float32\) > store\(bfloat16\)\)"):
            tg.epilogue.matmul(a, b, prog)
