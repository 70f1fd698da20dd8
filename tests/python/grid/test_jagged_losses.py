"""jagged_binary_cross_entropy_with_logits against a float64 reference written from the formula,
tensor by tensor, for its value and its gradient; empty tensors included."""

import math

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def reference(logits: list[torch.Tensor], targets: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's mean of -(t log s(x) + (1 - t) log(1 - s(x))) in float64 (NaN when empty)."""
    out = []
    for x, t in zip(logits, targets):
        x, t = x.double(), t.double()
        loss = -(t * torch.nn.functional.logsigmoid(x) + (1 - t) * torch.nn.functional.logsigmoid(-x))
        out.append(loss.mean() if loss.numel() else torch.tensor(math.nan, dtype=torch.float64))
    return out


# torch's float32 formula, log(exp(-m) + exp(-x - m)) + ..., is accurate to a few float32 ulps
# of 1 in absolute terms (4e-7 seen), whatever the loss's size.
TOL = dict(rtol=2e-6, atol=2e-6)


def random_batch(device, sizes, width, bool_targets):
    shape = () if width is None else (width,)
    logits = [(4 * torch.randn(n, *shape)).to(device) for n in sizes]
    targets = [torch.rand(n, *shape) < 0.3 if bool_targets else torch.rand(n, *shape) for n in sizes]
    return logits, [t.to(device) for t in targets]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [None, 3])
@pytest.mark.parametrize("bool_targets", [True, False])
def test_means_per_tensor_then_over_tensors_match_the_float64_formula(device, width, bool_targets):
    sizes = [700, 0, 5, 1, 64]
    logits, targets = random_batch(device, sizes, width, bool_targets)
    x = tg.JaggedTensor(logits)
    t = tg.JaggedTensor(targets)
    want = reference([l.cpu() for l in logits], [t.cpu() for t in targets])
    per = tg.jagged_binary_cross_entropy_with_logits(x, t, reduction="per_tensor")
    assert per.shape == (len(sizes),) and per.dtype == torch.float32 and math.isnan(per[1])
    torch.testing.assert_close(per.cpu().double(), torch.stack(want), equal_nan=True, **TOL)
    mean = tg.jagged_binary_cross_entropy_with_logits(x, t.jdata)  # a plain tensor target too
    present = torch.stack([w for w, n in zip(want, sizes) if n])
    torch.testing.assert_close(mean.cpu().double(), present.mean(), **TOL)
    none = tg.jagged_binary_cross_entropy_with_logits(x, t, reduction="none")
    assert torch.equal(none.joffsets, x.joffsets) and none.jdata.shape == x.jdata.shape
    for got, tensor_mean in zip(none.unbind(), want):
        if got.numel():
            torch.testing.assert_close(got.cpu().double().mean(), tensor_mean, **TOL)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_matches_the_float64_formulas_and_ignores_empty_tensors(device):
    sizes = [300, 0, 7]
    logits, targets = random_batch(device, sizes, None, False)
    x = tg.JaggedTensor(logits)
    x.jdata.requires_grad_(True)
    tg.jagged_binary_cross_entropy_with_logits(x, tg.JaggedTensor(targets)).backward()
    ref = [l.detach().cpu().double().requires_grad_(True) for l in logits]
    means = reference(ref, [t.cpu() for t in targets])
    torch.stack([m for m, n in zip(means, sizes) if n]).mean().backward()
    want = torch.cat([r.grad if r.grad is not None else torch.zeros(0, dtype=torch.float64) for r in ref])
    assert torch.isfinite(x.jdata.grad).all()
    # Each element's gradient is (sigmoid(x) - t) * w, w = 1 / (2 * its tensor's size) (at most
    # 1/14 here); sigmoid(x) - t in float32 is good to ~2 ulps of 1 (2.4e-7) on either device,
    # so the absolute error is below 2.4e-7 / 14 = 1.7e-8.
    torch.testing.assert_close(x.jdata.grad.cpu().double(), want, rtol=1e-5, atol=2e-8)


def test_a_batch_without_elements_has_zero_loss():
    x = tg.JaggedTensor([torch.zeros(0), torch.zeros(0)])
    x.jdata.requires_grad_(True)
    loss = tg.jagged_binary_cross_entropy_with_logits(x, torch.zeros(0, dtype=torch.bool))
    loss.backward()
    assert loss.item() == 0.0 and x.jdata.grad.shape == (0,)


def test_arguments_are_checked():
    x = tg.JaggedTensor([torch.randn(4), torch.randn(2)])
    op = "jagged_binary_cross_entropy_with_logits"
    with pytest.raises(ValueError, match=rf"{op}: target is jagged unlike input"):
        tg.jagged_binary_cross_entropy_with_logits(x, tg.JaggedTensor([torch.rand(3), torch.rand(3)]))
    with pytest.raises(ValueError, match=rf"{op}: target must have input's shape \[6\], got \[6, 1\]"):
        tg.jagged_binary_cross_entropy_with_logits(x, torch.rand(6, 1))
    with pytest.raises(ValueError, match=rf"{op}: reduction must be one of"):
        tg.jagged_binary_cross_entropy_with_logits(x, torch.rand(6), reduction="sum")
    with pytest.raises(TypeError, match=rf"{op}: input must hold float logits, got torch.int64"):
        tg.jagged_binary_cross_entropy_with_logits(tg.JaggedTensor([torch.ones(2, dtype=torch.int64)]),
                                                   torch.rand(2))
