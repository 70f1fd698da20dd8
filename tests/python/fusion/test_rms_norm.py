import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from tilegrid import _C
from conftest import DEVICES, poison_, requires_cuda

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Sizes that reach every CUDA kernel (see tests/cpp/fusion/rms_norm_test.cpp).
HIDDEN = [1, 7, 64, 768, 2048, 4095, 4096, 4097, 8192, 40000]

# Relative tolerance of an output rounded once to its storage type (bf16: 8 mantissa bits,
# fp16: 11) on top of float32 math; gradients get a few roundings more.
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def reference(x, weight, eps, dy):
    """float64 torch: y, dx, dweight."""
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_() if weight is not None else None
    y = F.rms_norm(x64, (x.shape[-1],), w64, eps)
    y.backward(dy.double())
    return y.detach(), x64.grad, (w64.grad if w64 is not None else None)


def assert_close(got, want, rtol, atol, what):
    assert not got.isnan().any(), f"{what}: NaN (an unwritten element?)"
    err = ((got.double() - want).abs() - rtol * want.abs()).max().item()
    assert err <= atol, f"{what}: max excess error {err:.3g} > atol {atol:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32, None])
def test_matches_float64_reference(device, dtype, hidden, weight_dtype):
    rows, eps = 67, 1e-6
    x = torch.randn(rows, hidden, device=device, dtype=dtype)
    weight = None
    if weight_dtype is not None:
        wt = dtype if weight_dtype == "same" else weight_dtype
        weight = (1 + 0.5 * torch.randn(hidden, device=device)).to(wt).requires_grad_()
    dy = torch.randn_like(x)
    y_ref, dx_ref, dw_ref = reference(x, weight, eps, dy)

    xg = x.clone().requires_grad_()
    y = tg.rms_norm(xg, weight, eps)
    y.backward(dy)
    rtol = RTOL[dtype]
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, y_ref, rtol, 1e-6, "y")
    assert_close(xg.grad, dx_ref, rtol, 4 * rtol, "dx")
    if weight is not None:
        # dweight sums `rows` products of unit-scale terms, each rounded in the inputs.
        assert weight.grad.dtype == weight.dtype
        assert_close(weight.grad, dw_ref, RTOL[weight.dtype] + 1e-4, rtol * rows**0.5, "dweight")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 768, 4097, 40000])
def test_keep_input_adds_the_residual_gradient_in_the_backward(device, dtype, hidden):
    """h = x + g(norm(x)) through rms_norm_keep_input: its gradients are autograd's of the
    float64 reference, the residual's gradient added to dx inside the norm's kernel (every
    CUDA kernel family: registers, and streaming for 40000)."""
    rows, eps = 37, 1e-6
    x = torch.randn(rows, hidden, device=device, dtype=dtype)
    weight = (1 + 0.5 * torch.randn(hidden, device=device)).to(dtype).requires_grad_()
    scale = torch.randn(hidden, device=device, dtype=dtype)
    dh = torch.randn_like(x)

    xg = x.clone().requires_grad_()
    y, x_view = tg.rms_norm_keep_input(xg, weight, eps)
    assert torch.equal(x_view, x) and x_view.data_ptr() == xg.data_ptr()
    (x_view + y * scale).backward(dh)

    x64 = x.double().requires_grad_()
    w64 = weight.detach().double().requires_grad_()
    (x64 + F.rms_norm(x64, (hidden,), w64, eps) * scale.double()).backward(dh.double())
    rtol = RTOL[dtype]
    assert_close(xg.grad, x64.grad, rtol, 8 * rtol, "dx")
    assert_close(weight.grad, w64.grad, rtol + 1e-4, 2 * rtol * rows**0.5, "dweight")


def test_keep_input_with_the_residual_path_unused():
    """Only the norm's output used: the residual's gradient is zeros and dx is the norm's."""
    x = torch.randn(5, 64, requires_grad=True)
    y, _ = tg.rms_norm_keep_input(x, None)
    y.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    tg.rms_norm(x2, None).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 4096])
