"""tg.linear_cross_entropy / tg.nn.LinearCrossEntropyLoss against F.cross_entropy(F.linear(...))
in float32 from the same bfloat16 operands: the loss and both gradients, with ignored rows,
both reductions, chunks with remainders, both dtypes; bad inputs. CPU always; CUDA where there
is a GPU."""

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from conftest import DEVICES


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction,chunk,dtype", [("mean", None, torch.bfloat16), ("sum", 24, torch.bfloat16),
                                                   ("mean", 13, torch.bfloat16), ("mean", 16, torch.float16)])
def test_matches_torch(device, reduction, chunk, dtype):
    T, d, V = 70, 64, 520
    x = torch.randn(T, d, dtype=dtype, device=device)
    w = (torch.randn(V, d) / 8).to(dtype).to(device)
    t = torch.randint(0, V, (T,), device=device)
    t[::7] = -100
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = tg.linear_cross_entropy(xa, wa, t, reduction=reduction, chunk_size=chunk)
    loss.backward(torch.tensor(1.5, device=device))
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    ref = F.cross_entropy(F.linear(xr, wr), t, reduction=reduction)
    ref.backward(torch.tensor(1.5, device=device))
    assert abs(loss.item() - ref.item()) <= 1e-2 * abs(ref.item())
    assert rel(xa.grad, xr.grad) < 2e-2 and rel(wa.grad, wr.grad) < 2e-2
    assert xa.grad[::7].abs().sum() == 0  # ignored rows get no gradient


def test_module_takes_ligers_argument_order_and_a_batch_dimension():
    x = torch.randn(2, 9, 32, dtype=torch.bfloat16)
    w = torch.randn(48, 32, dtype=torch.bfloat16) / 6
    t = torch.randint(0, 48, (2, 9))
    loss = tg.nn.LinearCrossEntropyLoss()(w, x, t)
    ref = F.cross_entropy(F.linear(x.float(), w.float()).reshape(-1, 48), t.reshape(-1))
    assert abs(loss.item() - ref.item()) <= 1e-2 * ref.item()


def test_bad_inputs():
    x, w = torch.randn(8, 32, dtype=torch.bfloat16), torch.randn(48, 32, dtype=torch.bfloat16)
    t = torch.randint(0, 48, (8,))
    with pytest.raises(NotImplementedError, match="label_smoothing"):
        tg.linear_cross_entropy(x, w, t, label_smoothing=0.1)
    with pytest.raises(ValueError, match="reduction"):
        tg.linear_cross_entropy(x, w, t, reduction="none")
    with pytest.raises(ValueError, match="targets must be in"):
        tg.linear_cross_entropy(x, w, torch.full((8,), 48))
    with pytest.raises(ValueError, match="multiples of 8"):
        tg.linear_cross_entropy(x, w[:47], t.clamp(max=40))
    with pytest.raises(ValueError, match="one entry a row"):
        tg.linear_cross_entropy(x, w, t[:5])
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        tg.linear_cross_entropy(x.float(), w, t)


def test_a_second_backward_through_the_same_graph_raises():
    """The gradients are formed in the forward and scaled in place by the backward: running it
    twice would scale them twice, so it refuses."""
    x = torch.randn(16, 32, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(48, 32, dtype=torch.bfloat16, requires_grad=True)
    loss = tg.linear_cross_entropy(x, w, torch.randint(0, 48, (16,)))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


def test_ignored_rows_may_hold_any_id_and_all_ignored_gives_nan():
    x, w = torch.randn(16, 32, dtype=torch.bfloat16), torch.randn(48, 32, dtype=torch.bfloat16)
    t = torch.randint(0, 48, (16,))
    t[3] = 48  # a pad id equal to the vocabulary size, ignored
    loss = tg.linear_cross_entropy(x, w, t, ignore_index=48)
    ref = F.cross_entropy(F.linear(x.float(), w.float()), t, ignore_index=48)
    assert abs(loss.item() - ref.item()) <= 1e-2 * ref.item()
    assert torch.isnan(tg.linear_cross_entropy(x, w, torch.full((16,), -100)))
    with torch.no_grad():  # no gradients asked: none formed, the loss the same
        assert abs(tg.linear_cross_entropy(x, w, t, ignore_index=48).item() - loss.item()) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_traces_it_without_reading_back(device):
    """fullgraph=True: the mean's divisor stays a tensor and the targets' range check is left
    to eager mode, so nothing is read back to the host inside the graph."""
    torch.manual_seed(0)
    x = torch.randn(40, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 256, (40,), device=device)
    t[3] = -100
    compiled = torch.compile(lambda x, w: tg.linear_cross_entropy(x, w, t), backend="aot_eager", fullgraph=True)
    loss = compiled(x, w)
    loss.backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    want = tg.linear_cross_entropy(x, w, t)
    want.backward()
    torch.testing.assert_close(loss, want, atol=0, rtol=0)
    torch.testing.assert_close(gx, x.grad, atol=0, rtol=0)
    torch.testing.assert_close(gw, w.grad, atol=0, rtol=0)
    all_ignored = torch.full_like(t, -100)
    assert torch.isnan(torch.compile(lambda x, w: tg.linear_cross_entropy(x, w, all_ignored),
                                     backend="aot_eager", fullgraph=True)(x, w))


@pytest.mark.parametrize("device", DEVICES)
def test_float16_keeps_the_gradient_of_words_no_token_targets(device):
    """p / T for a small probability is below float16's range: the gradient rows of words that
    no token targets consist of such terms alone. They must survive (float16 forms the gradient
    scaled by 2^15 and sums the products in float32)."""
    T, d, V = 2048, 64, 8192
    x = torch.randn(T, d, device=device).half()
    w = (torch.randn(V, d, device=device) / 8).half()
    t = torch.randint(0, V // 2, (T,), device=device)  # the upper half is never a target
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    tg.linear_cross_entropy(xa, wa, t).backward(torch.tensor(3.0, device=device))
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    F.cross_entropy(F.linear(xr, wr), t).backward(torch.tensor(3.0, device=device, dtype=torch.float64))
    assert xa.grad.dtype == wa.grad.dtype == torch.float16
    assert rel(wa.grad[V // 2:], wr.grad[V // 2:]) < 5e-3
    assert rel(xa.grad, xr.grad) < 5e-3
