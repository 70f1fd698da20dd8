import pytest
import torch

import tilegrid as tg
from tilegrid import _C
from conftest import DEVICES, HAS_CUDA, poison_, requires_cuda

DTYPES = [torch.bfloat16, torch.float16]
FORMS = ["fprop", "dgrad", "wgrad"]

# The unit roundoff of the output's storage type (bfloat16 has an 8-bit significand, float16
# 11 bits): the relative error of the one rounding of the result.
OUT_RTOL = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 0.0}
# float32 accumulation: the error stays below K * 2^-24 * sum_k |a_ik b_kj|; K <= 1040 here.
ACC_TOL = 2.0**-14


def is_hopper() -> bool:
    return HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)


# (device, kernel) pairs a test runs: the CPU takes "auto" only; on a GPU every kernel can be
# forced, the sm90 ones on a compute capability 9.0 GPU only.
CUDA_MARKS = [pytest.mark.gpu, requires_cuda]
HOPPER_ONLY = pytest.mark.skipif(not is_hopper(), reason="needs a compute capability 9.0 GPU")
TARGETS = [
    ("cpu", "auto"),
    pytest.param("cuda", "auto", marks=CUDA_MARKS),
    pytest.param("cuda", "portable", marks=CUDA_MARKS),
    pytest.param("cuda", "sm90_cooperative", marks=[*CUDA_MARKS, HOPPER_ONLY]),
    pytest.param("cuda", "sm90_pingpong", marks=[*CUDA_MARKS, HOPPER_ONLY]),
]


def operands(form, m, n, k, dtype, device):
    """a [M, K] and b [K, N] in the storage a linear layer has: fprop x @ w.t(), dgrad dy @ w,
    wgrad dy.t() @ x (transposed views where the layer has them)."""
    a = torch.randn(k, m, dtype=dtype, device=device).t() if form == "wgrad" else torch.randn(
        m, k, dtype=dtype, device=device)
    b = torch.randn(n, k, dtype=dtype, device=device).t() if form == "fprop" else torch.randn(
        k, n, dtype=dtype, device=device)
    return a, b


def assert_matches(got, a, b, what):
    """|got - want| <= OUT_RTOL * |want| + ACC_TOL * (|a| @ |b|) + half the output type's
    subnormal spacing, want in float64. The last term: a result below the smallest normal
    (float16: 6.1e-5, which a K = 1 product of two randn values reaches now and then) is
    rounded to a multiple of that spacing (float16: 6e-8), not to a relative precision."""
    assert not got.isnan().any(), f"{what}: NaN (an unwritten element?)"
    a64, b64 = a.double(), b.double()
    want = a64 @ b64
    info = torch.finfo(got.dtype)
    bound = (OUT_RTOL[got.dtype] * want.abs() + ACC_TOL * (a64.abs() @ b64.abs())
             + 0.5 * info.smallest_normal * info.eps)
    excess = ((got.double() - want).abs() - bound).max().item()
    assert excess <= 0, f"{what}: error exceeds the bound by {excess:.3g}"


def random_shapes(form, count=3):
    """M (rows of the output) free, including 1 and odd values past a 128-row tile; N and K
    multiples of 8 except the weight gradient's K (the token count), which is free."""
    shapes = [(1, 8, 8), (257, 136, 1040)] if form != "wgrad" else [(8, 8, 1), (264, 136, 1040)]
    for _ in range(count):
        m, n, k = (int(v) for v in torch.randint(1, 48, (3,)))
        if form == "wgrad":
            shapes.append((8 * m, 8 * n, int(torch.randint(1, 400, ()))))
        else:
            shapes.append((int(torch.randint(1, 400, ())), 8 * n, 8 * k))
    return shapes


