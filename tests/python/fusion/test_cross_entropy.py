"""tg.cross_entropy / tg.nn.CrossEntropyLoss against F.cross_entropy in float64 from the same
logits: the loss and the logits' gradient for every reduction and dtype, ignored rows, widths
with and without 16-byte vectors, strided logits; the loss alone leaves the logits as they
were; torch.compile(fullgraph=True); bad inputs. CPU always, CUDA where there is a GPU."""

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from conftest import DEVICES

TOLERANCE = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def reference(logits, target, reduction, grad_out):
    x = logits.detach().double().requires_grad_()
    loss = F.cross_entropy(x, target, reduction=reduction)
    loss.backward(grad_out.double())
    return loss.detach(), x.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("vocab", [7, 1000, 4096])
def test_loss_and_gradient_match_torch(device, dtype, reduction, vocab):
    N = 37
    logits = (torch.randn(N, vocab, device=device) * 3).to(dtype).requires_grad_()
    target = torch.randint(0, vocab, (N,), device=device)
    target[::5] = -100
    grad_out = torch.rand(N if reduction == "none" else (), device=device) + 0.5
    loss = tg.cross_entropy(logits, target, reduction=reduction)
    assert loss.dtype == dtype and loss.shape == grad_out.shape
    loss.backward(grad_out.to(dtype))
    want, want_grad = reference(logits, target, reduction, grad_out.to(dtype).float())
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(loss.double(), want, rtol=tol, atol=tol)
    scale = want_grad.abs().max().item()
    torch.testing.assert_close(logits.grad.double(), want_grad, rtol=tol, atol=tol * scale)
    assert (logits.grad[::5] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("magnitude", [1e15, 1e16, 1e17, -1e17])
def test_huge_logits_keep_the_log_of_the_sum(device, dtype, magnitude):
    """Logits near 1e17 whose differences are of order 1: the loss and gradient depend on the
    differences only, as F.cross_entropy's (float64) do; forming max + log(sum) first would lose
    log(sum) in max's ulp (16 at 1e17 in float64, 2^33 in float32)."""
    N, vocab = 23, 8
    base = torch.full((N, 1), magnitude, dtype=torch.float64)
    logits = (base * (1 + torch.randn(N, vocab, dtype=torch.float64) * 1e-7)).to(dtype)
    logits[:3] = torch.tensor(magnitude, dtype=dtype)  # ties: the loss is log(vocab)
    logits = logits.to(device).requires_grad_()
    target = torch.randint(0, vocab, (N,), device=device)
    for reduction in ("none", "mean"):
        loss = tg.cross_entropy(logits, target, reduction=reduction)
        grad_out = torch.rand(loss.shape, device=device) + 0.5
        (g,) = torch.autograd.grad(loss, (logits,), grad_out.to(dtype))
        want, want_grad = reference(logits, target, reduction, grad_out.to(dtype).float())
        tol = TOLERANCE[dtype]  # the loss is returned in the logits' dtype
        torch.testing.assert_close(loss.double(), want, rtol=tol, atol=tol)
        torch.testing.assert_close(g.double(), want_grad, rtol=tol, atol=tol * want_grad.abs().max().item())
    rows = tg.cross_entropy(logits, target, reduction="none")
    ties = torch.full((3,), 8.0, dtype=torch.float64, device=device).log()
    torch.testing.assert_close(rows[:3].double(), ties, rtol=TOLERANCE[dtype], atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_logits_no_grad_and_the_module(device):
    wide = torch.randn(9, 80, device=device)
    logits = wide[:, :64]  # a row stride of 80
    target = torch.randint(0, 64, (9,), device=device)
    before = logits.clone()
    loss = tg.nn.CrossEntropyLoss(reduction="sum")(logits, target)
    assert torch.equal(logits, before)  # the loss alone writes nothing
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, reduction="sum"), rtol=1e-5, atol=1e-5)
    assert torch.isnan(tg.cross_entropy(logits, torch.full_like(target, -100)))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_traces_forward_and_backward(device):
    logits = torch.randn(16, 128, device=device, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 128, (16,), device=device)
    target[2] = -100
    compiled = torch.compile(lambda x: tg.cross_entropy(x, target), backend="aot_eager", fullgraph=True)
    loss = compiled(logits)
    loss.backward()
    got = logits.grad.clone()
    logits.grad = None
    want = tg.cross_entropy(logits, target)
    want.backward()
    torch.testing.assert_close(loss, want, atol=0, rtol=0)
    torch.testing.assert_close(got, logits.grad, atol=0, rtol=0)


