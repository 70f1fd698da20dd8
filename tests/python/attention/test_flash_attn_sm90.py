"""The Hopper attention kernel, forced through the kernel choice, against the float64
reference: every supported head dimension, both dtypes, each FlashAttention-4 switch
combination (bfloat16), GQA, windows, softcap and variable-length batches. Runs only on a GPU
of compute capability 9.0; TILEGRID_ATTENTION_KERNEL=sm90 additionally sends the rest of the
attention tests through the kernel."""
import contextlib

import pytest
import torch

from tilegrid import _C
from tilegrid.kernel_choice import override

from test_flash_attn import (GPU_DTYPES, check_gpu, gpu_inputs, gpu_test, run_poisoned,
                             run_varlen_poisoned)

SM90_HEAD_DIMS = [64, 128, 256]
# Bits: 1 conditional rescaling, 2 software exp2, 4 ping-pong between consumer warpgroups,
# 8 three consumer warpgroups (192-row tiles; head dim 64 only), 16 wider key tiles (176 at
# head dim 128, 80 at 256); at other head dims the last two run as without them; 32 persistent
# CTAs; 128 clusters of two CTAs sharing K/V loads (head dims 128 and 256, no mask, fixed
# lengths, an even number of 128-row query tiles; run as without it otherwise).
SWITCHES = {"plain": 0, "rescale": 1, "soft_exp2": 2, "ping_pong": 4, "all": 7,
            "three_wg": 8, "three_wg_ping_pong": 12, "wide_n": 16, "wide_n_ping_pong": 20,
            "persistent": 32, "three_wg_ping_pong_persistent": 44, "kv_multicast": 128,
            "kv_multicast_ping_pong": 132, "wide_n_kv_multicast": 144, "direct_store_o": 512,
            "persistent_direct_store_o": 544, "persistent_dynamic": 96, "default": -1}


def hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@contextlib.contextmanager
def forced_sm90(switches):
    """The Hopper kernel with `switches` for the with-block; the previous request and the
    default switches after it."""
    with override("attention", "sm90"):
        _C._attention_set_sm90_switches(switches)
        try:
            yield
        finally:
            _C._attention_set_sm90_switches(-1)


@pytest.fixture(params=list(SWITCHES))
def sm90(request):
    """Forces the Hopper kernel with one switch combination; restores the previous choice."""
    if not hopper():
        pytest.skip("needs a GPU of compute capability 9.0")
    with forced_sm90(SWITCHES[request.param]):
        yield request.param


def dtypes_for(switches):
    # float16 has only the default switches compiled; the others would run that kernel again.
    return GPU_DTYPES if switches == "default" else [torch.bfloat16]


def assert_ran_sm90():
    assert _C._attention_last_kernel() == "sm90"


@pytest.mark.parametrize("head_dim", SM90_HEAD_DIMS)
@gpu_test
def test_sm90_seqlens_causal_and_windows(sm90, head_dim):
    for dtype in dtypes_for(sm90):
        for sq, sk in ((1, 1), (17, 113), (113, 17), (128, 128), (1000, 1000), (300, 2049)):
            q, k, v = gpu_inputs((2, sq, 2, head_dim), (2, sk, 2, head_dim), dtype)
            for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (100, 50)),
                                   (True, (8, -1)), (False, (0, 0))):
                out, lse = run_poisoned(q, k, v, causal=causal, window=window)
                assert_ran_sm90()
                check_gpu(out, lse, q, k, v, dtype, causal=causal, window=window)


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("switches", [128, 132, 144, 148])
@gpu_test
def test_sm90_key_value_multicast_pairs_of_query_tiles(head_dim, switches):
    # Clusters of two CTAs apply with an even number of 128-row query tiles (2, 4, 16 here; 255
    # leaves the second tile short) and no mask: each CTA loads half of every K/V tile for both.
    # Key lengths: one tile, a partial last tile, many tiles, a single key; with GQA and softcap.
    dtype = torch.bfloat16
    with forced_sm90(switches):
        for sq, sk, hq, hk in ((255, 256, 2, 2), (512, 700, 4, 2), (2048, 1, 2, 1),
                               (256, 2049, 6, 1)):
            q, k, v = gpu_inputs((2, sq, hq, head_dim), (2, sk, hk, head_dim), dtype, scale=2.0)
            out, lse = run_poisoned(q, k, v)
            assert_ran_sm90()
            check_gpu(out, lse, q, k, v, dtype)
            out, lse = run_poisoned(q, k, v, scale=0.3, softcap=5.0)
            check_gpu(out, lse, q, k, v, dtype, scale=0.3, softcap=5.0)


@pytest.mark.parametrize("head_dim", SM90_HEAD_DIMS)
@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 1)])
@gpu_test
def test_sm90_gqa_softcap_and_large_scores(sm90, head_dim, hq, hk):
    for dtype in dtypes_for(sm90):
        # Scores spread over many units: the row maximum grows across tiles, which exercises
        # the (conditional) rescaling of O.
        q, k, v = gpu_inputs((2, 257, hq, head_dim), (2, 700, hk, head_dim), dtype, scale=3.0)
        for causal in (False, True):
            out, lse = run_poisoned(q, k, v, causal=causal)
            assert_ran_sm90()
            check_gpu(out, lse, q, k, v, dtype, causal=causal)
            out, lse = run_poisoned(q, k, v, scale=0.3, causal=causal, softcap=5.0)
            check_gpu(out, lse, q, k, v, dtype, scale=0.3, causal=causal, softcap=5.0)


