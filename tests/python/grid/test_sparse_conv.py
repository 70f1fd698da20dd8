"""Sparse convolution: the grids, maps and GEMMs against dense torch convolutions (sparse = dense
where every voxel is active) and against a brute-force float64 reference over coordinates, on
the CPU and, where there is one, the GPU."""

import itertools

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from tilegrid import kernel_choice
from conftest import DEVICES, requires_cuda


def dense_volume(grid, features):
    """[1, C, *box] dense volume of a single-grid batch, and the box's low corner."""
    ijk = grid.ijk.jdata.long().cpu()
    lo = ijk.min(0).values
    size = (ijk.max(0).values - lo + 1).tolist()
    vol = torch.zeros(1, features.shape[1], *size, dtype=features.dtype)
    local = ijk - lo
    vol[0, :, local[:, 0], local[:, 1], local[:, 2]] = features.cpu().T
    return vol, lo


def brute_force(source, target, features, weight, kernel_size, stride, transposed):
    """float64 convolution by coordinate lookups, independent of the map code: for every target
    voxel and tap, the input coordinate from the documented geometry."""
    k, s = kernel_size, stride
    pad = [(kk - 1) // 2 for kk in k]  # fVDB 0.6's, odd and even K alike
    src = {}
    for b, t in enumerate(source.ijk.unbind()):
        base = int(source.voxel_offsets[b])
        for n, c in enumerate(t.cpu().tolist()):
            src[(b, *c)] = base + n
    x, w = features.double().cpu(), weight.double().cpu()
    out = torch.zeros(target.total_voxels, w.shape[0], dtype=torch.float64)
    for b, t in enumerate(target.ijk.unbind()):
        base = int(target.voxel_offsets[b])
        for n, o in enumerate(t.cpu().tolist()):
            for tap in itertools.product(*[range(kk) for kk in k]):
                if not transposed:
                    i = tuple(o[a] * s[a] + tap[a] - pad[a] for a in range(3))
                else:
                    shifted = [o[a] + pad[a] - tap[a] for a in range(3)]
                    if any(v % s[a] for a, v in enumerate(shifted)):
                        continue
                    i = tuple(v // s[a] for a, v in enumerate(shifted))
                row = src.get((b, *i))
                if row is not None:
                    out[base + n] += w[:, :, tap[0], tap[1], tap[2]] @ x[row]
    return out


def random_grid(device, sizes=(40, 0, 1, 25), spread=6, far=False):
    parts = []
    for n in sizes:
        c = torch.randint(-spread, spread, (n, 3), dtype=torch.int32)
        if far and n:
            c[n // 2 :] += 10**8  # two clusters 10^8 voxels apart (different upper nodes)
        parts.append(c)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(parts), voxel_sizes=[0.5, 0.25, 1.0], origins=[1.0, 2.0, -3.0])
    return grid.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel_size", [1, 3, 5])
def test_submanifold_equals_dense_conv3d_on_a_full_box(device, kernel_size):
    grid = tg.GridBatch.from_dense(1, [6, 5, 7], ijk_min=[-2, 3, 1], device=device)
    x = torch.randn(grid.total_voxels, 5, dtype=torch.float64, device=device)
    w = torch.randn(4, 5, kernel_size, kernel_size, kernel_size, dtype=torch.float64, device=device)
    plan = tg.ConvolutionPlan.from_grid_batch(kernel_size, 1, grid, grid)
    got = plan.execute(x, w)
    vol, lo = dense_volume(grid, x)
    ijk = grid.ijk.jdata.long().cpu() - lo
    want = F.conv3d(vol, w.cpu(), padding=kernel_size // 2)[0][:, ijk[:, 0], ijk[:, 1], ijk[:, 2]].T
    torch.testing.assert_close(got.cpu(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_full_conv_grid_is_the_dilated_grid_and_matches_conv3d(device):
    """A k3 s1 convolution onto conv_grid writes every voxel within one of an active voxel:
    dense conv3d with padding 2 over the box gives those outputs."""
    grid = tg.GridBatch.from_dense(1, [4, 3, 5], device=device)
    out_grid = grid.conv_grid(3, 1)
    assert out_grid.total_voxels == 6 * 5 * 7
    x = torch.randn(grid.total_voxels, 3, dtype=torch.float64, device=device)
    w = torch.randn(2, 3, 3, 3, 3, dtype=torch.float64, device=device)
    got = tg.ConvolutionPlan.from_grid_batch(3, 1, grid).execute(x, w)
    vol, lo = dense_volume(grid, x)
    ijk = out_grid.ijk.jdata.long().cpu() - lo + 1  # padding 2 shifts the output box by -1
    want = F.conv3d(vol, w.cpu(), padding=2)[0][:, ijk[:, 0], ijk[:, 1], ijk[:, 2]].T
    torch.testing.assert_close(got.cpu(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_stride_two_downsampling_and_transposed_upsampling_match_torch(device):
    grid = tg.GridBatch.from_dense(1, [6, 4, 8], device=device)
    x = torch.randn(grid.total_voxels, 3, dtype=torch.float64, device=device)
    w = torch.randn(4, 3, 2, 2, 2, dtype=torch.float64, device=device)
    down = tg.ConvolutionPlan.from_grid_batch(2, 2, grid)
    coarse = down.target_grid
    assert coarse.total_voxels == 3 * 2 * 4
    torch.testing.assert_close(coarse.voxel_sizes, grid.voxel_sizes * 2)
    torch.testing.assert_close(coarse.origins, grid.origins + 0.5)
    y = down.execute(x, w)
    vol, _ = dense_volume(grid, x)
    cijk = coarse.ijk.jdata.long().cpu()
    want = F.conv3d(vol, w.cpu(), stride=2)[0][:, cijk[:, 0], cijk[:, 1], cijk[:, 2]].T
    torch.testing.assert_close(y.cpu(), want, rtol=1e-12, atol=1e-12)

    wt = torch.randn(3, 4, 2, 2, 2, dtype=torch.float64, device=device)
    up = tg.ConvolutionPlan.from_grid_batch_transposed(2, 2, coarse, grid)
    z = up.execute(y, wt)
    cvol, _ = dense_volume(coarse, y)
    ijk = grid.ijk.jdata.long().cpu()
    want_up = F.conv_transpose3d(cvol, wt.cpu().transpose(0, 1), stride=2)[0][:, ijk[:, 0], ijk[:, 1], ijk[:, 2]].T
    torch.testing.assert_close(z.cpu(), want_up, rtol=1e-12, atol=1e-12)
    # conv_transpose_grid of the coarse grid is the full box again.
    assert torch.equal(coarse.conv_transpose_grid(2, 2).ijk.jdata.cpu(), grid.ijk.jdata.cpu())


CASES = [  # kernel_size, stride, transposed, target ("same" or "conv")
    ((3, 3, 3), (1, 1, 1), False, "same"),
    ((3, 3, 3), (1, 1, 1), False, "conv"),
    ((3, 1, 5), (1, 1, 1), False, "same"),
    ((7, 7, 7), (1, 1, 1), False, "same"),
    ((2, 2, 2), (2, 2, 2), False, "conv"),
    ((3, 3, 3), (2, 2, 2), False, "conv"),
    ((3, 3, 3), (2, 1, 3), False, "conv"),
    ((2, 2, 2), (2, 2, 2), True, "conv"),
    ((3, 3, 3), (2, 2, 2), True, "conv"),
    ((1, 1, 1), (2, 2, 2), False, "conv"),
    ((4, 4, 4), (1, 1, 1), False, "same"),
    ((2, 4, 6), (1, 1, 1), False, "conv"),
    ((4, 4, 4), (4, 4, 4), False, "conv"),
    ((4, 2, 6), (2, 2, 3), False, "conv"),
    ((4, 4, 4), (2, 2, 2), True, "conv"),
    ((2, 4, 3), (1, 2, 3), True, "conv"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel_size,stride,transposed,target", CASES)
def test_random_sparse_batches_match_brute_force(device, kernel_size, stride, transposed, target):
    """Batches of 4 grids (one empty, one a single voxel), two clusters 10^8 voxels apart."""
    grid = random_grid(device, far=True)
    if target == "same":
        plan = tg.ConvolutionPlan.from_grid_batch(kernel_size, stride, grid, grid)
    elif transposed:
        plan = tg.ConvolutionPlan.from_grid_batch_transposed(kernel_size, stride, grid)
    else:
        plan = tg.ConvolutionPlan.from_grid_batch(kernel_size, stride, grid)
    x = torch.randn(grid.total_voxels, 3, dtype=torch.float64, device=device)
    w = torch.randn(2, 3, *kernel_size, dtype=torch.float64, device=device)
    got = plan.execute(tg.JaggedTensor.from_data_and_offsets(x, grid.voxel_offsets), w)
    assert isinstance(got, tg.JaggedTensor) and torch.equal(got.joffsets.cpu(), plan.target_grid.voxel_offsets.cpu())
    want = brute_force(grid, plan.target_grid, x, w, kernel_size, stride, transposed)
    torch.testing.assert_close(got.jdata.cpu(), want, rtol=1e-12, atol=1e-12)
    # The output grid holds exactly the voxels that receive an input.
    assert (plan.kernel_map >= 0).any(0).all() or target == "same"


def line_grid(device, first, last):
    """Voxels (first .. last, 0, 0), voxel size 0.5, origin 1: a line along i."""
    ijk = torch.tensor([[i, 0, 0] for i in range(first, last + 1)], dtype=torch.int32)
    return tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]), voxel_sizes=0.5, origins=1.0).to(device)


def line_map(plan):
    """The target's i coordinates and, for each tap along i, the source i that each target
    voxel's entry names (None where it is -1)."""
    src = plan.source_grid.ijk.jdata[:, 0].cpu().tolist()
    taps = [[src[r] if r >= 0 else None for r in row] for row in plan.kernel_map.cpu().tolist()]
    return plan.target_grid.ijk.jdata[:, 0].cpu().tolist(), taps


# kernel size and stride along i, transposed, the source line (first, last); then the target's
# i coordinates and, a tap each, the source voxel each target voxel reads. Tap t of output o
# reads o * s + t - (K - 1) // 2 (transposed: input i feeds i * s + t - (K - 1) // 2).
EVEN_LINES = [
    (2, 1, False, (0, 4), [-1, 0, 1, 2, 3, 4],
     [[None, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, None]]),
    (4, 1, False, (0, 4), [-2, -1, 0, 1, 2, 3, 4, 5],
     [[None, None, None, 0, 1, 2, 3, 4], [None, None, 0, 1, 2, 3, 4, None],
      [None, 0, 1, 2, 3, 4, None, None], [0, 1, 2, 3, 4, None, None, None]]),
    (2, 2, False, (0, 4), [0, 1, 2], [[0, 2, 4], [1, 3, None]]),
    (4, 2, False, (0, 4), [-1, 0, 1, 2],
     [[None, None, 1, 3], [None, 0, 2, 4], [None, 1, 3, None], [0, 2, 4, None]]),
    (2, 2, True, (0, 2), [0, 1, 2, 3, 4, 5],
     [[0, None, 1, None, 2, None], [None, 0, None, 1, None, 2]]),
    (4, 2, True, (0, 2), [-1, 0, 1, 2, 3, 4, 5, 6],
     [[0, None, 1, None, 2, None, None, None], [None, 0, None, 1, None, 2, None, None],
      [None, None, 0, None, 1, None, 2, None], [None, None, None, 0, None, 1, None, 2]]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k,s,transposed,line,want_out,want_taps", EVEN_LINES)
def test_even_kernels_pad_as_fvdb_on_a_line(device, k, s, transposed, line, want_out, want_taps):
    """fVDB 0.6's relation fine = s * coarse + t - (K - 1) // 2 on a line of voxels: K = 2 reads
    o * s .. o * s + 1, K = 4 reads o * s - 1 .. o * s + 2, forward and transposed; the
    output grid is every voxel some tap reaches, its origin the centre of a receptive field."""
    grid = line_grid(device, *line)
    plan = (tg.ConvolutionPlan.from_grid_batch_transposed if transposed
            else tg.ConvolutionPlan.from_grid_batch)((k, 1, 1), (s, 1, 1), grid)
    assert line_map(plan) == (want_out, want_taps)
    # Centre of o's receptive field: half a source voxel after o * s for an even K.
    shift = -0.5 * 0.5 / s if transposed else 0.5 * 0.5
    torch.testing.assert_close(plan.target_grid.origins.cpu(),
                               torch.tensor([[1.0 + shift, 1.0, 1.0]], dtype=torch.float64))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k,want_out,want_max,want_mean", [
    (2, [0, 1, 2, 3], [1, 3, 5, 7], [0.5, 2.5, 4.5, 6.5]),
    (4, [0, 1], [3, 7], [1.5, 5.5]),
    (3, [0, 1, 2], [2, 5, 7], [1.0, 4.0, 6.5]),  # odd as well: the blocks of coarsened_grid(3)
])
def test_pooling_windows_start_at_o_times_stride(device, k, want_out, want_max, want_mean):
    """Pooling takes fVDB's windows o * k .. o * k + k - 1 for every factor (a convolution's
    K = 4 starts one voxel before: conv_grid has a voxel more), on a line 0 .. 7 whose
    features are the voxels' i; the coarse grid is coarsened_grid(k)."""
    grid = line_grid(device, 0, 7)
    x = grid.ijk.jdata[:, :1].double()
    for pool, want in ((grid.max_pool, want_max), (grid.avg_pool, want_mean)):
        got, coarse = pool((k, 1, 1), x)
        assert coarse.ijk.jdata[:, 0].cpu().tolist() == want_out
        assert got.jdata[:, 0].cpu().tolist() == want
        assert coarse.ijk.jdata[:, 0].cpu().tolist() == \
            grid.coarsened_grid((k, 1, 1)).ijk.jdata[:, 0].cpu().tolist()
    if k == 4:
        assert grid.conv_grid((4, 1, 1), (4, 1, 1)).ijk.jdata[:, 0].cpu().tolist() == [0, 1, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_pooling_with_a_stride_other_than_the_factor_keeps_fvdbs_coarse_grid(device):
    """The default coarse grid is coarsened_grid(stride) (fVDB's), with windows of the pool
    factor starting at o * stride: overlapping ones (3 every 2) on the line 0 .. 7, and ones
    narrower than the stride (1 every 2) on voxels 1 and 3, whose windows hold none (0)."""
    grid = line_grid(device, 0, 7)
    x = grid.ijk.jdata[:, :1].double()
    got, coarse = grid.max_pool((3, 1, 1), x, stride=(2, 1, 1))
    assert coarse.ijk.jdata[:, 0].cpu().tolist() == [0, 1, 2, 3]
    assert got.jdata[:, 0].cpu().tolist() == [2, 4, 6, 7]
    ijk = torch.tensor([[1, 0, 0], [3, 0, 0]], dtype=torch.int32)
    sparse = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk])).to(device)
    got, coarse = sparse.avg_pool((1, 1, 1), sparse.ijk.jdata[:, :1].double() + 1, stride=(2, 1, 1))
    assert coarse.ijk.jdata[:, 0].cpu().tolist() == [0, 1]
    assert got.jdata[:, 0].cpu().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_by_gradcheck(device):
    grid = random_grid(device, sizes=(12, 0, 7), spread=3)
    for plan in (
        tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid),
        tg.ConvolutionPlan.from_grid_batch(3, 2, grid),
        tg.ConvolutionPlan.from_grid_batch_transposed(2, 2, grid),
    ):
        x = torch.randn(grid.total_voxels, 2, dtype=torch.float64, device=device, requires_grad=True)
        w = torch.randn(3, 2, *plan.kernel_size, dtype=torch.float64, device=device, requires_grad=True)
        assert torch.autograd.gradcheck(plan.execute, (x, w))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cin,cout", [(4, 5), (0, 5), (4, 0), (0, 0)])
def test_empty_grids_and_zero_channels_give_shaped_outputs_and_gradients(device, cin, cout):
    """As torch.nn.functional.conv3d: no voxels or no channels give correctly shaped outputs;
    a sum over no input channels is 0, and so are the gradients of the empty parts."""
    empty = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.zeros(0, 3, dtype=torch.int32)])).to(device)
    grid = random_grid(device, sizes=(12, 0, 7), spread=3)
    for source in (empty, grid):
        for plan in (tg.ConvolutionPlan.from_grid_batch(3, 1, source, source),
                     tg.ConvolutionPlan.from_grid_batch(2, 2, source)):
            x = torch.randn(source.total_voxels, cin, dtype=torch.float64, device=device, requires_grad=True)
            w = torch.randn(cout, cin, *plan.kernel_size, dtype=torch.float64, device=device,
                            requires_grad=True)
            out = plan.execute(x, w)
            rows = plan.kernel_map.shape[1]
            assert out.shape == (rows, cout)
            if cin == 0 or source is empty:
                assert torch.equal(out, torch.zeros_like(out))
            dx, dw = torch.autograd.grad(out, (x, w), torch.randn_like(out))
            assert dx.shape == x.shape and dw.shape == w.shape
            if rows == 0 or cout == 0:
                assert torch.equal(dx, torch.zeros_like(dx)) and torch.equal(dw, torch.zeros_like(dw))


