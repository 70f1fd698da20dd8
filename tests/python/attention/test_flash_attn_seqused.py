"""FlashAttention 3's seqused_q / seqused_k in flash_attn_varlen_func: the same as the call on
each sequence's used rows alone; unused query rows 0 with lse -inf and no gradient, unused
keys never attended to; the paged form with the key counts by seqused_k."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def offsets(lengths, device):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)


def used_slices(lengths, used):
    start = 0
    for n, u in zip(lengths, used):
        yield slice(start, start + u), slice(start + u, start + n)
        start += n


@pytest.mark.parametrize("device", DEVICES)
def test_seqused_equals_the_call_on_the_used_rows(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    lengths_q, lengths_k = [6, 4, 9], [10, 3, 12]
    used_q, used_k = [4, 0, 9], [7, 3, 1]
    q = torch.randn(sum(lengths_q), 4, 32, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(sum(lengths_k), 2, 32, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    # Poison the unused keys: were they read, the outputs would not be finite.
    with torch.no_grad():
        for _, unused in used_slices(lengths_k, used_k):
            k[unused] = float("nan")
    seqused_q = torch.tensor(used_q, dtype=torch.int32, device=device)
    seqused_k = torch.tensor(used_k, dtype=torch.int32, device=device)
    out, lse = tg.flash_attn_varlen_func(q, k, v, offsets(lengths_q, device), offsets(lengths_k, device), 9, 12,
                                         causal=True, return_lse=True, seqused_q=seqused_q, seqused_k=seqused_k)
    grad = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    rows_q = torch.cat([torch.arange(s.start, s.stop) for s, _ in used_slices(lengths_q, used_q)]).to(device)
    rows_k = torch.cat([torch.arange(s.start, s.stop) for s, _ in used_slices(lengths_k, used_k)]).to(device)
    q2, k2, v2 = (t.detach()[r].requires_grad_() for t, r in ((q, rows_q), (k, rows_k), (v, rows_k)))
    want, want_lse = tg.flash_attn_varlen_func(q2, k2, v2, offsets(used_q, device), offsets(used_k, device), 9, 7,
                                               causal=True, return_lse=True)
    want_dq, want_dk, want_dv = torch.autograd.grad(want, (q2, k2, v2), grad[rows_q])
    assert torch.equal(out[rows_q], want) and torch.equal(lse[:, rows_q], want_lse)
    for s, unused in used_slices(lengths_q, used_q):
        assert torch.all(out[unused] == 0) and torch.all(lse[:, unused] == float("-inf"))
        assert torch.all(dq[unused] == 0)
    assert torch.equal(dq[rows_q], want_dq)
    assert torch.equal(dk[rows_k], want_dk) and torch.equal(dv[rows_k], want_dv)
    for _, unused in used_slices(lengths_k, used_k):
        assert torch.all(dk[unused] == 0) and torch.all(dv[unused] == 0)


@pytest.mark.parametrize("device", DEVICES)
def test_paged_call_with_key_counts_by_seqused_k(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    k_pool, v_pool = (torch.randn(6, 4, 2, 32, device=device, dtype=dtype) for _ in range(2))
    table = torch.tensor([[5, 0, 3], [2, 1, 4]], dtype=torch.int32, device=device)
    q = torch.randn(4, 4, 32, device=device, dtype=dtype)
    cu_q = offsets([2, 2], device)
    counts = torch.tensor([9, 3], dtype=torch.int32, device=device)
    out = tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, None, 2, 9, block_table=table, seqused_k=counts)
    want = tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, offsets([9, 3], device), 2, 9, block_table=table)
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="not both"):
        tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, offsets([9, 3], device), 2, 9, block_table=table,
                                  seqused_k=counts)


@pytest.mark.parametrize("seqused, error, message", [
    ([1, 1], TypeError, "seqused_k must be an int32 tensor \\(2,\\), got list"),
    (torch.tensor([1, 1]), TypeError, "got torch.int64 of shape \\[2\\]"),
    (torch.tensor([1], dtype=torch.int32), TypeError, "of shape \\[1\\]"),
    (torch.tensor([6, 1], dtype=torch.int32), ValueError, "seqused_k\\[0\\] = 6 is outside \\[0, 5\\]"),
    (torch.tensor([1, -1], dtype=torch.int32), ValueError, "seqused_k\\[1\\] = -1"),
])
def test_seqused_of_the_wrong_kind_gets_clear_errors(seqused, error, message):
    q, k, v = (torch.randn(8, 2, 32) for _ in range(3))
    cu = offsets([5, 3], "cpu")
    with pytest.raises(error, match=message):
        tg.flash_attn_varlen_func(q, k, v, cu, cu, 5, 5, seqused_k=seqused)