@pytest.mark.parametrize("head_dim", SM90_HEAD_DIMS)
@gpu_test
def test_sm90_varlen_with_mixed_and_zero_lengths(sm90, head_dim):
    lens_q, lens_k = [5, 0, 17, 1, 0, 1000, 129, 64], [9, 3, 17, 0, 0, 1000, 300, 2]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    for dtype in dtypes_for(sm90):
        q, k, v = gpu_inputs((sum(lens_q), 4, head_dim), (sum(lens_k), 2, head_dim), dtype)
        for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (16, 16))):
            out, lse = run_varlen_poisoned(q, k, v, cu_q.cuda(), cu_k.cuda(), max(lens_q) + 3,
                                           max(lens_k), causal=causal, window=window)
            assert_ran_sm90()
            assert not out.isnan().any() and not lse.isnan().any()
            for b in range(len(lens_q)):
                if lens_q[b] == 0:
                    continue
                qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
                ks = slice(int(cu_k[b]), int(cu_k[b + 1]))
                check_gpu(out[qs][None], lse[:, qs][None], q[qs][None], k[ks][None],
                          v[ks][None], dtype, causal=causal, window=window)


@gpu_test
def test_sm90_strided_inputs_and_fallback(sm90):
    dtype = torch.bfloat16
    q = torch.randn(2, 4, 150, 128).to(dtype).cuda().transpose(1, 2)
    kv = torch.randn(2, 170, 2, 4, 128).to(dtype).cuda()
    k, v = kv[:, :, 0], kv[:, :, 1]
    out, lse = run_poisoned(q, k, v, causal=True)
    assert_ran_sm90()
    check_gpu(out, lse, q, k, v, dtype, causal=True)
    # Head dimension 96 is not the Hopper kernel's: the portable kernel runs, no error.
    q, k, v = gpu_inputs((1, 100, 2, 96), (1, 100, 2, 96), dtype)
    out, lse = run_poisoned(q, k, v)
    assert _C._attention_last_kernel() == "portable"
    check_gpu(out, lse, q, k, v, dtype)


@pytest.mark.parametrize("head_dim", SM90_HEAD_DIMS)
@pytest.mark.parametrize("switches", [32, 33, 36, 44, 544, 96, 108, 112, 116])
@gpu_test
def test_sm90_persistent_ctas_loop_over_many_tiles(head_dim, switches):
    """Persistent CTAs (bit 32) with more tiles than an H200 has SMs (132): 9 or 6 query
    tiles x 16 heads x 2 sequences, so every CTA carries its K/V ring, Q barrier, output
    staging (TMA stores reusing the shared-memory slice; 544 stores from registers instead)
    and (with ping-pong, 36 and 44) the named-barrier turns from tile to tile; causal tiles
    of unequal length; with conditional rescaling (33); with dynamic tiles (96, and 108 with
    three warpgroups and ping-pong; 112 and 116 with wide key tiles, without and with
    ping-pong), each CTA's tiles in the order it takes them from the counter. Then a variable-length batch whose sequences alternately have keys and none: a
    CTA's tiles mix loaded ones with ones that load nothing (the Q barrier parities must stay
    in step), and a causal case with more queries than keys."""
    if not hopper():
        pytest.skip("needs a GPU of compute capability 9.0")
    with forced_sm90(switches):
        q, k, v = gpu_inputs((2, 1025, 16, head_dim), (2, 1025, 4, head_dim), torch.bfloat16)
        for causal in (False, True):
            out, lse = run_poisoned(q, k, v, causal=causal)
            assert_ran_sm90()
            check_gpu(out, lse, q, k, v, torch.bfloat16, causal=causal)
        q, k, v = gpu_inputs((4, 1000, 16, head_dim), (4, 17, 16, head_dim), torch.bfloat16)
        out, lse = run_poisoned(q, k, v, causal=True)
        check_gpu(out, lse, q, k, v, torch.bfloat16, causal=True)
        # 64 sequences of 300 queries, keys 300 and 0 in turn: 3 x 4 x 64 = 768 tiles.
        lens_q, lens_k = [300] * 64, [300, 0] * 32
        cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
        cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
        q, k, v = gpu_inputs((sum(lens_q), 4, head_dim), (sum(lens_k), 4, head_dim),
                             torch.bfloat16)
        for causal in (False, True):
            out, lse = run_varlen_poisoned(q, k, v, cu_q.cuda(), cu_k.cuda(), 300, 300,
                                           causal=causal)
            assert_ran_sm90()
            for b in range(len(lens_q)):
                qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
                ks = slice(int(cu_k[b]), int(cu_k[b + 1]))
                check_gpu(out[qs][None], lse[:, qs][None], q[qs][None], k[ks][None],
                          v[ks][None], torch.bfloat16, causal=causal)
