"""The Hopper attention backward (sm_90a: TMA, wgmma, dK/dV on chip, dQ summed in float32)
against the float64 reference by FlashAttention's criterion, gradients poisoned first: head
dims 64, 128 and 256 (its own kernel: 64-key tiles, each consumer warpgroup half the keys and
then half the head-dim columns), both dtypes, tiles cut by the sequence ends, causal masks with seqlen_q !=
seqlen_k, windows, softcap, GQA and MQA, variable lengths with empty sequences. Runs only on a
GPU of compute capability 9.0, where `auto` picks the kernel, deterministic=True included."""
import pytest
import torch

from tilegrid import _C
import tilegrid as tg

from test_flash_attn_backward import (GPU_DTYPES, assert_fa_criterion, gpu_test, poisoned_backward,
                                      reference_grads)


def hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


requires_hopper = pytest.mark.skipif(not hopper(), reason="needs a GPU of compute capability 9.0")

CASES = [
    # batch, sq, sk, hq, hk, d, causal, window, softcap
    (2, 1, 1, 2, 2, 64, False, (-1, -1), 0.0),
    (2, 300, 300, 4, 2, 64, True, (-1, -1), 0.0),     # several 128-key and 128-query tiles
    (2, 130, 200, 4, 2, 64, False, (33, 5), 0.0),     # window, tails in every tile
    (1, 1000, 1000, 8, 1, 64, True, (-1, -1), 3.0),   # MQA, softcap
    (2, 390, 257, 4, 4, 128, True, (-1, -1), 0.0),    # sq > sk: rows that see no key
    (2, 257, 390, 4, 2, 128, True, (-1, -1), 0.0),    # sq < sk
    (2, 256, 256, 2, 2, 128, False, (100, 20), 0.0),
    (1, 1024, 1024, 6, 2, 128, False, (-1, -1), 0.0),  # whole tiles only
    (1, 77, 500, 2, 2, 128, False, (-1, -1), 5.0),
    # One query and three keys (with one key, dQ is exactly 0: P = 1 and dP = D, and the
    # float32 rounding of dP against D leaves ~1e-6, over the criterion's 1e-6 floor).
    (2, 1, 3, 2, 2, 256, False, (-1, -1), 0.0),
    (2, 300, 300, 4, 2, 256, True, (-1, -1), 0.0),    # several 64-key and 64-query tiles
    (2, 390, 257, 4, 1, 256, True, (-1, -1), 0.0),    # MQA, sq > sk: rows that see no key
    (2, 130, 200, 4, 4, 256, False, (33, 5), 0.0),    # window, tails in every tile
    (1, 77, 500, 2, 2, 256, False, (-1, -1), 5.0),    # softcap
    (1, 512, 512, 2, 2, 256, False, (-1, -1), 0.0),   # whole tiles only
]


@requires_hopper
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=lambda t: str(t).removeprefix("torch."))
@pytest.mark.parametrize("batch,sq,sk,hq,hk,d,causal,window,softcap", CASES)
@gpu_test
def test_sm90_backward_meets_flash_attention_criterion(dtype, batch, sq, sk, hq, hk, d, causal,
                                                       window, softcap):
    torch.manual_seed(sq * 7 + sk + d)
    q = torch.randn(batch, sq, hq, d).to(dtype)
    k, v = (torch.randn(batch, sk, hk, d).to(dtype) for _ in range(2))
    dout = torch.randn(batch, sq, hq, d).to(dtype)
    kw = dict(causal=causal, window=window, softcap=softcap)
    cuda = [t.cuda() for t in (q, k, v, dout)]
    out, lse = tg.flash_attn_func(*cuda[:3], causal=causal, window_size=window, softcap=softcap,
                                  return_lse=True)
    got = poisoned_backward(cuda[3], *cuda[:3], out, lse, causal, window, softcap)
    torch.cuda.synchronize()
    assert _C._attention_last_kernel() == "sm90"
    exact = reference_grads(q, k, v, dout, **kw)
    plain = reference_grads(*cuda, dtype=dtype, **kw)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert got[i].dtype == dtype and not got[i].isnan().any(), name
        assert_fa_criterion(got[i].cpu(), plain[i + 1].cpu(), exact[i + 1], name)


