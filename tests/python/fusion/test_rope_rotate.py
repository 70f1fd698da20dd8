"""tg.rope_rotate (RoPE on interleaved pairs, the QKV product's RoPE gradient) against a float64
torch reference: every dtype, both directions, strided inputs and outputs written into a
column block of a wider matrix (the rest left alone), in place; it agrees with the product's
`rope` epilogue; bad arguments raise before anything runs. CPU always; CUDA where there is a
GPU (the epilogue comparison on Hopper, where the fused programs run)."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES, HAS_CUDA, requires_cuda

HOPPER = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
EPILOGUE_DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not HOPPER, reason="the fused programs need a compute capability 9.0 GPU")])]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# One unit in the last place of each storage type: the output is rounded once (bfloat16 and
# float16 from float32, which the CPU reference rounds from float64 first).
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
MAX_POSITION = 2048

# (rows, heads, head_dim, x column offset, out column offset): head_dim 2 (one pair a head),
# 8 and 128; widths that are whole 16-byte vectors and some that are not; offsets of 0 keep
# rows 16-byte aligned (the CUDA kernel's vector path), odd ones do not (its one-pair path).
CASES = [(37, 4, 16, 0, 0), (37, 4, 16, 3, 5), (5, 3, 2, 0, 0), (9, 3, 2, 1, 0),
         (64, 5, 128, 0, 8), (1, 2, 8, 0, 0), (130, 1, 8, 2, 0)]


def reference(x, positions, inv_freq, inverse):
    """float64: pair j of every head of row i rotated by positions[i] * inv_freq[j]."""
    rows, width = x.shape
    half = inv_freq.numel()
    angle = positions.double()[:, None] * inv_freq.double()[None]
    angle = (-angle if inverse else angle)[:, None]  # [rows, 1, half], every head
    pairs = x.double().reshape(rows, width // (2 * half), half, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    c, s = angle.cos(), angle.sin()
    return torch.stack([a * c - b * s, a * s + b * c], -1).reshape(rows, width)


def frequencies(head_dim, device):
    return tg.nn.llama.rotary_frequencies(head_dim, 10000.0, device)


def tolerance(got, x, positions, inv_freq):
    """(rtol, atol): the output's rounding (subnormals' spacing near 0), and on the GPU the
    float32 angle float(position) * inv_freq[j], off by up to |angle| * 2^-24, times the pair's
    size."""
    subnormal = torch.finfo(got.dtype).tiny * ULP[got.dtype]
    if not got.is_cuda:
        return ULP[got.dtype], subnormal
    angle = positions.abs().max().item() * inv_freq.max().item()
    return ULP[got.dtype], subnormal + (angle * 2.0**-24 + 1e-6) * 2 * x.abs().max().item()


def assert_close(got, want, rtol, atol, what):
    assert not got.isnan().any(), f"{what}: NaN (an unwritten element?)"
    err = ((got.double().cpu() - want.cpu()).abs() - rtol * want.cpu().abs()).max().item()
    assert err <= atol, f"{what}: max excess error {err:.3g} > atol {atol:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("position_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("inverse", [False, True])
def test_matches_float64_reference_into_a_column_block(device, dtype, case, position_dtype, inverse):
    rows, heads, head_dim, x_offset, out_offset = case
    width = heads * head_dim
    # x a column block of a wider matrix (a row stride of its own), out one of another,
    # poisoned: the block must be written, the columns around it left alone.
    x_wide = torch.randn(rows, width + x_offset + 3, device=device).to(dtype)
    x = x_wide[:, x_offset:x_offset + width]
    out_wide = torch.full((rows, width + out_offset + 7), float("nan"), device=device, dtype=dtype)
    out = out_wide[:, out_offset:out_offset + width]
    positions = torch.randint(0, MAX_POSITION, (rows,), device=device, dtype=position_dtype)
    inv_freq = frequencies(head_dim, device)

    got = tg.rope_rotate(x, positions, inv_freq, inverse=inverse, out=out)
    assert got is out
    rtol, atol = tolerance(out, x, positions, inv_freq)
    assert_close(out, reference(x, positions, inv_freq, inverse), rtol, atol, "out")
    assert out_wide[:, :out_offset].isnan().all() and out_wide[:, out_offset + width:].isnan().all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_and_out_of_place_agree_and_inverse_undoes_it(device, dtype):
    rows, heads, head_dim = 33, 3, 64
    x = torch.randn(rows, heads * head_dim, device=device).to(dtype)
    positions = torch.randint(0, MAX_POSITION, (rows,), device=device)
    inv_freq = frequencies(head_dim, device)
    rotated = tg.rope_rotate(x, positions, inv_freq)
    assert rotated.is_contiguous() and rotated.dtype == dtype
    in_place = x.clone()
    assert tg.rope_rotate(in_place, positions, inv_freq, out=in_place) is in_place
    assert torch.equal(in_place, rotated)
    back = tg.rope_rotate(rotated, positions, inv_freq, inverse=True)
    # Two roundings to the storage type (and on the GPU two float32 angles) apart.
    rtol, atol = tolerance(back, x, positions, inv_freq)
    assert_close(back, x.double(), 3 * rtol, 2 * atol + 3 * rtol * x.abs().max().item(), "back")


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_rows_and_empty_inputs(device):
    """A row stride of 0 (one row broadcast to every row, as an expanded gradient can be) reads
    the same row each time; no rows or no columns is a no-op."""
    head_dim, rows = 16, 6
    inv_freq = frequencies(head_dim, device)
    positions = torch.arange(rows, device=device) * 3
    row = torch.randn(1, 2 * head_dim, device=device)
    got = tg.rope_rotate(row.expand(rows, -1), positions, inv_freq)
    rtol, atol = tolerance(got, row, positions, inv_freq)
    assert_close(got, reference(row.expand(rows, -1), positions, inv_freq, False), rtol, atol, "out")
    empty = torch.empty(0, 2 * head_dim, device=device)
    assert tg.rope_rotate(empty, positions[:0], inv_freq).shape == (0, 2 * head_dim)
    assert tg.rope_rotate(torch.empty(rows, 0, device=device), positions, inv_freq).shape == (rows, 0)


@pytest.mark.parametrize("device", EPILOGUE_DEVICES)
def test_agrees_with_the_rope_epilogue_of_the_product(device):
    """The pair convention and the angle are those of the QKV product's `rope` epilogue: the
    product rotated there matches the product rotated by rope_rotate afterwards, to the bfloat16
    rounding of the product in between; and rope_rotate(inverse) brings it back."""
    tokens, hidden, heads, head_dim = 96, 64, 3, 32
    a = torch.randn(tokens, hidden, device=device).bfloat16()
    w = (torch.randn(heads * head_dim, hidden, device=device) / hidden**0.5).bfloat16()
    positions = torch.randint(0, MAX_POSITION, (tokens,), device=device)
    inv_freq = frequencies(head_dim, device)
    fused = torch.empty(tokens, heads * head_dim, device=device, dtype=torch.bfloat16)
    tg.epilogue.matmul(a, w.t(), tg.epilogue.Program().rope(positions, inv_freq.repeat(heads)).store(fused))
    plain = a.double() @ w.double().t()
    after = tg.rope_rotate(plain.bfloat16(), positions, inv_freq)

    def rel(x, y):
        return ((x.double() - y.double()).norm() / y.double().norm()).item()

    assert rel(after, fused) < 5e-3  # bfloat16 roundings (2^-9 each); another pairing is O(1)
    assert rel(tg.rope_rotate(fused, positions, inv_freq, inverse=True), plain) < 5e-3


def test_torch_compile_traces_it_as_one_node():
    x = torch.randn(12, 64)
    positions = torch.arange(12)
    inv_freq = frequencies(16, "cpu")

    def fn(x):
        d = torch.zeros(12, 80)
        tg.rope_rotate(x * 2, positions, inv_freq, inverse=True, out=d[:, 8:72])
        return d

    got = torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(got, fn(x))
    assert torch.equal(got[:, 8:72], tg.rope_rotate(x * 2, positions, inv_freq, inverse=True))


def test_bad_arguments_raise_clear_errors():
    x = torch.randn(4, 32)
    positions = torch.arange(4)
    inv_freq = frequencies(8, "cpu")
    cases = [
        (TypeError, "x must be float32, float16 or bfloat16, got int64",
         dict(x=torch.ones(4, 32, dtype=torch.int64))),
        (ValueError, "x must have 2 dimensions", dict(x=torch.randn(4, 2, 16))),
        (ValueError, "x must have a contiguous last dimension", dict(x=torch.randn(32, 4).t())),
        (ValueError, r"x's 32 columns must be whole heads of head_dim 2 \* inv_freq.numel\(\) = 12",
         dict(inv_freq=frequencies(12, "cpu"))),
        (ValueError, r"inv_freq must hold head_dim / 2 >= 1 frequencies",
         dict(inv_freq=torch.empty(0))),
        (TypeError, "inv_freq must be float32, got float64", dict(inv_freq=inv_freq.double())),
        (ValueError, r"positions must have shape \[4\], got \[5\]", dict(positions=torch.arange(5))),
        (TypeError, "positions must be int32 or int64, got float32",
         dict(positions=torch.arange(4.0))),
        (TypeError, "out must be float32, got bfloat16", dict(out=torch.empty(4, 32).bfloat16())),
        (ValueError, r"out must have shape \[4, 32\], got \[4, 16\]", dict(out=torch.empty(4, 16))),
        (ValueError, "out must have a contiguous last dimension", dict(out=torch.empty(32, 4).t())),
        (ValueError, r"rows of out overlap \(row stride 16 < 32 columns\)",
         dict(out=torch.empty(80).as_strided((4, 32), (16, 1)))),
    ]
    for error, message, change in cases:
        args = dict(x=x, positions=positions, inv_freq=inv_freq, out=None) | change
        with pytest.raises(error, match=message):
            tg.rope_rotate(args["x"], args["positions"], args["inv_freq"], out=args["out"])
    wide = torch.randn(4, 64)
    with pytest.raises(ValueError, match="out starts where x does but with another row stride"):
        tg.rope_rotate(wide[:, :32], positions, inv_freq, out=wide.view(8, 32)[:4])


@requires_cuda
@pytest.mark.gpu
def test_tensors_on_different_devices_are_refused():
    x = torch.randn(4, 32, device="cuda")
    inv_freq = frequencies(8, "cuda")
    with pytest.raises(ValueError, match="positions is on cpu but x is on cuda:0"):
        tg.rope_rotate(x, torch.arange(4), inv_freq)
    with pytest.raises(ValueError, match="out is on cpu but x is on cuda:0"):
        tg.rope_rotate(x, torch.arange(4, device="cuda"), inv_freq, out=torch.empty(4, 32))
