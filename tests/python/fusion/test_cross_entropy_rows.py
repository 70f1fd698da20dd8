"""tilegrid's cross-entropy row kernel (tilegrid/fusion/cross_entropy.h), the step between the
two products of tg.linear_cross_entropy: the rows' losses and (softmax - one-hot) * scale
written over the logits, against float64 torch on fresh random logits. Every dtype, widths
that do and do not allow 16-byte vectors, a row stride wider than the row, ignored rows,
targets out of range; the loss alone; bad arguments. CPU always, CUDA where there is a GPU."""

import pytest
import torch

from conftest import DEVICES, poison_
from tilegrid import _C
from tilegrid._torch import current_stream

TOLERANCE = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def reference(logits, target, ignore_index, scale):
    x = logits.double()
    valid = target != ignore_index
    lse = torch.logsumexp(x, dim=1)
    safe = torch.where(valid & (target >= 0) & (target < x.shape[1]), target, 0)
    loss = torch.where(valid, lse - x.gather(1, safe[:, None])[:, 0], 0.0)
    grad = torch.softmax(x, dim=1)
    grad[torch.arange(x.shape[0]), safe] -= 1.0
    return loss, grad * scale * valid[:, None]


def run(logits, target, ignore_index, scale):
    loss = poison_(torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device))
    s = None if scale is None else torch.tensor([scale], dtype=torch.float32, device=logits.device)
    _C.cross_entropy_loss_and_grad(logits, target, ignore_index, loss, s, current_stream(logits))
    return loss


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows,vocab,pad", [(1, 1, 0), (7, 40, 0), (33, 1003, 0), (5, 4096, 8),
                                            (3, 50000, 0), (9, 520, 3)])
def test_loss_and_gradient_match_float64(device, dtype, rows, vocab, pad):
    wide = torch.randn(rows, vocab + pad, device=device) * 4
    logits = wide.to(dtype)[:, :vocab]  # a row stride of vocab + pad when pad > 0
    target = torch.randint(0, vocab, (rows,), device=device)
    target[::3] = -100
    start = logits.clone()
    loss = run(logits, target, -100, 0.25)
    want_loss, want_grad = reference(start, target, -100, 0.25)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(loss.double(), want_loss, atol=1e-4 * vocab ** 0.5, rtol=1e-5)
    torch.testing.assert_close(logits.double(), want_grad, atol=tol * 0.25, rtol=tol)
    assert (logits[::3] == 0).all()  # ignored rows: a zero gradient


@pytest.mark.parametrize("device", DEVICES)
def test_loss_alone_leaves_the_logits_and_out_of_range_targets_give_nan(device):
    logits = torch.randn(6, 136, device=device, dtype=torch.bfloat16)
    target = torch.tensor([0, 135, 136, -1, 7, 5], device=device)
    start = logits.clone()
    loss = run(logits, target, 5, None)
    assert torch.equal(logits, start)
    want, _ = reference(start, torch.where((target < 0) | (target >= 136), 5, target), 5, 1.0)
    assert torch.isnan(loss[2]) and torch.isnan(loss[3]) and loss[5] == 0
    torch.testing.assert_close(loss[[0, 1, 4]].double(), want[[0, 1, 4]], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_extreme_logits_stay_finite(device):
    logits = torch.full((2, 64), -3e4, device=device, dtype=torch.float32)
    logits[0, 3] = 3e4
    logits[1] = 0.0
    target = torch.tensor([3, 10], device=device)
    loss = run(logits, target, -100, 1.0)
    assert torch.isfinite(loss).all() and torch.isfinite(logits).all()
    # Row 0's target is its maximum by 6e4: a loss of exactly 0 (the GPU scales the target's
    # logit as it scales the row's, rounded alike).
    assert loss[0].item() == 0.0 and abs(loss[1].item() - torch.log(torch.tensor(64.0)).item()) < 1e-5


def test_bad_arguments_are_refused_before_any_kernel():
    logits = torch.randn(4, 16, dtype=torch.bfloat16)
    target, loss = torch.zeros(4, dtype=torch.int64), torch.empty(4)
    with pytest.raises(TypeError, match="target must be int64, got int32"):
        _C.cross_entropy_loss_and_grad(logits, target.int(), -100, loss, None, 0)
    with pytest.raises(ValueError, match=r"loss must have shape \[4\]"):
        _C.cross_entropy_loss_and_grad(logits, target, -100, torch.empty(3), None, 0)
    with pytest.raises(ValueError, match="grad_scale must hold one element"):
        _C.cross_entropy_loss_and_grad(logits, target, -100, loss, torch.ones(2), 0)
    with pytest.raises(ValueError, match="logits must have 2 dimensions"):
        _C.cross_entropy_loss_and_grad(logits[0], target, -100, loss, None, 0)
    with pytest.raises(ValueError, match="contiguous"):
        _C.cross_entropy_loss_and_grad(logits.t(), target[:1].expand(16).contiguous(), -100,
                                       torch.empty(16), None, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab", [37, 64])
def test_a_nan_logit_makes_its_row_nan(device, vocab):
    """Wherever the NaN sits (a thread's first element, among -inf ones, or among finite ones),
    its row's loss is NaN, as in torch, and the other rows are untouched by it."""
    logits = torch.randn(4, vocab, device=device)
    logits[0, 0] = float("nan")
    logits[1, :] = float("-inf")
    logits[1, 5] = float("nan")
    logits[2, vocab - 1] = float("nan")
    target = torch.tensor([1, 2, 3, 4], device=device)
    loss = run(logits.clone(), target, -100, 1.0)
    assert torch.isnan(loss[:3]).all() and torch.isfinite(loss[3])