@pytest.mark.parametrize("device", DEVICES)
def test_inference_equals_autograd_and_follows_weight_changes(device):
    """Without autograd, execute() takes the kernels directly: the same result as with
    autograd, and a weight changed in place, through .data, or to another dtype is used."""
    grid = random_grid(device, sizes=(60, 20), spread=5)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    conv = tg.nn.SparseConv3d(8, 16, 3, bias=False).to(device).double()
    x = torch.randn(grid.total_voxels, 8, dtype=torch.float64, device=device)
    with_grad = conv(x, plan)
    with torch.no_grad():
        first = conv(x, plan)
        assert torch.equal(first, with_grad.detach())
        conv.weight.mul_(2)
        assert torch.allclose(conv(x, plan), 2 * first)
        conv.weight.data.mul_(0.5)  # no version counter sees this one
        assert torch.allclose(conv(x, plan), first)
        assert conv(x.float(), plan).dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cin,cout", [(24, 40), (136, 72), (5, 7), (3, 32)])
def test_low_precision_against_float64(monkeypatch, device, dtype, cin, cout):
    """On a GPU, float16/bfloat16 with channels a multiple of 8 take the tensor-core kernels
    (136 and 72: tiles of 32 and 64 channels with a remainder); 5 -> 7 the CUDA-core ones
    (input channels padded to 8); 3 -> 32, a first layer's, the tensor-core kernels with the
    input channels padded to 8 (the weight gradient sliced back to 3).
    float32 with TF32 off: the exact CUDA-core kernels (TF32 has its own test)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    grid = random_grid(device, sizes=(300, 50), spread=8)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x = torch.randn(grid.total_voxels, cin, device=device).to(dtype)
    w = (torch.randn(cout, cin, 3, 3, 3, device=device) / cin**0.5).to(dtype)
    g = torch.randn(grid.total_voxels, cout, device=device).to(dtype)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    want = plan.execute(xr, wr)
    want.backward(g.double())
    xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
    got = plan.execute(xl, wl)
    got.backward(g)
    assert got.dtype == dtype and xl.grad.dtype == dtype and wl.grad.dtype == dtype
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}[dtype]
    for a, b in ((got, want), (xl.grad, xr.grad), (wl.grad, wr.grad)):
        scale = b.abs().max().item()
        assert (a.double() - b).abs().max().item() <= tol * scale


def epilogue_inputs(rows, cout, device, dtype):
    g = torch.Generator().manual_seed(3)
    scale = (torch.rand(cout, generator=g) + 0.5).to(device)
    shift = torch.randn(cout, generator=g).to(device)
    residual = torch.randn(rows, cout, generator=g).to(device=device, dtype=dtype)
    return scale, shift, residual


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("parts", ["scale", "shift", "residual", "relu", "all"])
def test_the_epilogue_fused_equals_it_applied_after(monkeypatch, device, dtype, parts):
    """execute()'s epilogue relu?(conv * scale + shift + residual): inside the kernels without
    autograd, by torch ops with it; both against the float64 convolution with the epilogue
    applied by hand. Downsampling plan (a target grid of its own)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    grid = random_grid(device, sizes=(300, 40), spread=8)
    target = grid.conv_grid(2, 2)
    plan = tg.ConvolutionPlan.from_grid_batch(2, 2, grid, target)
    cin, cout = 16, 24
    x = torch.randn(grid.total_voxels, cin, device=device).to(dtype)
    w = (torch.randn(cout, cin, 2, 2, 2, device=device) / (8 * cin) ** 0.5).to(dtype)
    scale, shift, residual = epilogue_inputs(target.total_voxels, cout, device, dtype)
    kw = {"scale": scale, "shift": shift, "residual": residual, "relu": True} if parts == "all" \
        else {parts: True if parts == "relu" else {"scale": scale, "shift": shift, "residual": residual}[parts]}
    want = plan.execute(x.double(), w.double())
    want = want * kw["scale"].double() if "scale" in kw else want
    want = want + kw["shift"].double() if "shift" in kw else want
    want = want + kw["residual"].double() if "residual" in kw else want
    want = torch.relu(want) if kw.get("relu") else want
    with torch.no_grad():
        fused = plan.execute(x, w, **kw)
    xg = x.clone().requires_grad_()
    after = plan.execute(xg, w, **kw)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 4e-2}[dtype]
    for got in (fused, after):
        assert got.dtype == dtype and got.shape == want.shape
        assert (got.double() - want).abs().max().item() <= tol * want.abs().max().item()
    after.sum().backward()
    assert xg.grad is not None and xg.grad.isfinite().all()