@pytest.mark.parametrize("device,kernel", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", ["same", torch.float32])
@pytest.mark.parametrize("form", FORMS)
def test_matches_float64_reference(device, kernel, dtype, out_dtype, form):
    od = dtype if out_dtype == "same" else out_dtype
    for m, n, k in random_shapes(form):
        a, b = operands(form, m, n, k, dtype, device)
        out = poison_(torch.empty(m, n, dtype=od, device=device))
        _C.matmul(a, b, out, tg._torch.current_stream(a), kernel)
        assert_matches(out, a, b, f"{form} {kernel} M={m} N={n} K={k}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", FORMS)
def test_matmul_op_and_its_gradients(device, form):
    """tg.matmul against float64 torch, forward and both gradients; the gradients are
    products of the other layouts, each rounded once to bfloat16."""
    m, n, k = (37, 24, 40) if form != "wgrad" else (24, 40, 37)
    a, b = operands(form, m, n, k, torch.bfloat16, device)
    a.requires_grad_()
    b.requires_grad_()
    out = tg.matmul(a, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert_matches(out, a.detach(), b.detach(), "out")
    grad = torch.randn(m, n, dtype=torch.bfloat16, device=device)
    out.backward(grad)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    assert_matches(a.grad, grad, b.detach().t(), "da")
    assert_matches(b.grad, a.detach().t(), grad, "db")


@pytest.mark.parametrize("device", DEVICES)
def test_float32_output(device):
    a = torch.randn(33, 64, dtype=torch.float16, device=device)
    b = torch.randn(64, 16, dtype=torch.float16, device=device)
    out = tg.matmul(a, b, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    assert_matches(out, a, b, "float32 out")


@pytest.mark.parametrize("device", DEVICES)
def test_linear_over_leading_dims(device):
    x = torch.randn(2, 3, 5, 32, dtype=torch.bfloat16, device=device)
    w = torch.randn(16, 32, dtype=torch.bfloat16, device=device)
    y = tg.linear(x, w)
    assert y.shape == (2, 3, 5, 16)
    assert_matches(y.reshape(-1, 16), x.reshape(-1, 32), w.t(), "linear")


@pytest.mark.parametrize("device", DEVICES)
def test_empty_products(device):
    a = torch.empty(5, 0, dtype=torch.bfloat16, device=device)
    b = torch.empty(0, 8, dtype=torch.bfloat16, device=device)
    assert torch.equal(tg.matmul(a, b), torch.zeros(5, 8, dtype=torch.bfloat16, device=device))
    assert tg.matmul(torch.empty(0, 8, dtype=torch.bfloat16, device=device),
                     torch.randn(8, 8, dtype=torch.bfloat16, device=device)).shape == (0, 8)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("form", FORMS)
def test_products_from_a_thread_without_a_cuda_context(form):
    """A new thread has no current CUDA context until a runtime call makes one (autograd's
    worker threads run the backward products that way); the TMA descriptors of the Hopper
    kernels need one. Seen on an H200: an illegal instruction in tg.matmul's backward."""
    import threading

    a, b = operands(form, 136, 64, 72, torch.bfloat16, "cuda")  # M % 8 == 0 for wgrad
    outs, errors = [], []

    def run():
        try:
            outs.append(tg.matmul(a, b))
            torch.cuda.synchronize()
        except Exception as e:  # reported by the assertion below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors, errors
    assert_matches(outs[0], a, b, "out")


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("form", FORMS)
def test_llama_sized_product_on_gpu(form):
    """A slice of a Llama-3-8B projection (K = 4096) with M not a multiple of the tile."""
    m, n, k = (1024, 1024, 2001) if form == "wgrad" else (2001, 1024, 4096)
    a, b = operands(form, m, n, k, torch.bfloat16, "cuda")
    out = poison_(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
    _C.matmul(a, b, out, tg._torch.current_stream(a))
    # K up to 4096: allow the float32 accumulation K * 2^-24 (2^-12) of sum |a||b|.
    a64, b64 = a.double(), b.double()
    want = a64 @ b64
    bound = OUT_RTOL[torch.bfloat16] * want.abs() + 2.0**-12 * (a64.abs() @ b64.abs())
    assert ((out.double() - want).abs() <= bound).all()


def test_describe_names_the_kernel():
    a, b = torch.randn(4, 16).bfloat16(), torch.randn(16, 8).bfloat16()
    assert tg.describe_matmul(a, b) == "cpu reference (blocked, float32 accumulation)"
    if is_hopper():
        big = torch.empty(8192, 4096, dtype=torch.bfloat16, device="cuda")
        assert tg.describe_matmul(big, big.t()) == "sm90 cooperative 128x256x64 cluster 2x1"


class TestBadInputs:
    def test_float32_inputs(self):
        with pytest.raises(TypeError, match="a must be bfloat16 or float16, got float32"):
            tg.matmul(torch.randn(4, 16), torch.randn(16, 8))

    def test_mixed_dtypes(self):
        with pytest.raises(TypeError, match="b must be bfloat16, got float16"):
            tg.matmul(torch.randn(4, 16).bfloat16(), torch.randn(16, 8).half())

    def test_inner_dimensions_differ(self):
        with pytest.raises(ValueError, match=r"b must have 16 rows to match a of shape \[4, 16\]"):
            tg.matmul(torch.randn(4, 16).bfloat16(), torch.randn(12, 8).bfloat16())

    def test_k_not_a_multiple_of_8(self):
        msg = r"a is contiguous along K, which must be a multiple of 8 \(16-byte rows\), got 12"
        with pytest.raises(ValueError, match=msg):
            tg.matmul(torch.randn(4, 12).bfloat16(), torch.randn(12, 8).bfloat16())

    def test_n_not_a_multiple_of_8(self):
        msg = "b is contiguous along N, which must be a multiple of 8"
        with pytest.raises(ValueError, match=msg):
            tg.matmul(torch.randn(4, 16).bfloat16(), torch.randn(16, 20).bfloat16())

    def test_both_transposed(self):
        with pytest.raises(ValueError, match="a and b are both transposed views"):
            tg.matmul(torch.randn(16, 8).bfloat16().t(), torch.randn(8, 16).bfloat16().t())

    def test_misaligned_slice(self):
        base = torch.randn(4, 24).bfloat16()
        with pytest.raises(ValueError, match="a's data pointer must be 16-byte aligned"):
            tg.matmul(base[:, 1:17], torch.randn(16, 8).bfloat16())

    def test_unknown_kernel(self):
        a, b = torch.randn(4, 16).bfloat16(), torch.randn(16, 8).bfloat16()
        with pytest.raises(ValueError, match="kernel must be 'auto'"):
            _C.matmul(a, b, torch.empty(4, 8).bfloat16(), 0, "fast")

    def test_forced_kernel_on_cpu(self):
        a, b = torch.randn(4, 16).bfloat16(), torch.randn(16, 8).bfloat16()
        with pytest.raises(ValueError, match="only kernel=Auto runs on the CPU"):
            _C.matmul(a, b, torch.empty(4, 8).bfloat16(), 0, "portable")

    @requires_cuda
    @pytest.mark.gpu
    def test_wrong_device(self):
        with pytest.raises(ValueError, match="b is on cpu but a is on cuda:0"):
            tg.matmul(torch.randn(4, 16, device="cuda").bfloat16(), torch.randn(16, 8).bfloat16())

    @pytest.mark.skipif(not HAS_CUDA or is_hopper(), reason="needs a CUDA GPU other than Hopper")
    @pytest.mark.gpu
    def test_sm90_kernel_elsewhere(self):
        a = torch.randn(4, 16, device="cuda").bfloat16()
        b = torch.randn(16, 8, device="cuda").bfloat16()
        with pytest.raises(ValueError, match="the sm90 kernels need a compute capability 9.0 GPU"):
            _C.matmul(a, b, torch.empty(4, 8, device="cuda").bfloat16(), 0, "sm90_cooperative")


def test_opcheck_schema_and_fake_kernel():
    a, b = torch.randn(5, 16).bfloat16(), torch.randn(8, 16).bfloat16().t()
    torch.library.opcheck(torch.ops.tilegrid.matmul.default, (a, b, None))
    torch.library.opcheck(torch.ops.tilegrid.matmul.default, (a, b, torch.float32))


def test_torch_compile_traces_the_op():
    """fullgraph=True fails if the op breaks the graph; aot_eager runs autograd tracing too."""
    x = torch.randn(6, 40).bfloat16().requires_grad_()
    w = torch.randn(16, 40).bfloat16().requires_grad_()

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(x, w):
        return tg.linear(x * 2, w).float().sum()

    f(x, w).backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    tg.linear(xr * 2, wr).float().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
