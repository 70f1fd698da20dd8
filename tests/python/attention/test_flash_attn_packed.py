"""The packed entry points against flash_attn_func / flash_attn_varlen_func on the unpacked
tensors: the same outputs and the same gradients, gathered into the packed tensor."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def dtype_for(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
def test_qkvpacked_and_kvpacked_match_the_unpacked_call(device):
    dtype = dtype_for(device)
    qkv = torch.randn(2, 33, 3, 4, 64, device=device, dtype=dtype, requires_grad=True)
    out = tg.flash_attn_qkvpacked_func(qkv, causal=True, window_size=(8, 0))
    q, k, v = (t.detach().clone().requires_grad_() for t in qkv.unbind(2))
    want = tg.flash_attn_func(q, k, v, causal=True, window_size=(8, 0))
    assert torch.equal(out, want)
    grad = torch.randn_like(out)
    (g,) = torch.autograd.grad(out, (qkv,), grad)
    assert torch.equal(g, torch.stack(torch.autograd.grad(want, (q, k, v), grad), dim=2))

    q = torch.randn(2, 17, 4, 64, device=device, dtype=dtype, requires_grad=True)
    kv = torch.randn(2, 29, 2, 2, 64, device=device, dtype=dtype, requires_grad=True)
    out, lse, _ = tg.flash_attn_kvpacked_func(q, kv, causal=True, return_attn_probs=True)
    want, want_lse, _ = tg.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True, return_attn_probs=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_packed_match_the_unpacked_call(device):
    dtype = dtype_for(device)
    cu = torch.tensor([0, 5, 5, 40], dtype=torch.int32, device=device)
    qkv = torch.randn(40, 3, 4, 32, device=device, dtype=dtype, requires_grad=True)
    out = tg.flash_attn_varlen_qkvpacked_func(qkv, cu, 35, causal=True)
    want = tg.flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, 35, 35, causal=True)
    assert torch.equal(out, want)
    out.sum().backward()
    assert qkv.grad.shape == qkv.shape and torch.isfinite(qkv.grad).all()
    cu_k = torch.tensor([0, 9, 12, 50], dtype=torch.int32, device=device)
    kv = torch.randn(50, 2, 2, 32, device=device, dtype=dtype)
    out = tg.flash_attn_varlen_kvpacked_func(qkv[:, 0], kv, cu, cu_k, 35, 38, softcap=4.0)
    want = tg.flash_attn_varlen_func(qkv[:, 0], kv[:, 0], kv[:, 1], cu, cu_k, 35, 38, softcap=4.0)
    assert torch.equal(out, want)


def test_a_packed_tensor_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"qkv must have 3 at dimension 2 \(q, k, v\), got shape \[2, 8, 2, 4, 16\]"):
        tg.flash_attn_qkvpacked_func(torch.randn(2, 8, 2, 4, 16))
    with pytest.raises(ValueError, match=r"kv must have 2 at dimension 1 \(k, v\)"):
        tg.flash_attn_varlen_kvpacked_func(torch.randn(8, 4, 16), torch.randn(8, 3, 4, 16),
                                           *(torch.tensor([0, 8], dtype=torch.int32),) * 2, 8, 8)
    with pytest.raises(TypeError, match="qkv must be a torch.Tensor"):
        tg.flash_attn_qkvpacked_func([1, 2, 3])