@requires_hopper
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("deterministic", [False, True])
@gpu_test
def test_sm90_backward_varlen_with_empty_sequences(d, deterministic):
    """Through the C++ entry with gradients filled with NaN first: every row is written, rows
    of a sequence without queries or keys as zeros, with the dQ additions in any order or, under
    deterministic=True, in a fixed one."""
    lens_q, lens_k = [5, 0, 170, 1, 0, 33, 129], [9, 3, 170, 0, 0, 40, 300]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(lens_q), 4, d).bfloat16()
    k, v = (torch.randn(sum(lens_k), 2, d).bfloat16() for _ in range(2))
    dout = torch.randn(sum(lens_q), 4, d).bfloat16()
    qc, kc, vc, doutc = (t.cuda() for t in (q, k, v, dout))
    out, lse = tg.flash_attn_varlen_func(qc, kc, vc, cu_q.cuda(), cu_k.cuda(), max(lens_q),
                                         max(lens_k), causal=True, return_lse=True)
    grads = [torch.full_like(t, float("nan")) for t in (qc, kc, vc)]
    _C.flash_attn_varlen_backward(doutc, qc, kc, vc, out, lse, None, cu_q.cuda(), cu_k.cuda(),
                                  max(lens_q), max(lens_k), None, True, -1, -1, 0.0,
                                  deterministic, *grads, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert _C._attention_last_kernel() == ("sm90 deterministic" if deterministic else "sm90")
    dq, dk, dv = (t.cpu() for t in grads)
    for b in range(len(lens_q)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lens_q[b] == 0 or lens_k[b] == 0:
            assert torch.equal(dq[qs], torch.zeros_like(q[qs]))
            assert torch.equal(dk[ks], torch.zeros_like(k[ks]))
            assert torch.equal(dv[ks], torch.zeros_like(v[ks]))
            continue
        exact = reference_grads(q[None, qs], k[None, ks], v[None, ks], dout[None, qs], causal=True)
        plain = reference_grads(*(t[None].cuda() for t in (q[qs], k[ks], v[ks], dout[qs])),
                                dtype=torch.bfloat16, causal=True)
        for got, i, name in ((dq[qs], 1, "dq"), (dk[ks], 2, "dk"), (dv[ks], 3, "dv")):
            assert_fa_criterion(got[None], plain[i].cpu(), exact[i], f"{name} of sequence {b}")


DETERMINISTIC_SCRIPT = """
import os, sys, torch, tilegrid as tg
from tilegrid import _C
sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]  # this folder and conftest.py
from test_flash_attn_backward import poisoned_backward
torch.manual_seed(0)
results = []
for batch, sq, sk, hq, hk, d, causal, window in CASES:
    q = torch.randn(batch, sq, hq, d).bfloat16()
    k, v = (torch.randn(batch, sk, hk, d).bfloat16() for _ in range(2))
    dout = torch.randn(batch, sq, hq, d).bfloat16()
    cuda = [t.cuda() for t in (q, k, v, dout)]
    out, lse = tg.flash_attn_func(*cuda[:3], causal=causal, window_size=window, return_lse=True)
    runs = []
    for _ in range(2):
        runs.append(poisoned_backward(cuda[3], *cuda[:3], out, lse, causal, window,
                                      deterministic=True))
        torch.cuda.synchronize()
        assert _C._attention_last_kernel() == KERNEL, _C._attention_last_kernel()
    same = all(torch.equal(a, b) for a, b in zip(*runs))
    results.append(((q, k, v, dout), [g.cpu() for g in runs[0]], same))
torch.save(results, sys.argv[1])
"""

DETERMINISTIC_CASES = [
    # batch, sq, sk, hq, hk, d, causal, window: several key tiles adding into each query tile
    (2, 700, 700, 8, 2, 128, True, (-1, -1)),
    (1, 1000, 600, 4, 4, 64, False, (-1, -1)),
    (1, 130, 2000, 2, 1, 128, False, (-1, -1)),  # more key tiles than query tiles
    (2, 513, 900, 4, 1, 64, False, (200, 64)),
    (1, 300, 1100, 4, 2, 128, True, (-1, -1)),   # bottom-right causal, keys before every query
    (1, 1100, 300, 2, 1, 64, True, (-1, -1)),    # bottom-right causal, fully masked rows
    (2, 500, 700, 4, 2, 256, True, (-1, -1)),    # head dim 256's 64-key tiles
]


@requires_hopper
@gpu_test
@pytest.mark.parametrize("requested, kernel, cases", [
    (None, "sm90 deterministic", DETERMINISTIC_CASES),
    ("portable", "portable", DETERMINISTIC_CASES[:1]),
])
def test_deterministic_backward_is_bit_for_bit_and_correct(requested, kernel, cases):
    """deterministic=True on Hopper runs the Hopper kernel with its dQ additions in a fixed order
    (or, with TILEGRID_ATTENTION_BACKWARD=portable, the portable kernels): two runs give the
    same bits, and the gradients meet FlashAttention's criterion. It runs in a fresh process
    (the variable is read once), whose timeout catches a wait that never ends."""
    import os
    import subprocess
    import sys
    path = f"/tmp/tilegrid_deterministic_{os.getpid()}.pt"
    here = os.path.dirname(os.path.abspath(__file__))
    script = f"CASES = {cases!r}\nKERNEL = {kernel!r}\n" + DETERMINISTIC_SCRIPT
    env = dict(os.environ)
    env.pop("TILEGRID_ATTENTION_BACKWARD", None)
    if requested is not None:
        env["TILEGRID_ATTENTION_BACKWARD"] = requested
    subprocess.run([sys.executable, "-c", script, path, here], env=env, check=True, timeout=300)
    results = torch.load(path)
    os.remove(path)
    for case, ((q, k, v, dout), got, same) in zip(cases, results):
        assert same, f"{case}: two runs differ"
        causal, window = case[6], case[7]
        exact = reference_grads(q, k, v, dout, causal=causal, window=window)
        plain = reference_grads(*(t.cuda() for t in (q, k, v, dout)), dtype=torch.bfloat16,
                                causal=causal, window=window)
        for i, name in enumerate(("dq", "dk", "dv")):
            assert_fa_criterion(got[i], plain[i + 1].cpu(), exact[i + 1], f"{case} {name}")


@requires_hopper
@gpu_test
@pytest.mark.parametrize("d", [96, 192])
def test_head_dims_96_and_192_run_padded_on_the_hopper_kernels(d):
    """On Hopper tg.flash_attn_func pads head dims 96 and 192 with zeros to 128 and 256, the
    Hopper kernels' head dims: forward and backward run there, the outputs and gradients come
    back at the given head dim, scaled by 1/sqrt of it, and meet FlashAttention's criterion."""
    torch.manual_seed(0)
    q, dout = torch.randn(2, 200, 4, d).bfloat16(), torch.randn(2, 200, 4, d).bfloat16()
    k, v = (torch.randn(2, 333, 2, d).bfloat16() for _ in range(2))
    qc, kc, vc = (t.cuda().requires_grad_() for t in (q, k, v))
    out = tg.flash_attn_func(qc, kc, vc, causal=True)
    assert _C._attention_last_kernel() == "sm90"
    out.backward(dout.cuda())
    torch.cuda.synchronize()
    assert _C._attention_last_kernel() == "sm90"
    exact = reference_grads(q, k, v, dout, causal=True)
    plain = reference_grads(*(t.cuda() for t in (q, k, v, dout)), dtype=torch.bfloat16,
                            causal=True)
    for got, i, name in ((out, 0, "out"), (qc.grad, 1, "dq"), (kc.grad, 2, "dk"),
                         (vc.grad, 3, "dv")):
        assert got.shape[-1] == d, name
        assert_fa_criterion(got.detach().cpu(), plain[i].cpu(), exact[i], name)