def test_every_output_element_is_written(device, dtype, hidden):
    """Calls the kernels with NaN-poisoned outputs: any unwritten element stays NaN."""
    x = torch.randn(33, hidden, device=device, dtype=dtype)
    w = torch.randn(hidden, device=device, dtype=dtype)
    y = poison_(torch.empty_like(x))
    rstd = poison_(torch.empty(33, device=device))
    stream = tg._torch.current_stream(x)
    _C.rms_norm_forward(x, w, 1e-5, y, rstd, stream)
    dx, dw = poison_(torch.empty_like(x)), poison_(torch.empty_like(w))
    _C.rms_norm_backward(torch.randn_like(x), x, w, rstd, dx, dw, stream)
    for name, t in {"y": y, "rstd": rstd, "dx": dx, "dweight": dw}.items():
        assert not t.isnan().any(), f"{name} has unwritten elements"


@pytest.mark.parametrize("device", DEVICES)
def test_leading_dims_and_row_slices(device):
    x = torch.randn(2, 3, 5, 64, device=device)
    w = torch.randn(64, device=device)
    torch.testing.assert_close(tg.rms_norm(x, w, 1e-6), F.rms_norm(x, (64,), w, 1e-6))
    rows = torch.randn(10, 64, device=device)[::2]  # row stride 128: read in place
    torch.testing.assert_close(tg.rms_norm(rows, w, 1e-6), F.rms_norm(rows, (64,), w, 1e-6))