def test_a_bad_epilogue_is_refused():
    grid = random_grid("cpu", sizes=(50,), spread=5)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x, w = torch.randn(grid.total_voxels, 8), torch.randn(4, 8, 3, 3, 3)
    with pytest.raises(ValueError, match=r"scale must be a float tensor \[4\]"):
        plan.execute(x, w, scale=torch.ones(5))
    with pytest.raises(ValueError, match=r"residual must be \[" + str(grid.total_voxels) + r", 4\]"):
        plan.execute(x, w, residual=torch.ones(grid.total_voxels, 5))
    with pytest.raises(ValueError, match="shift must be a float tensor"):
        plan.execute(x, w, shift=torch.ones(4, dtype=torch.int64))


@pytest.mark.parametrize("device", DEVICES)
def test_jagged_features_must_be_jagged_as_the_grids_voxels(device):
    """A JaggedTensor whose tensors split the rows otherwise than the grid splits its voxels
    (the same total) is refused, by execute (data and residual) and by pooling: its rows
    would be convolved as another grid's. The same offsets in another tensor are taken."""
    ijk = [torch.randint(0, 5, (20, 3), dtype=torch.int32) for _ in range(2)]
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk)).to(device)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    n, (a, b) = grid.total_voxels, grid.num_voxels.tolist()
    w = torch.randn(4, 3, 3, 3, 3, device=device)
    x = torch.randn(n, 3, device=device)
    shifted = tg.JaggedTensor([x[:a - 1], x[a - 1:]])
    with pytest.raises(ValueError, match=rf"data is jagged as \[0, {a - 1}, {n}\] but the source "
                                         rf"grid's voxels as \[0, {a}, {n}\] .*entry 1"):
        plan.execute(shifted, w)
    with pytest.raises(ValueError, match=r"data holds 1 tensors but the source grid has 2 grids"):
        plan.execute(tg.JaggedTensor([x]), w)
    good = tg.JaggedTensor.from_data_and_offsets(x, grid.voxel_offsets.clone())
    want = plan.execute(x, w)
    assert torch.equal(plan.execute(good, w).jdata, want)
    assert torch.equal(plan.execute(tg.JaggedTensor([x[:a], x[a:]]), w).jdata, want)
    residual = tg.JaggedTensor([torch.ones(a + 1, 4, device=device), torch.ones(b - 1, 4, device=device)])
    with pytest.raises(ValueError, match=r"residual is jagged as .* but the target grid's voxels"):
        plan.execute(good, w, residual=residual)
    with pytest.raises(ValueError, match=r"max_pool: data is jagged as .* but the grid's voxels"):
        grid.max_pool(2, shifted)
    with pytest.raises(ValueError, match=r"avg_pool: data is jagged as .* but the grid's voxels"):
        grid.avg_pool(2, shifted)
    back = plan.transpose()  # its source is this plan's target
    assert torch.equal(back.execute(good, w).jdata, back.execute(x, w))
    with pytest.raises(ValueError, match=r"data is jagged as .* but the source grid's voxels"):
        back.execute(shifted, w)


