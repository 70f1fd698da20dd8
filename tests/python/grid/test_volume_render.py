"""tg.volume_render against a float64 torch reference of the same quadrature (cumulative
products; its gradients by autograd), gradcheck of every input, the transmittance early exit,
rays with no samples, bad inputs; CPU and, where there is one, the GPU (a warp a ray there: the
CPU's results to rounding, and the same early exits)."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES, requires_cuda


def reference(sigmas, rgbs, deltas, ts, offsets):
    out_rgb, out_depth, out_opacity, out_w = [], [], [], []
    for r in range(offsets.shape[0] - 1):
        s = slice(int(offsets[r]), int(offsets[r + 1]))
        alpha = 1 - torch.exp(-sigmas[s] * deltas[s])
        trans = torch.cumprod(torch.cat([alpha.new_ones(1), 1 - alpha[:-1]]), 0)
        w = trans * alpha
        out_w.append(w)
        out_rgb.append((w[:, None] * rgbs[s]).sum(0))
        out_depth.append((w * ts[s]).sum())
        out_opacity.append(w.sum())
    return torch.stack(out_rgb), torch.stack(out_depth), torch.stack(out_opacity), torch.cat(out_w)


def random_samples(counts, channels=5, dtype=torch.float64):
    offsets = torch.tensor([0] + torch.tensor(counts).cumsum(0).tolist(), dtype=torch.int64)
    S = int(offsets[-1])
    sigmas = torch.rand(S, dtype=dtype) * 3
    deltas = torch.rand(S, dtype=dtype) * 0.3 + 0.01
    ts = torch.cat([torch.cumsum(deltas[int(a):int(b)], 0) for a, b in zip(offsets[:-1], offsets[1:])]) \
        if S else torch.zeros(0, dtype=dtype)
    rgbs = torch.rand(S, channels, dtype=dtype)
    return sigmas, rgbs, deltas, ts, offsets


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels", [1, 3, 20])
def test_matches_the_float64_reference_forward_and_backward(device, channels):
    inputs = random_samples([7, 0, 30, 1, 64, 100], channels)  # whole 32-sample lanes' rows and not
    want = reference(*inputs)
    x = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
    rgb, depth, opacity, weights, count = tg.volume_render(*x)
    for got, exp in zip((rgb, depth, opacity, weights), want):
        torch.testing.assert_close(got.cpu(), exp, rtol=1e-12, atol=1e-12)
    assert count.cpu().tolist() == [7, 0, 30, 1, 64, 100]
    seeds = [torch.randn_like(t) for t in want]
    sum(((g.to(device) * o).sum() for g, o in zip(seeds, (rgb, depth, opacity, weights)))).backward()
    ref_in = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    sum((g * o).sum() for g, o in zip(seeds, reference(*ref_in))).backward()
    for i, name in enumerate(("sigmas", "rgbs", "deltas", "ts")):
        torch.testing.assert_close(x[i].grad.cpu(), ref_in[i].grad, rtol=1e-10, atol=1e-12, msg=name)


def test_gradcheck():
    sigmas, rgbs, deltas, ts, offsets = random_samples([4, 6, 3], channels=2)
    args = [t.requires_grad_() for t in (sigmas, rgbs, deltas, ts)]
    fn = lambda *a: tg.volume_render(*a, offsets)[:4]  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)


def test_compiles_as_one_graph_with_its_backward():
    """torch.compile(fullgraph=True) fails on a graph break; aot_eager traces the backward too.
    The compiled step gives eager's values and gradients, with a threshold and a second batch
    of rays of another count (no recompilation needed for correctness)."""
    def step(sigmas, rgbs, deltas, ts, offsets):
        rgb, depth, opacity, weights, _ = tg.volume_render(sigmas, rgbs, deltas, ts, offsets, 1e-3)
        return rgb.square().sum() + depth.sum() + opacity.sum() + weights.square().sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for counts in ([5, 0, 17], [9, 3, 3, 40]):
        inputs = random_samples(counts, channels=3)
        eager = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
        traced = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
        want, got = step(*eager), compiled(*traced)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        want.backward()
        got.backward()
        for a, b in zip(traced[:4], eager[:4]):
            torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_transmittance_early_exit(device):
    sigmas, rgbs, deltas, ts, offsets = random_samples([50, 50], channels=3)
    sigmas[:] = 20.0  # opaque: T falls by e^-(20 delta) a sample
    x = [t.to(device) for t in (sigmas, rgbs, deltas, ts, offsets)]
    rgb, depth, opacity, weights, count = tg.volume_render(*x, transmittance_threshold=1e-3)
    alpha = 1 - torch.exp(-sigmas * deltas)
    for r in range(2):
        s = slice(50 * r, 50 * r + 50)
        trans = torch.cumprod(torch.cat([alpha.new_ones(1), 1 - alpha[s][:-1]]), 0)
        n = int((trans >= 1e-3).sum())  # T decreases: the samples before it falls below
        assert int(count[r]) == n
        assert (weights[s][n:].cpu() == 0).all()
        torch.testing.assert_close(opacity[r].cpu(), (trans * alpha[s])[:n].sum())


def test_float32_sums_in_float64():
    inputs = random_samples([300, 2], channels=4, dtype=torch.float32)
    want = reference(*(t.double() if t.is_floating_point() else t for t in inputs))
    got = tg.volume_render(*inputs)
    assert got[0].dtype == torch.float32
    torch.testing.assert_close(got[0].double(), want[0], rtol=2e-7, atol=2e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_offsets_get_clear_errors(device):
    sigmas, rgbs, deltas, ts, offsets = (t.to(device) for t in random_samples([3, 4]))
    with pytest.raises(ValueError, match="offsets must run from 0"):
        tg.volume_render(sigmas, rgbs, deltas, ts, torch.tensor([0, 3, 6], device=device))
    with pytest.raises(ValueError, match="must not decrease, got 5 then 4 at ray 1"):
        tg.volume_render(sigmas, rgbs, deltas, ts, torch.tensor([0, 5, 4, 7], device=device))
    with pytest.raises(ValueError, match="offsets must run from 0"):
        tg.volume_render(sigmas, rgbs, deltas, ts, torch.tensor([1, 5, 7], device=device))


def test_bad_inputs_get_clear_errors():
    sigmas, rgbs, deltas, ts, offsets = random_samples([3, 4])
    with pytest.raises(TypeError, match="rgbs must be float64, got float32"):
        tg.volume_render(sigmas, rgbs.float(), deltas, ts, offsets)
    with pytest.raises(ValueError, match="shape"):
        tg.volume_render(sigmas, rgbs, deltas[:-1], ts, offsets)
    with pytest.raises(ValueError, match="transmittance_threshold"):
        tg.volume_render(sigmas, rgbs, deltas, ts, offsets, transmittance_threshold=2.0)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("counts, channels, density, threshold", [
    ([100] * 50 + [0, 3, 33], 7, 1.0, 1e-2),  # exits in the first window
    # Rays longer than the GPU's 128-sample windows (sums carried across them, the backward's
    # second pass), exits in the second and third windows, the compiled 4- and 3-channel
    # kernels, and rays that never exit.
    ([129, 257, 300, 500, 128, 1] * 6, 4, 0.02, 0.4),
    ([300, 260, 140] * 8, 3, 0.02, 0.3),
    ([300, 129] * 8, 1, 0.001, 0.0),
])
def test_gpu_results_are_the_cpu_ones(counts, channels, density, threshold):
    inputs = list(random_samples(counts, channels=channels, dtype=torch.float32))
    inputs[0] = inputs[0] * density
    x_cpu = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    x_gpu = [t.cuda().requires_grad_(t.is_floating_point()) for t in inputs]
    cpu = tg.volume_render(*x_cpu, transmittance_threshold=threshold)
    gpu = tg.volume_render(*x_gpu, transmittance_threshold=threshold)
    assert torch.equal(cpu[4], gpu[4].cpu())  # the same early exits
    lengths = torch.tensor(counts)
    if threshold > 0:  # some rays exit early, past the first window where that is the point
        exited = cpu[4] < lengths
        assert bool(exited.any())
        if density < 1:
            assert int(cpu[4][exited].max()) > 128, cpu[4][exited]
    for a, b in zip(cpu[:4], gpu[:4]):  # float64 sums in two orders, rounded to float32
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-7)
    seeds = [torch.randn_like(t) for t in cpu[:4]]
    sum((g * o).sum() for g, o in zip(seeds, cpu[:4])).backward()
    sum((g.cuda() * o).sum() for g, o in zip(seeds, gpu[:4])).backward()
    for name, a, b in zip(("sigmas", "rgbs", "deltas", "ts"), x_cpu, x_gpu):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.gpu
@requires_cuda
def test_gpu_infinite_density_stops_the_ray_as_on_the_cpu():
    """sigma = inf makes a sample opaque (alpha 1, all the remaining transmittance): the GPU's
    prefix sums must not turn it into inf - inf."""
    inputs = list(random_samples([300, 40, 200], channels=3, dtype=torch.float32))
    inputs[0] = inputs[0] * 0.01
    inputs[0][150] = float("inf")  # ray 0, in its second window
    inputs[0][300 + 5] = float("inf")  # ray 1
    cpu = tg.volume_render(*inputs)
    gpu = tg.volume_render(*(t.cuda() for t in inputs))
    for a, b in zip(cpu[:4], gpu[:4]):
        assert bool(torch.isfinite(a).all())
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-7)
    assert float(cpu[3][151:300].abs().max()) == 0.0  # nothing after the opaque sample