@pytest.mark.parametrize("device", DEVICES)
def test_any_layout_is_taken_as_torch_takes_it(device):
    """A strided last dimension or leading dimensions that do not flatten into one row stride
    are copied to a contiguous layout (the kernels read rows of one stride); the result and the
    gradient are torch's."""
    w = torch.randn(8, device=device)
    for x in (torch.randn(8, 6, device=device).t(), torch.randn(4, 3, 8, device=device).transpose(0, 1)):
        x = x.requires_grad_()
        y = tg.rms_norm(x, w, 1e-6)
        (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
        x2 = x.detach().clone().requires_grad_()
        y2 = F.rms_norm(x2, (8,), w, 1e-6)
        (dx2,) = torch.autograd.grad(y2, x2, torch.ones_like(y2))
        torch.testing.assert_close(y, y2)
        torch.testing.assert_close(dx, dx2)


@pytest.mark.parametrize("keep_input", [False, True])
def test_a_hidden_size_of_zero_gives_an_empty_output_as_torch(keep_input):
    x = torch.randn(3, 0, requires_grad=True)
    w = torch.randn(0, requires_grad=True)
    y = tg.rms_norm_keep_input(x, w)[0] if keep_input else tg.rms_norm(x, w)
    assert y.shape == (3, 0) and y.dtype == x.dtype
    dx, dw = torch.autograd.grad(y.sum(), (x, w), allow_unused=True)
    assert dx.shape == (3, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_rows(device):
    x = torch.randn(0, 16, device=device, requires_grad=True)
    w = torch.randn(16, device=device, requires_grad=True)
    y = tg.rms_norm(x, w, 1e-6)
    y.sum().backward()
    assert y.shape == (0, 16)
    assert torch.equal(w.grad, torch.zeros_like(w))


def test_default_eps_follows_torch():
    x = torch.randn(8, 32, dtype=torch.float16) * 1e-3
    torch.testing.assert_close(tg.rms_norm(x), F.rms_norm(x, (32,)), rtol=2e-3, atol=1e-5)


class TestBadInputs:
    def test_wrong_dtype(self):
        with pytest.raises(TypeError, match="x must be float32, float16 or bfloat16, got int64"):
            tg.rms_norm(torch.ones(4, 8, dtype=torch.int64), None, 1e-6)

    def test_mismatched_weight_size(self):
        with pytest.raises(ValueError, match=r"weight must have shape \[8\], got \[7\]"):
            tg.rms_norm(torch.randn(4, 8), torch.randn(7), 1e-6)

    def test_weight_dtype(self):
        with pytest.raises(TypeError, match="weight must be bfloat16 or float32, got float16"):
            tg.rms_norm(torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8).half(), 1e-6)

    @pytest.mark.parametrize("call,error,message", [
        (lambda: tg.rms_norm(torch.randn(4, 8), [1.0] * 8), TypeError, "rms_norm: weight must be a torch.Tensor or None, got list"),
        (lambda: tg.rms_norm(torch.ones(4, 8, dtype=torch.int16)), TypeError, "rms_norm: x must be float32, float16 or bfloat16, got int16"),
        (lambda: tg.rms_norm(torch.randn(4, 8), torch.ones(8, dtype=torch.complex64)), TypeError, "rms_norm: weight must be float32, got complex64"),
        (lambda: tg.rms_norm(torch.randn(4, 8), None, "1e-6"), TypeError, r"rms_norm: eps must be a float or None, got str \('1e-6'\)"),
        (lambda: tg.rms_norm(torch.randn(4, 8), torch.ones(8, device="meta")), ValueError, "rms_norm: weight is on meta but x is on cpu"),
        (lambda: tg.rms_norm_keep_input(torch.tensor(1.0), None), ValueError, "rms_norm_keep_input: x must be"),
    ])
    def test_arguments_of_the_wrong_kind_name_themselves(self, call, error, message):
        """Checked in Python: a list or an int16 tensor would fail in the DLPack conversion,
        a string eps in float(), a meta weight in the capsule's packing, naming nothing."""
        with pytest.raises(error, match=message):
            call()

    def test_negative_eps(self):
        with pytest.raises(ValueError, match="eps must be finite and >= 0"):
            tg.rms_norm(torch.randn(4, 8), None, -1.0)

    @requires_cuda
    @pytest.mark.gpu
    def test_wrong_device(self):
        with pytest.raises(ValueError, match="weight is on cpu but x is on cuda:0"):
            tg.rms_norm(torch.randn(4, 8, device="cuda"), torch.randn(8), 1e-6)


def test_opcheck_schema_and_fake_kernels():
    x = torch.randn(5, 24, requires_grad=True)
    w = torch.randn(24, requires_grad=True)
    torch.library.opcheck(torch.ops.tilegrid.rms_norm_forward.default, (x.detach(), w.detach(), 1e-6))
    dy, rstd = torch.randn(5, 24), torch.rand(5) + 0.5
    torch.library.opcheck(torch.ops.tilegrid.rms_norm_backward.default, (dy, x.detach(), w.detach(), rstd))


def test_torch_compile_traces_the_op():
    """fullgraph=True fails if the op breaks the graph; aot_eager runs autograd tracing too."""
    x = torch.randn(6, 40, requires_grad=True)
    w = torch.randn(40, requires_grad=True)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(x, w):
        return tg.rms_norm(x * 2, w, 1e-6).sum()

    f(x, w).backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    F.rms_norm(xr * 2, (40,), wr, 1e-6).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)


class TestModule:
    def test_state_dict_swaps_with_torch(self):
        ours, theirs = tg.nn.RMSNorm(32, eps=1e-5), torch.nn.RMSNorm(32, eps=1e-5)
        with torch.no_grad():
            theirs.weight.copy_(torch.randn(32))
        ours.load_state_dict(theirs.state_dict())
        x = torch.randn(3, 32)
        torch.testing.assert_close(ours(x), theirs(x))

    def test_multi_dim_normalized_shape(self):
        ours, theirs = tg.nn.RMSNorm((4, 8)), torch.nn.RMSNorm((4, 8))
        with torch.no_grad():
            theirs.weight.copy_(torch.randn(4, 8))
            ours.weight.copy_(theirs.weight)
        x = torch.randn(2, 4, 8)
        torch.testing.assert_close(ours(x), theirs(x))

    def test_without_affine(self):
        m = tg.nn.RMSNorm(16, elementwise_affine=False)
        assert m.weight is None
        x = torch.randn(2, 16)
        torch.testing.assert_close(m(x), F.rms_norm(x, (16,)))

    def test_wrong_trailing_shape(self):
        with pytest.raises(ValueError, match=r"trailing dimensions must be \[16\]"):
            tg.nn.RMSNorm(16)(torch.randn(2, 15))