def test_a_unet_in_eval_mode_folds_its_batchnorms_into_the_convolutions():
    """SparseUNet in eval mode without autograd runs conv + BatchNorm + ReLU (+ residual) as
    one convolution with an epilogue; with autograd, as separate ops: the same output."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    grid = random_grid(device, sizes=(400, 100), spread=10)
    net = tg.nn.SparseUNet(3, 5, channels=(8, 16, 24)).to(device).double()
    for m in net.modules():  # statistics that are not the identity
        if isinstance(m, tg.nn.BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    net.eval()
    feats = tg.JaggedTensor.from_data_and_offsets(
        torch.randn(grid.total_voxels, 3, dtype=torch.float64, device=device), grid.voxel_offsets)
    with torch.no_grad():
        fused = net(feats, grid).jdata
    unfused = net(feats, grid).jdata  # autograd on: the epilogue by torch ops
    assert torch.allclose(fused, unfused.detach(), rtol=1e-10, atol=1e-10)
    # The folded statistics are kept between calls, and made again when they change: in place,
    # or by a training step (whose running-statistics update need not advance their version
    # counters).
    with torch.no_grad():
        net.stem.norm.running_mean.add_(0.25)
        changed = net(feats, grid).jdata
    assert not torch.allclose(changed, fused)
    assert torch.allclose(changed, net(feats, grid).jdata.detach(), rtol=1e-10, atol=1e-10)
    net.train()
    net(feats, grid).jdata.sum().backward()  # updates every BatchNorm's running statistics
    net.eval()
    with torch.no_grad():
        after_training = net(feats, grid).jdata
    assert not torch.allclose(after_training, changed)
    assert torch.allclose(after_training, net(feats, grid).jdata.detach(), rtol=1e-10, atol=1e-10)


@pytest.fixture
def conv_kernel():
    """Sets the sparse_conv kernel choice (auto, mma or simt) for the test; the previous
    request after it."""
    previous = kernel_choice.requested_kernel("sparse_conv")
    yield lambda value: kernel_choice.set_kernel_choice("sparse_conv", value)
    kernel_choice.set_kernel_choice("sparse_conv", previous)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("kernel", ["auto", "mma", "simt"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cout,k", [(64, 3), (128, 3), (48, 2)])
def test_every_gpu_kernel_applies_the_epilogue(conv_kernel, kernel, dtype, cout, k):
    """The Hopper kernels (auto on an H200, in-kernel on the float32 sums) and the WMMA and CUDA
    core ones (a pass after) against the float64 convolution with the epilogue by hand."""
    conv_kernel(kernel)
    grid = random_grid("cuda", sizes=(900, 0, 400), spread=9, far=True)
    s = 2 if k == 2 else 1
    target = grid.conv_grid(k, s) if s > 1 else grid
    plan = tg.ConvolutionPlan.from_grid_batch(k, s, grid, target)
    cin = 64
    x = torch.randn(grid.total_voxels, cin, device="cuda").to(dtype)
    w = (torch.randn(cout, cin, k, k, k, device="cuda") / (cin * k**3) ** 0.5).to(dtype)
    scale, shift, residual = epilogue_inputs(target.total_voxels, cout, "cuda", dtype)
    want = torch.relu(plan.execute(x.double(), w.double()) * scale.double() + shift.double()
                      + residual.double())
    with torch.no_grad():
        got = plan.execute(x, w, scale=scale, shift=shift, residual=residual, relu=True)
    tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2}[dtype]
    assert (got.double() - want).abs().max().item() <= tol * want.abs().max().item()


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("kernel", ["auto", "mma", "simt"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "cin,cout,k",
    [(64, 64, 3), (64, 128, 3), (72, 256, 3), (128, 64, 2), (32, 48, 1), (24, 32, 3), (16, 8, 3),
     (8, 16, 2)],
)
def test_every_gpu_kernel_against_float64(conv_kernel, kernel, dtype, cin, cout, k):
    """Each GPU kernel family on the same convolution, forward, input and weight gradients:
    `auto` is the Hopper (wgmma) kernels on an H200 (tiles of 64 and 128 channels, channels
    with a remainder, k 1/2/3; 8 to 32 channels gathered, which pack 8 to 2 taps into a K
    step, in the forward and in the input gradient), mma the WMMA tiles, simt the CUDA cores; float32 is asked for
    as TF32 (the WMMA tiles under auto and mma). Outputs and gradients are poisoned first (NaN
    where an element was not written)."""
    conv_kernel(kernel)
    grid = random_grid("cuda", sizes=(900, 0, 1, 400), spread=9, far=True)
    s = 2 if k == 2 else 1
    target = grid.conv_grid(k, s) if s > 1 else grid
    plan = tg.ConvolutionPlan.from_grid_batch(k, s, grid, target)
    assert plan.row_order.shape == (target.total_voxels,)
    x = torch.randn(grid.total_voxels, cin, device="cuda").to(dtype)
    w = (torch.randn(cout, cin, k, k, k, device="cuda") / (cin * k**3) ** 0.5).to(dtype)
    g = torch.randn(target.total_voxels, cout, device="cuda").to(dtype)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    want_x = plan.execute(xr, wr)
    want_x.backward(g.double())
    want_w = wr.grad.reshape(cout, cin, -1).permute(2, 1, 0)
    # The ops directly, into NaN-filled outputs: with the maps in row order (as the plan runs
    # them) and with the orders alone (the maps read through them).
    taps = w.reshape(cout, cin, -1).permute(2, 1, 0).contiguous()
    stream = torch.cuda.current_stream().cuda_stream
    tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 4e-3}[dtype]
    tf32 = dtype == torch.float32
    for ordered in (True, False):
        in_order = plan.map_in_row_order if ordered else None
        inverse_in_order = plan.inverse_map_in_row_order if ordered else None
        out = torch.full((target.total_voxels, cout), float("nan"), device="cuda", dtype=dtype)
        tg._C.sparse_conv_forward(plan.kernel_map, x, taps, out, False, stream, plan.row_order,
                                  in_order, tf32)
        grad_x = torch.full_like(x, float("nan"))
        tg._C.sparse_conv_forward(plan.inverse_map, g, taps, grad_x, True, stream,
                                  plan.inverse_row_order, inverse_in_order, tf32)
        grad_w = torch.full_like(taps, float("nan"))
        tg._C.sparse_conv_backward_weight(plan.kernel_map, x, g, grad_w, stream, plan.row_order,
                                          in_order, tf32)
        for a, b in ((out, want_x), (grad_x, xr.grad), (grad_w, want_w)):
            assert not a.isnan().any()
            assert (a.double() - b).abs().max().item() <= tol * b.abs().max().item()


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cin,cout", [(64, 64), (16, 8), (64, 128), (72, 256), (136, 72)])
def test_the_hopper_kernel_on_thousands_of_tiles_equals_the_wmma_tiles(conv_kernel, dtype, cin, cout):
    """~120k voxels (about a thousand tiles of 128 rows, several a CTA slot), rows sorted by
    their taps so that neighbouring tiles have different tap sets: the Hopper kernel's forward
    and input gradient equal the WMMA tiles' (an independent kernel) on the same inputs; a
    convolution onto a grid the source does not reach (every tile without taps) writes zeros."""
    gen = torch.Generator().manual_seed(0)
    box = torch.randint(0, 64, (160000, 3), dtype=torch.int32, generator=gen)
    far = torch.randint(0, 8, (3000, 3), dtype=torch.int32, generator=gen) + 10**6
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.cat([box, far])])).to("cuda")
    assert grid.total_voxels > 3 * (2 * 132) * 128  # three tiles a CTA slot or more on an H200
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x = (torch.randn(grid.total_voxels, cin, generator=gen) * 0.5).to("cuda", dtype)
    w = (torch.randn(cout, cin, 3, 3, 3, generator=gen) / (27 * cin) ** 0.5).to("cuda", dtype)
    g = torch.randn(grid.total_voxels, cout, generator=gen).to("cuda", dtype)
    results = {}
    for kernel in ("auto", "mma"):
        conv_kernel(kernel)
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = plan.execute(xr, wr)
        out.backward(g)
        results[kernel] = (out.float(), xr.grad.float())
    tol = {torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    for a, b in zip(results["auto"], results["mma"]):
        assert not a.isnan().any()
        assert (a - b).abs().max().item() <= tol * b.abs().max().item()
    conv_kernel("auto")
    elsewhere = tg.GridBatch.from_ijk(tg.JaggedTensor([box + 10**4])).to("cuda")
    apart = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, elsewhere)
    assert not (apart.kernel_map >= 0).any()
    out = apart.execute(x, w)
    assert out.shape == (elsewhere.total_voxels, cout) and not out.any()


@pytest.mark.gpu
@requires_cuda
def test_float32_follows_torchs_tf32_setting(monkeypatch):
    """float32 features multiply as TF32 on tensor cores when torch.backends.cudnn.allow_tf32
    (torch's own convolutions' switch) is on, exactly on CUDA cores when it is off: the first
    is within TF32's rounding of float64 and not equal to the exact result, the second within
    float32's, in all three products."""
    grid = random_grid("cuda", sizes=(600, 200), spread=8)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x = torch.randn(grid.total_voxels, 64, device="cuda")
    w = torch.randn(32, 64, 3, 3, 3, device="cuda") / 24
    g = torch.randn(grid.total_voxels, 32, device="cuda")
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    want_out = plan.execute(xr, wr)
    want_out.backward(g.double())
    want = (want_out, xr.grad, wr.grad)
    results = {}
    for allow in (False, True):
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", allow)
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = plan.execute(xl, wl)
        out.backward(g)
        results[allow] = (out, xl.grad, wl.grad)
    for allow, tol in ((False, 1e-5), (True, 4e-3)):
        for a, b in zip(results[allow], want):
            assert (a.double() - b).abs().max().item() <= tol * b.abs().max().item()
    for exact, tf32 in zip(results[False], results[True]):
        assert not torch.equal(exact, tf32)  # TF32 rounding shows: the tensor cores ran


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel_size,stride", [(2, 2), (3, 2), (3, 1)])
def test_a_plan_transposed_equals_the_transposed_plan_built_anew(device, kernel_size, stride):
    """plan.transpose() (the way back up a U-Net, from the down plan's maps) has the maps and
    results of from_grid_batch_transposed between the same grids, the other way, and for a
    strided plan its GPU row orders too (a submanifold plan shares one order between its map
    and its inverse, a freshly built transposed plan sorts each: speed only)."""
    fine = random_grid(device, sizes=(300, 0, 1, 120), spread=7, far=True)
    coarse = fine.conv_grid(kernel_size, stride) if stride > 1 else fine
    down = tg.ConvolutionPlan.from_grid_batch(kernel_size, stride, fine, coarse)
    up = down.transpose()
    built = tg.ConvolutionPlan.from_grid_batch_transposed(kernel_size, stride, coarse, fine)
    assert up.transposed and up.source_grid is coarse and up.target_grid is fine
    names = ["kernel_map", "inverse_map"]
    if stride > 1:
        names += ["row_order", "inverse_row_order", "map_in_row_order", "inverse_map_in_row_order"]
    for name in names:
        assert torch.equal(getattr(up, name), getattr(built, name)), name
    x = torch.randn(coarse.total_voxels, 3, dtype=torch.float64, device=device)
    w = torch.randn(4, 3, kernel_size, kernel_size, kernel_size, dtype=torch.float64, device=device)
    torch.testing.assert_close(up.execute(x, w), built.execute(x, w), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_map_row_order_sorts_rows_by_their_taps(device):
    grid = random_grid(device, sizes=(700, 0, 1, 300), spread=8, far=True)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    order = torch.from_dlpack(tg._C.kernel_map_row_order(plan.kernel_map)).long().cpu()
    n = grid.total_voxels
    assert torch.equal(order.sort().values, torch.arange(n))
    bits = (plan.kernel_map.cpu() >= 0).long() << torch.arange(27).unsqueeze(1)
    keys = bits.sum(0)[order]
    assert bool((keys[1:] >= keys[:-1]).all())
    same = keys[1:] == keys[:-1]
    assert bool((order[1:][same] > order[:-1][same]).all())  # stable
    if device == "cuda":
        assert torch.equal(plan.row_order.long().cpu(), order)
    else:
        assert plan.row_order.numel() == 0  # the CPU reference takes rows in order


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("stride", [1, 2])
def test_kernel_map_in_row_order_is_the_maps_columns_in_that_order(device, stride):
    """On the GPU the plan keeps both maps in their row orders (the submanifold one's inverse
    by reversing the taps); the op itself on both devices."""
    grid = random_grid(device, sizes=(600, 0, 1, 250), spread=8, far=True)
    plan = tg.ConvolutionPlan.from_grid_batch(3, stride, grid, grid if stride == 1 else None)
    for m in (plan.kernel_map, plan.inverse_map):
        order = torch.from_dlpack(tg._C.kernel_map_row_order(m))
        got = torch.from_dlpack(tg._C.kernel_map_in_row_order(m, order))
        assert got.dtype == torch.int32
        assert torch.equal(got.cpu(), m.cpu()[:, order.long().cpu()])
    if device == "cuda":
        assert torch.equal(plan.map_in_row_order, plan.kernel_map[:, plan.row_order.long()])
        assert torch.equal(plan.inverse_map_in_row_order,
                           plan.inverse_map[:, plan.inverse_row_order.long()])
    else:
        assert plan.map_in_row_order.numel() == plan.inverse_map_in_row_order.numel() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kernel_size, stride, transposed",
    [(3, 1, False), (2, 1, False), (5, 1, False), ((3, 1, 5), 1, False), (3, 2, False),
     (2, 2, True)],
)
def test_kernel_map_with_row_order_is_the_three_ops_in_one(device, kernel_size, stride, transposed):
    """The plan's map, row order and map in that order from one call are those of the three ops.
    On the GPU it builds the sort keys with the map where the leaf kernel applies (stride 1),
    32-bit up to 32 taps, 64-bit beyond (5x5x5: taps past the 64th), and writes the ordered
    map's absent entries from the keys; a batch with an empty grid and grids 10^8 voxels apart,
    and one at the edges of int32, where neighbour leaves fall outside."""
    low, high = -(2**31), 2**31 - 1
    edge = torch.tensor([[low, 0, high], [low + 1, 0, high], [high, low, 5], [high - 1, low, 5],
                         [high, high, high], [0, 0, 0]], dtype=torch.int32)
    grids = [random_grid(device, sizes=(700, 0, 1, 300), spread=8, far=True),
             tg.GridBatch.from_ijk(tg.JaggedTensor([edge])).to(device)]
    for grid in grids[: 1 if stride > 1 else 2]:  # a strided output would leave int32
        if stride == 1:
            target = grid
        elif transposed:
            target = grid.conv_transpose_grid(kernel_size, stride)
        else:
            target = grid.conv_grid(kernel_size, stride)
        k = list(kernel_size) if isinstance(kernel_size, tuple) else [kernel_size] * 3
        args = (grid._impl, target._impl, k, [stride] * 3, transposed)
        m, order, ordered = (torch.from_dlpack(t) for t in tg._C.kernel_map_with_row_order(*args))
        want = torch.from_dlpack(tg._C.kernel_map(*args))
        assert torch.equal(m, want)
        assert torch.equal(order, torch.from_dlpack(tg._C.kernel_map_row_order(want)))
        assert torch.equal(ordered, want[:, order.long()])
        if device == "cuda":  # and the CPU reference's bytes
            cpu_args = (grid.to("cpu")._impl, target.to("cpu")._impl, *args[2:])
            cpu = [torch.from_dlpack(t) for t in tg._C.kernel_map_with_row_order(*cpu_args)]
            for got, want in zip((m, order, ordered), cpu):
                assert torch.equal(got.cpu(), want)


