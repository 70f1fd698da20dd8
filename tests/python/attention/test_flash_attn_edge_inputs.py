"""Inputs at the edges of the attention API: empty tensors, head dims that disagree, windows
wider than any sequence, scales of every sign, NaN and infinity in the inputs, and arguments
of the wrong kind. Where FlashAttention or torch defines the behaviour, the test says which."""
import pytest
import torch

import tilegrid as tg


def grads_of(out, *inputs):
    dout = torch.randn_like(out)
    return torch.autograd.grad(out, inputs, dout), dout


# ---- empty tensors: correctly shaped outputs and gradients, as torch gives them ---------------


@pytest.mark.parametrize("shape_q,shape_k", [
    ((2, 0, 4, 64), (2, 0, 4, 64)),   # no queries and no keys
    ((0, 7, 4, 64), (0, 9, 4, 64)),   # no sequences
    ((2, 0, 4, 64), (2, 5, 2, 64)),   # no queries: dk and dv are zero
])
def test_empty_dense_batches_give_empty_outputs_and_gradients(shape_q, shape_k):
    q = torch.randn(shape_q, requires_grad=True)
    k, v = (torch.randn(shape_k, requires_grad=True) for _ in range(2))
    out, lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    dq, dk, dv = torch.autograd.grad(out.sum() + lse.sum(), (q, k, v))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert torch.equal(dk, torch.zeros_like(k)) and torch.equal(dv, torch.zeros_like(v))


def test_queries_without_keys_get_zero_output_and_minus_infinity():
    # torch's SDPA (math) gives zeros for a softmax over no keys; FlashAttention's lse is -inf.
    q = torch.randn(2, 5, 4, 64, requires_grad=True)
    k, v = (torch.randn(2, 0, 4, 64, requires_grad=True) for _ in range(2))
    out, lse = tg.flash_attn_func(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros_like(q)) and torch.isneginf(lse).all()
    (dq,) = torch.autograd.grad(out, (q,), torch.randn_like(out))
    assert torch.equal(dq, torch.zeros_like(q))


@pytest.mark.parametrize("lengths", [[], [0, 0, 0]])
def test_empty_varlen_batches_give_empty_outputs_and_gradients(lengths):
    cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q, k, v = (torch.randn(0, 4, 64, requires_grad=True) for _ in range(3))
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu, cu, 0, 0, return_lse=True)
    assert out.shape == (0, 4, 64) and lse.shape == (4, 0)
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v), allow_unused=True)
    assert dq.shape == dk.shape == dv.shape == (0, 4, 64)
