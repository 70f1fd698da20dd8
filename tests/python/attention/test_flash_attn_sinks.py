"""Learnable attention sinks (FlashAttention 4's learnable_sink) and FlashAttention 4's window
form (None for an unbounded side), against the float64 reference with the sink as one more
score column: outputs, log-sum-exps and the gradients of q, k, v and the sink."""

import pytest
import torch

import tilegrid as tg
from attention_reference import reference
from conftest import DEVICES


def tolerance(dtype):
    return 2e-5 if dtype == torch.float32 else 3e-2


def leaf(*shape, device, dtype, scale=1.0):
    return (torch.randn(*shape, device=device, dtype=torch.float64) * scale).to(dtype).requires_grad_()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal, window, softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                     (False, (5, 3), 0.0), (True, (-1, -1), 20.0)])
def test_sinks_match_the_reference_forward_and_backward(device, causal, window, softcap):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(7)
    q = leaf(2, 19, 4, 64, device=device, dtype=dtype)
    k = leaf(2, 27, 2, 64, device=device, dtype=dtype)
    v = leaf(2, 27, 2, 64, device=device, dtype=dtype)
    sink = leaf(4, device=device, dtype=torch.float32, scale=2.0)
    out, lse = tg.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                  return_lse=True, learnable_sink=sink)
    grad_out = torch.randn_like(out)
    grad_lse = torch.randn_like(lse)
    got = torch.autograd.grad((out, lse), (q, k, v, sink), (grad_out, grad_lse))

    leaves = [t.detach().double().requires_grad_() for t in (q, k, v, sink)]
    q64, k64, v64, sink64 = leaves
    outs, lses = zip(*(reference(q64[b], k64[b], v64[b], causal=causal, window=window, softcap=softcap,
                                 sink=sink64) for b in range(2)))
    want, want_lse = torch.stack(outs), torch.stack(lses)
    want_grads = torch.autograd.grad((want, want_lse), leaves, (grad_out.double(), grad_lse.double()))
    tol = tolerance(dtype)
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double(), want_lse, rtol=tol, atol=tol)
    for name, g, w in zip("q k v sink".split(), got, want_grads):
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * max(1.0, w.abs().max().item()),
                                   msg=lambda m: f"gradient of {name}: {m}")


@pytest.mark.parametrize("device", DEVICES)
def test_sinks_in_varlen_batches_and_queries_that_see_no_key(device):
    """Sequence 1 is empty and sequence 2's window leaves its first queries without keys: they
    get out 0 and lse = their head's sink; a sink of -inf is no sink."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(3)
    cu_q = torch.tensor([0, 9, 9, 30], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 12, 12, 20], dtype=torch.int32, device=device)
    q = leaf(30, 4, 32, device=device, dtype=dtype)
    k = leaf(20, 4, 32, device=device, dtype=dtype)
    v = leaf(20, 4, 32, device=device, dtype=dtype)
    sink = torch.tensor([0.5, -1.0, 3.0, float("-inf")], device=device, requires_grad=True)
    out, lse = tg.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 21, 12, window_size=(0, 0), return_lse=True,
                                         learnable_sink=sink)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, sink), grad_out)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v, sink)]
    outs, lses = [], []
    for b in range(3):
        sq, sk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        o, l = reference(leaves[0][sq], leaves[1][sk], leaves[2][sk], window=(0, 0), sink=leaves[3])
        outs.append(o)
        lses.append(l)
    want, want_lse = torch.cat(outs), torch.cat(lses, dim=1)
    want_grads = torch.autograd.grad(want, leaves, grad_out.double())
    tol = tolerance(dtype)
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    lowest = torch.finfo(torch.float32).min  # a sink of -inf is clamped there
    torch.testing.assert_close(lse.double().clamp_min(lowest), want_lse.clamp_min(lowest), rtol=tol, atol=tol)
    # Queries 9..20 (sequence 2) before key 0's diagonal see nothing: window (0, 0) aligned
    # bottom-right gives query i key i + 8 - 21, so the first 13 see no key.
    assert torch.all(out[9:22] == 0)
    assert torch.equal(lse[:3, 9:22].cpu(), sink[:3, None].detach().float().cpu().expand(3, 13))
    for name, g, w in zip("q k v sink".split(), got, want_grads):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * max(1.0, w.abs().max().item()),
                                   msg=lambda m: f"gradient of {name}: {m}")


def test_fa4_window_form_equals_minus_one():
    q, k, v = (torch.randn(1, 13, 2, 32) for _ in range(3))
    for fa4, fa2 in [((None, None), (-1, -1)), (None, (-1, -1)), ((4, None), (4, -1)), ((None, 0), (-1, 0))]:
        assert torch.equal(tg.flash_attn_func(q, k, v, window_size=fa4), tg.flash_attn_func(q, k, v, window_size=fa2))


@pytest.mark.parametrize("sink, error, message", [
    ([0.0, 1.0], TypeError, "learnable_sink must be a tensor of shape \\(2,\\)"),
    (torch.zeros(3), ValueError, "shape \\(2,\\).*got torch.float32 of shape \\[3\\]"),
    (torch.zeros(2, dtype=torch.int64), ValueError, "floating tensor"),
    (torch.zeros(1, 2), ValueError, "of shape \\[1, 2\\]"),
])
def test_sinks_of_the_wrong_kind_get_clear_errors(sink, error, message):
    q, k, v = (torch.randn(1, 5, 2, 32) for _ in range(3))
    with pytest.raises(error, match=message):
        tg.flash_attn_func(q, k, v, learnable_sink=sink)
    with pytest.raises(error, match=message):
        tg.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 5], dtype=torch.int32),
                                  torch.tensor([0, 5], dtype=torch.int32), 5, 5, learnable_sink=sink)


@pytest.mark.parametrize("device", DEVICES)
def test_sinks_through_the_kv_cache_equal_flash_attn_func(device):
    """Appending the whole sequence to an empty cache and attending with a sink is
    flash_attn_func with the sink; a bad sink is refused before the cache is written."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q = torch.randn(2, 3, 4, 32, device=device, dtype=dtype)
    k, v = (torch.randn(2, 3, 2, 32, device=device, dtype=dtype) for _ in range(2))
    sink = torch.randn(4, device=device)
    k_cache, v_cache = (torch.zeros(2, 8, 2, 32, device=device, dtype=dtype) for _ in range(2))
    out, lse = tg.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=0, causal=True,
                                          return_softmax_lse=True, learnable_sink=sink)
    want, want_lse = tg.flash_attn_func(q, k, v, causal=True, return_lse=True, learnable_sink=sink)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(lse, want_lse)
    before = k_cache.clone()
    with pytest.raises(ValueError, match="learnable_sink"):
        tg.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=3, learnable_sink=sink[:2])
    assert torch.equal(k_cache, before)