def test_a_map_in_row_order_that_is_not_one_is_refused():
    grid = random_grid("cpu", sizes=(40,), spread=4)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    n = grid.total_voxels
    x, w, out = torch.randn(n, 4), torch.randn(27, 4, 5), torch.empty(n, 5)
    order = torch.from_dlpack(tg._C.kernel_map_row_order(plan.kernel_map))
    good = torch.from_dlpack(tg._C.kernel_map_in_row_order(plan.kernel_map, order))
    tg._C.sparse_conv_forward(plan.kernel_map, x, w, out, False, 0, order, good)
    assert torch.equal(out, plan.execute(x, w.permute(2, 1, 0).reshape(5, 4, 3, 3, 3)))
    with pytest.raises(ValueError, match="without the row_order it follows"):
        tg._C.sparse_conv_forward(plan.kernel_map, x, w, out, False, 0, None, good)
    with pytest.raises(ValueError, match=r"map_in_row_order must have shape"):
        tg._C.sparse_conv_forward(plan.kernel_map, x, w, out, False, 0, order, good[:, 1:])
    bad = plan.kernel_map.clone()  # the map itself, not in the order (a real order moves rows)
    assert not torch.equal(bad, good)
    with pytest.raises(ValueError, match="is not the map in row_order"):
        tg._C.sparse_conv_backward_weight(plan.kernel_map, x, torch.randn(n, 5), torch.empty(27, 4, 5),
                                          0, order, bad)
    with pytest.raises(ValueError, match="row_order must be given"):
        tg._C.kernel_map_in_row_order(plan.kernel_map, order[:0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel_size", [3, (3, 1, 5), 1])
def test_a_submanifold_plans_inverse_is_its_map_with_the_taps_reversed(device, kernel_size):
    """The plan takes that shortcut for a submanifold convolution with an odd stencil (and the
    map's row order for the inverse's): it must equal the scattered inverse."""
    grid = random_grid(device, sizes=(500, 0, 1, 200), spread=8, far=True)
    plan = tg.ConvolutionPlan.from_grid_batch(kernel_size, 1, grid, grid)
    scattered = torch.from_dlpack(tg._C.invert_kernel_map(plan.kernel_map, grid.total_voxels))
    assert torch.equal(plan.inverse_map, scattered)
    if device == "cuda":
        assert plan.inverse_row_order is plan.row_order
    strided = tg.ConvolutionPlan.from_grid_batch(kernel_size, 2, grid)
    assert torch.equal(strided.inverse_map, torch.from_dlpack(
        tg._C.invert_kernel_map(strided.kernel_map, grid.total_voxels)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_1x1_submanifold_convolution_is_a_gemm(device, dtype):
    """kernel 1, stride 1 onto the same grid runs tg.matmul: output and both gradients against
    float64; channels not multiples of 8 keep the convolution kernels."""
    grid = random_grid(device, sizes=(400, 0, 1, 100), spread=8)
    plan = tg.ConvolutionPlan.from_grid_batch(1, 1, grid, grid)
    assert plan.dense and not tg.ConvolutionPlan.from_grid_batch(1, 2, grid).dense
    for cin, cout in ((32, 48), (12, 20)):
        x = torch.randn(grid.total_voxels, cin, device=device).to(dtype)
        w = (torch.randn(cout, cin, 1, 1, 1, device=device) / cin**0.5).to(dtype)
        g = torch.randn(grid.total_voxels, cout, device=device).to(dtype)
        xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
        (xr @ wr.reshape(cout, cin).t()).backward(g.double())
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = plan.execute(xl, wl)
        out.backward(g)
        want = x.double() @ w.double().reshape(cout, cin).t()
        tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2}[dtype]
        for a, b in ((out, want), (xl.grad, xr.grad), (wl.grad, wr.grad)):
            assert a.dtype == dtype and a.shape == b.shape
            assert (a.double() - b).abs().max().item() <= tol * b.abs().max().item()


def test_a_row_order_that_is_not_a_permutation_is_refused():
    grid = random_grid("cpu", sizes=(30,), spread=4)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x = torch.randn(grid.total_voxels, 4)
    w = torch.randn(27, 4, 5)
    out = torch.empty(grid.total_voxels, 5)
    bad = torch.zeros(grid.total_voxels, dtype=torch.int32)
    with pytest.raises(ValueError, match="row_order must be a permutation"):
        tg._C.sparse_conv_forward(plan.kernel_map, x, w, out, False, 0, bad)
    with pytest.raises(ValueError, match=r"row_order must have shape"):
        tg._C.sparse_conv_forward(plan.kernel_map, x, w, out, False, 0, bad[1:])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_gradient_is_deterministic(device, dtype):
    grid = random_grid(device, sizes=(2000,), spread=12)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x = torch.randn(grid.total_voxels, 32, device=device, dtype=dtype)
    w = torch.randn(32, 32, 3, 3, 3, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(grid.total_voxels, 32, device=device, dtype=dtype)
    grads = []
    for _ in range(2):
        w.grad = None
        plan.execute(x, w).backward(g)
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_maps_and_grids_on_the_gpu_equal_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    grid = random_grid("cpu", sizes=(500, 0, 1, 300), spread=20, far=True)
    gpu = grid.cuda()
    # Stride 1 takes the GPU's leaf-by-leaf map (kernels up to 17 wide), the others its
    # thread-an-output one; kernel size = stride the GPU's one-parent-an-input conv_grid.
    for k, s, t in (((3, 3, 3), (1, 1, 1), False), ((2, 4, 3), (1, 1, 1), False),
                    ((2, 2, 2), (2, 2, 2), False), ((3, 3, 3), (2, 2, 2), True),
                    ((4, 4, 4), (4, 4, 4), False), ((4, 2, 3), (4, 2, 3), False),
                    ((4, 4, 4), (2, 2, 2), True)):
        derive = "conv_transpose_grid" if t else "conv_grid"
        a, b = getattr(grid, derive)(k, s), getattr(gpu, derive)(k, s)
        assert torch.equal(a.ijk.jdata, b.ijk.jdata.cpu())
        build = tg.ConvolutionPlan.from_grid_batch_transposed if t else tg.ConvolutionPlan.from_grid_batch
        pa, pb = build(k, s, grid, a), build(k, s, gpu, b)
        assert torch.equal(pa.kernel_map, pb.kernel_map.cpu())
        assert torch.equal(pa.inverse_map, pb.inverse_map.cpu())
    for k in (1, 3, 5, (7, 3, 17)):  # submanifold
        pa = tg.ConvolutionPlan.from_grid_batch(k, 1, grid, grid)
        pb = tg.ConvolutionPlan.from_grid_batch(k, 1, gpu, gpu)
        assert torch.equal(pa.kernel_map, pb.kernel_map.cpu())


test_maps_and_grids_on_the_gpu_equal_the_cpu = pytest.mark.gpu(requires_cuda(test_maps_and_grids_on_the_gpu_equal_the_cpu))


@pytest.mark.parametrize("device", DEVICES)
def test_pooling_matches_coarsen_features(device):
    grid = random_grid(device, sizes=(200, 30), spread=10)
    x = torch.randn(grid.total_voxels, 6, dtype=torch.float64, device=device)
    coarse = grid.coarsened_grid(2)
    for reduce, pool in (("amax", grid.max_pool), ("mean", grid.avg_pool)):
        got, got_grid = pool(2, x)
        assert torch.equal(got_grid.ijk.jdata.cpu(), coarse.ijk.jdata.cpu())
        want = grid.coarsen_features(coarse, x, 2, reduce)
        torch.testing.assert_close(got.jdata, want)


def _pool_reference(plan, x, reduce):
    """float64 pooling by gathering every tap (the map's definition)."""
    present = (plan.kernel_map >= 0).cpu()
    g = x.double().cpu()[plan.kernel_map.clamp(min=0).long().cpu()]  # [taps, N_out, C]
    if reduce == "max":
        out = g.masked_fill(~present[..., None], float("-inf")).amax(0)
    else:
        out = (g * present[..., None]).sum(0) / present.sum(0).clamp(min=1)[:, None]
    return out.masked_fill(~present.any(0)[:, None], 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_pooling_ops_against_float64_with_overlapping_windows(device, dtype):
    """Windows of 3 every 2 voxels overlap (an input in several windows). Forward against the
    gathered reference; the gradients by gradcheck in float64, and in other dtypes against
    float64 (max: the gradient lands on each window's maximum)."""
    grid = random_grid(device, sizes=(300, 0, 1, 40), spread=7)
    x = torch.randn(grid.total_voxels, 5, device=device).to(dtype)
    for reduce, pool in (("max", grid.max_pool), ("avg", grid.avg_pool)):
        got, coarse = pool(3, x, stride=2)
        plan = tg.ConvolutionPlan((3, 3, 3), (2, 2, 2), grid, coarse, False, _pooling=True)
        want = _pool_reference(plan, x, reduce)
        tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1e-2}[dtype]
        assert (got.jdata.double().cpu() - want).abs().max().item() <= tol
        xr = x.double().requires_grad_()
        if dtype == torch.float64:
            assert torch.autograd.gradcheck(lambda v: pool(3, v, stride=2)[0].jdata, (xr,))
        else:
            g = torch.randn(coarse.total_voxels, 5, device=device)
            pool(3, xr, stride=2)[0].jdata.backward(g.double())
            xl = x.clone().requires_grad_()
            pool(3, xl, stride=2)[0].jdata.backward(g.to(dtype))
            scale = xr.grad.abs().max().item()
            assert (xl.grad.double() - xr.grad).abs().max().item() <= 8 * tol * scale


@pytest.mark.gpu
@requires_cuda
def test_pooling_on_the_gpu_equals_the_cpu():
    grid = random_grid("cpu", sizes=(500, 1, 200), spread=9, far=True)
    x = torch.randn(grid.total_voxels, 3, 4, dtype=torch.float32)
    g = grid.cuda()
    for name, k in itertools.product(("max_pool", "avg_pool"), (2, 4)):
        a, ca = getattr(grid, name)(k, x)
        b, cb = getattr(g, name)(k, x.cuda())
        assert torch.equal(ca.ijk.jdata, cb.ijk.jdata.cpu())
        assert a.jdata.shape == (ca.total_voxels, 3, 4)
        torch.testing.assert_close(b.jdata.cpu(), a.jdata, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pooling_cuda_kernels_equal_the_cpu_ops(dtype):
    """The C++ pooling ops' CUDA kernels, called directly (GPU tensors do not take them in
    max_pool / avg_pool until this has passed on a GPU), against the CPU ops: forward, argmax
    and both gradients, over overlapping windows, into NaN-filled outputs."""
    grid = random_grid("cpu", sizes=(600, 0, 1, 200), spread=9, far=True)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 2, grid)
    gplan = tg.ConvolutionPlan.from_grid_batch(3, 2, grid.cuda())
    n_out, c = plan.target_grid.total_voxels, 6
    x = torch.randn(grid.total_voxels, c).to(dtype)
    dy = torch.randn(n_out, c).to(dtype)
    results = {}
    for dev, p in (("cpu", plan), ("cuda", gplan)):
        s = 0 if dev == "cpu" else torch.cuda.current_stream().cuda_stream
        xd, dyd = x.to(dev), dy.to(dev)
        out = torch.full((n_out, c), float("nan"), dtype=dtype, device=dev)
        argmax = torch.full((n_out, c), -7, dtype=torch.int32, device=dev)
        tg._C.max_pool_forward(p.kernel_map, xd, out, argmax, s)
        dmax = torch.full_like(xd, float("nan"))
        tg._C.max_pool_backward(p.inverse_map, argmax, dyd, dmax, s)
        avg = torch.full((n_out, c), float("nan"), dtype=dtype, device=dev)
        tg._C.avg_pool_forward(p.kernel_map, xd, avg, s)
        davg = torch.full_like(xd, float("nan"))
        tg._C.avg_pool_backward(p.kernel_map, p.inverse_map, dyd, davg, s)
        results[dev] = [t.cpu() for t in (out, argmax, dmax, avg, davg)]
    cpu, gpu = results["cpu"], results["cuda"]
    assert torch.equal(cpu[0], gpu[0]) and torch.equal(cpu[1], gpu[1])  # maxima are exact
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    for a, b in zip(cpu[2:], gpu[2:]):
        assert not b.isnan().any()
        torch.testing.assert_close(b.float(), a.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_are_refused_with_what_was_expected(device):
    grid = random_grid(device, sizes=(20,), spread=4)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    x = torch.randn(grid.total_voxels, 4, device=device)
    with pytest.raises(ValueError, match=r"weights must be \[C_out, 4, 3, 3, 3\]"):
        plan.execute(x, torch.randn(5, 3, 3, 3, 3, device=device))
    with pytest.raises(ValueError, match="one row per source voxel"):
        plan.execute(x[1:], torch.randn(5, 4, 3, 3, 3, device=device))
    with pytest.raises(TypeError, match="must be float16, bfloat16, float32 or float64"):
        plan.execute(x.int(), torch.randn(5, 4, 3, 3, 3, device=device))
    with pytest.raises(ValueError, match="kernel_size must be an int or three ints"):
        tg.ConvolutionPlan.from_grid_batch(0, 1, grid, grid)
    with pytest.raises(ValueError, match="grids"):
        tg.ConvolutionPlan.from_grid_batch(3, 1, grid, tg.jcat([grid, grid]).to(device))
    if device == "cpu":
        bad = plan.kernel_map.clone()
        bad[0, 0] = grid.total_voxels
        with pytest.raises(ValueError, match="names input row"):
            torch.ops.tilegrid.sparse_conv(
                x, torch.randn(27, 4, 5), bad, plan.inverse_map, plan.row_order,
                plan.inverse_row_order, plan.map_in_row_order, plan.inverse_map_in_row_order, False,
            )


def test_modules_and_a_unet_train_on_the_cpu():
    """A small U-Net learns a per-voxel label that depends on the neighbourhood (whether the
    voxel's 3x3x3 neighbourhood is full): the loss must fall well below its start."""
    torch.manual_seed(0)
    c = torch.randint(0, 12, (900, 3), dtype=torch.int32)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([c]))
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    neighbours = (plan.kernel_map >= 0).sum(0)
    labels = (neighbours > neighbours.float().median()).long()
    feats = tg.JaggedTensor.from_data_and_offsets(torch.ones(grid.total_voxels, 1), grid.voxel_offsets)
    net = tg.nn.SparseUNet(1, 2, channels=(8, 16), blocks_per_level=1)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(net(feats, grid).jdata, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_torch_compile_traces_the_convolution():
    grid = random_grid("cpu", sizes=(60,), spread=5)
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    conv = tg.nn.SparseConv3d(4, 6, 3)
    x = torch.randn(grid.total_voxels, 4)
    compiled = torch.compile(lambda a: conv(a, plan), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), conv(x, plan))


def test_torch_compile_traces_a_whole_sparse_unet():
    """With its plans built ahead (net.plans(grid)), a SparseUNet's forward and backward trace
    as one graph (fullgraph=True) and give eager mode's results."""
    c = torch.randint(0, 10, (500, 3), dtype=torch.int32)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([c]))
    net = tg.nn.SparseUNet(2, 3, channels=(8, 16)).eval()
    net.plans(grid)
    offsets = grid.voxel_offsets

    def run(x):
        return net(tg.JaggedTensor._from_trusted(x, offsets), grid).jdata

    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    x = torch.randn(grid.total_voxels, 2, requires_grad=True)
    got = compiled(x)
    got.square().sum().backward()
    grad = x.grad.clone()
    x.grad = None
    want = run(x)
    want.square().sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, x.grad)


def test_torch_compile_traces_a_sparse_unet_in_eval_mode():
    """In eval mode the BatchNorms fold into the convolutions' epilogues; traced whole, with
    the plans built ahead, the network gives eager's output."""
    grid = random_grid("cpu", sizes=(150,), spread=6)
    net = tg.nn.SparseUNet(2, 3, channels=(8, 16)).double().eval()
    net.plans(grid)
    feats = tg.JaggedTensor.from_data_and_offsets(
        torch.randn(grid.total_voxels, 2, dtype=torch.float64), grid.voxel_offsets)
    compiled = torch.compile(lambda f: net(f, grid).jdata, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(feats), net(feats, grid).jdata)


def test_feature_modules_act_on_rows_and_keep_the_layout():
    j = tg.JaggedTensor([torch.randn(5, 4), torch.randn(3, 4)])
    pairs = [(tg.nn.BatchNorm(4), torch.nn.BatchNorm1d(4)), (tg.nn.LayerNorm(4), torch.nn.LayerNorm(4)),
             (tg.nn.ReLU(), torch.nn.ReLU()), (tg.nn.LeakyReLU(0.1), torch.nn.LeakyReLU(0.1)),
             (tg.nn.SiLU(), torch.nn.SiLU())]
    for ours, theirs in pairs:
        out = ours(j)
        assert isinstance(out, tg.JaggedTensor) and torch.equal(out.joffsets, j.joffsets)
        torch.testing.assert_close(out.jdata, theirs(j.jdata))
        torch.testing.assert_close(ours(j.jdata), theirs(j.jdata))  # a plain tensor stays one