def test_bad_inputs_and_a_second_backward():
    x, t = torch.randn(4, 8), torch.randint(0, 8, (4,))
    with pytest.raises(NotImplementedError, match="class weights"):
        tg.cross_entropy(x, t, weight=torch.ones(8))
    with pytest.raises(NotImplementedError, match="label_smoothing"):
        tg.cross_entropy(x, t, label_smoothing=0.1)
    with pytest.raises(ValueError, match="reduction must be one of"):
        tg.cross_entropy(x, t, reduction="batchmean")
    with pytest.raises(ValueError, match=r"logits \[N, C\]"):
        tg.cross_entropy(x[None], t[None])
    with pytest.raises(ValueError, match="class probabilities"):
        tg.cross_entropy(x, torch.softmax(x, 1))
    with pytest.raises(ValueError, match="targets must be in"):
        tg.cross_entropy(x, torch.full((4,), 8))
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        tg.cross_entropy(x.double(), t)
    # Arguments of the wrong kind: a TypeError naming them, not AttributeError (a list),
    # RuntimeError (torch's schema, for a float) or OverflowError (past int64).
    with pytest.raises(TypeError, match="cross_entropy: input must be a torch.Tensor, got list"):
        tg.cross_entropy(x.tolist(), t)
    with pytest.raises(TypeError, match="cross_entropy: target must be a torch.Tensor, got list"):
        tg.cross_entropy(x, t.tolist())
    for bad in (1.5, True, "x", None):
        with pytest.raises(TypeError, match="cross_entropy: ignore_index must be an int, got"):
            tg.cross_entropy(x, t, ignore_index=bad)
    with pytest.raises(ValueError, match=r"ignore_index must fit int64 \(the targets' type\), got 1180591620717411303424"):
        tg.cross_entropy(x, t, ignore_index=2**70)
    assert torch.equal(tg.cross_entropy(x, t, ignore_index=torch.tensor(3)),
                       tg.cross_entropy(x, t, ignore_index=3))
    with pytest.raises(TypeError, match="linear_cross_entropy: weight must be a torch.Tensor"):
        tg.linear_cross_entropy(x, None, t)
    with pytest.raises(TypeError, match="linear_cross_entropy: ignore_index must be an int"):
        tg.linear_cross_entropy(x, x, t, ignore_index=0.5)
    xg = x.clone().requires_grad_()
    loss = tg.cross_entropy(xg, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_float16_keeps_small_probabilities_in_the_gradient(device):
    """A probability over the row count is below float16's range at 2048 rows x 8192 classes:
    the gradient is formed in float32 and returned in float16 after the incoming scale (a
    GradScaler's 2^15 here) is applied."""
    N, C = 2048, 8192
    logits = (torch.randn(N, C, device=device) * 2).half().requires_grad_()
    target = torch.randint(0, C // 2, (N,), device=device)
    tg.cross_entropy(logits, target).backward(torch.tensor(32768.0, device=device, dtype=torch.float16))
    want = logits.detach().double().requires_grad_()
    F.cross_entropy(want, target).backward(torch.tensor(32768.0, device=device, dtype=torch.float64))
    assert logits.grad.dtype == torch.float16
    upper = (logits.grad[:, C // 2:].double() - want.grad[:, C // 2:]).norm() / want.grad[:, C // 2:].norm()
    assert upper.item() < 5e-3
