"""Paged KV in flash_attn_varlen_func (block_table, FlashAttention's form): the same outputs and
gradients as the call on the keys laid out packed, against the float64 reference, and clear
errors for tables that do not fit the pool, before anything is read."""

import pytest
import torch

import tilegrid as tg
from attention_reference import reference
from conftest import DEVICES


def paged_problem(lengths_k, page, device, dtype, num_blocks=None, seed=0):
    """A page pool holding each sequence's keys in shuffled pages, its block table, and the
    packed keys the table describes (built by a loop over cells)."""
    g = torch.Generator().manual_seed(seed)
    pages = [(n + page - 1) // page for n in lengths_k]
    num_blocks = num_blocks or sum(pages) + 3
    order = torch.randperm(num_blocks, generator=g)
    width = max(max(pages), 1)
    table = torch.zeros(len(lengths_k), width, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[used:used + n].to(torch.int32)
        used += n
    k_pool = torch.randn(num_blocks, page, 2, 32, generator=g).to(device=device, dtype=dtype)
    v_pool = torch.randn(num_blocks, page, 2, 32, generator=g).to(device=device, dtype=dtype)
    rows_k, rows_v = [], []
    for b, n in enumerate(lengths_k):
        for j in range(n):
            rows_k.append(k_pool[int(table[b, j // page]), j % page])
            rows_v.append(v_pool[int(table[b, j // page]), j % page])
    empty = torch.zeros(0, 2, 32, device=device, dtype=dtype)
    k = torch.stack(rows_k) if rows_k else empty
    v = torch.stack(rows_v) if rows_v else empty
    return k_pool, v_pool, table.to(device), k, v


def scatter_to_cells(rows, pool, table, lengths_k, page):
    """A zero pool with packed row r of sequence b added at the cell of its position j."""
    cells = torch.zeros_like(pool)
    r = 0
    table_h = table.cpu()
    for b, n in enumerate(lengths_k):
        for j in range(n):
            cells[int(table_h[b, j // page]), j % page] += rows[r]
            r += 1
    return cells


def offsets(lengths, device):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page, lengths_q, lengths_k", [
    (16, [3, 1, 7], [40, 1, 16]),
    (1, [2, 5], [3, 9]),
    (256, [4, 0, 1], [300, 0, 5]),
    (64, [1, 1, 1, 1], [64, 65, 0, 128]),
])
def test_paged_varlen_equals_the_packed_call_forward_and_backward(device, page, lengths_q, lengths_k):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    k_pool, v_pool, table, k, v = paged_problem(lengths_k, page, device, dtype)
    k_pool.requires_grad_(), v_pool.requires_grad_()
    q = torch.randn(sum(lengths_q), 4, 32, device=device, dtype=dtype, requires_grad=True)
    cu_q, cu_k = offsets(lengths_q, device), offsets(lengths_k, device)
    max_q, max_k = max(lengths_q), max(lengths_k)
    out = tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, cu_k, max(max_q, 1), max(max_k, 1), causal=True,
                                    block_table=table)
    k_leaf, v_leaf = k.detach().requires_grad_(), v.detach().requires_grad_()
    want = tg.flash_attn_varlen_func(q, k_leaf, v_leaf, cu_q, cu_k, max(max_q, 1), max(max_k, 1), causal=True)
    assert torch.equal(out, want)
    grad = torch.randn_like(out)
    dq, dk_pool, dv_pool = torch.autograd.grad(out, (q, k_pool, v_pool), grad)
    want_dq, dk, dv = torch.autograd.grad(want, (q, k_leaf, v_leaf), grad)
    torch.testing.assert_close(dq, want_dq)
    # The pools' gradients are the packed keys' and values' gradients at their cells, 0 elsewhere.
    torch.testing.assert_close(dk_pool, scatter_to_cells(dk, k_pool, table, lengths_k, page))
    torch.testing.assert_close(dv_pool, scatter_to_cells(dv, v_pool, table, lengths_k, page))
    # And against float64 attention, sequence by sequence.
    for b in range(len(lengths_q)):
        sq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        sk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        if sq.stop == sq.start:
            continue
        ref, _ = reference(q[sq].detach(), k[sk], v[sk], causal=True)
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(out[sq].double(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("change, error, message", [
    (lambda t: t.fill_(99), ValueError, "block_table\\[0, 0\\] = 99 is outside the pool \\[0, 8\\)"),
    (lambda t: t[:, :1], ValueError, "sequence 0 has 20 keys, 2 pages of 16, but block_table has 1 a row"),
    (lambda t: t.float(), TypeError, "block_table must be an int32 tensor"),
    (lambda t: t[:1], ValueError, "a row a sequence \\(2\\), got 1 rows"),
    (lambda t: t.tolist(), TypeError, "block_table must be an int32 tensor .*got list"),
])
def test_tables_that_do_not_fit_the_pool_get_clear_errors(change, error, message):
    k_pool, v_pool, table, _, _ = paged_problem([20, 3], 16, "cpu", torch.float32, num_blocks=8)
    q = torch.randn(4, 4, 32)
    cu_q, cu_k = offsets([2, 2], "cpu"), offsets([20, 3], "cpu")
    with pytest.raises(error, match=message):
        tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, cu_k, 2, 20, block_table=change(table.clone()))


def test_pools_and_offsets_of_the_wrong_form_get_clear_errors():
    k_pool, v_pool, table, k, _ = paged_problem([5], 4, "cpu", torch.float32)
    q = torch.randn(2, 4, 32)
    cu_q = offsets([2], "cpu")
    with pytest.raises(ValueError, match="k must be a page pool"):
        tg.flash_attn_varlen_func(q, k, v_pool, cu_q, offsets([5], "cpu"), 2, 5, block_table=table)
    with pytest.raises(ValueError, match="page_block_size must be at least 1"):
        tg.flash_attn_varlen_func(q, k_pool[:, :0], v_pool[:, :0], cu_q, offsets([5], "cpu"), 2, 5,
                                  block_table=table)
    with pytest.raises(ValueError, match="must start at 0 and not decrease"):
        tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, torch.tensor([1, 5], dtype=torch.int32), 2, 5,
                                  block_table=table)
    with pytest.raises(TypeError, match="cu_seqlens_k must be an int32"):
        tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, [0, 5], 2, 5, block_table=table)


def test_pages_outside_the_pool_are_named_under_another_default_device():
    """The host-side check of the pages builds its range on the CPU whatever the default
    device, so a bad page gets the error that names it, not torch's device-mismatch error.
    "meta" stands in for CUDA here."""
    k_pool, v_pool, table, _, _ = paged_problem([20, 3], 16, "cpu", torch.float32, num_blocks=8)
    q = torch.randn(4, 4, 32)
    cu_q, cu_k = offsets([2, 2], "cpu"), offsets([20, 3], "cpu")
    cache = torch.randn(2, 8, 2, 16)
    torch.set_default_device("meta")
    try:
        with pytest.raises(ValueError, match="block_table\\[0, 0\\] = 99 is outside the pool"):
            tg.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, cu_k, 2, 20, block_table=table.clone().fill_(99))
        with pytest.raises(ValueError, match="block_table.*9"):
            tg.flash_attn_with_kvcache(torch.randn(2, 1, 2, 16, device="cpu"), cache, cache, cache_seqlens=3,
                                       block_table=torch.tensor([[0], [9]], dtype=torch.int32, device="cpu"))
    finally:
        torch.set_default_device(None)
