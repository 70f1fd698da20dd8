"""fVDB's tensor-like JaggedTensor methods (jagged_tensor_methods.py): each against the same
torch operation on jdata, the layout kept; the shapes, row masks and factories against the
tensors they stand for; bad arguments refused by name."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def batch(device, dtype=torch.float32):
    return tg.JaggedTensor([torch.randn(3, 2, dtype=dtype), torch.randn(0, 2, dtype=dtype),
                            torch.randn(4, 2, dtype=dtype)]).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_methods_equal_torch_on_jdata_and_keep_the_layout(device):
    j = batch(device) * 3
    cases = {
        "abs": torch.abs, "ceil": torch.ceil, "floor": torch.floor, "sqrt": lambda x: torch.sqrt(x),
        "float": lambda x: x.float(), "double": lambda x: x.double(), "int": lambda x: x.int(),
        "long": lambda x: x.long(), "detach": lambda x: x.detach(), "clone": lambda x: x.clone(),
    }
    for name, want in cases.items():
        got = getattr(j, name)()
        assert torch.equal(got.joffsets, j.joffsets), name
        torch.testing.assert_close(got.jdata, want(j.jdata), equal_nan=True, msg=name)
    torch.testing.assert_close(j.round(1).jdata, torch.round(j.jdata, decimals=1))
    torch.testing.assert_close((j // 0.7).jdata, torch.floor_divide(j.jdata, 0.7))
    torch.testing.assert_close((j % 0.7).jdata, torch.remainder(j.jdata, 0.7))
    torch.testing.assert_close((5 // j.abs()).jdata, torch.floor_divide(5, j.jdata.abs()))
    torch.testing.assert_close((5 % j.abs()).jdata, torch.remainder(5, j.jdata.abs()))
    assert j.type(torch.float64).dtype == torch.float64 and j.type_as(j.long()).dtype == torch.int64


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_forms_write_jdata_and_return_self(device):
    j = batch(device)
    before = j.jdata.clone()
    for name, want in [("abs_", before.abs()), ("ceil_", before.abs().ceil()),
                       ("floor_", before.abs().ceil().floor()), ("sqrt_", before.abs().ceil().sqrt())]:
        assert getattr(j, name)() is j
        torch.testing.assert_close(j.jdata, want, msg=name)
    values = j.jdata.clone()
    k = j
    k += 1
    k *= 2
    k -= 0.5
    k /= 4
    k **= 2
    assert k is j
    torch.testing.assert_close(j.jdata, (((values + 1) * 2 - 0.5) / 4) ** 2)
    other = batch(device)
    j += other  # a JaggedTensor of the same layout
    with pytest.raises(ValueError, match="different layouts"):
        j += tg.JaggedTensor([torch.zeros(7, 2)]).to(device)
    r = batch(device).abs()
    copy = r.jdata.clone()
    r //= 0.3
    torch.testing.assert_close(r.jdata, torch.floor_divide(copy, 0.3))
    copy = r.jdata.clone()
    r %= 2
    torch.testing.assert_close(r.jdata, torch.remainder(copy, 2))
    r += 0.4
    copy = r.jdata.clone()
    assert r.round_(0) is r
    torch.testing.assert_close(r.jdata, torch.round(copy))


@pytest.mark.parametrize("device", DEVICES)
def test_devices_and_autograd_flags(device):
    j = batch(device)
    assert j.cpu().is_cpu and j.is_cpu == (device == "cpu") and j.is_cuda == (device == "cuda")
    assert not j.requires_grad and j.requires_grad_() is j and j.requires_grad
    (j.jdata * 2).sum().backward()
    assert torch.equal(j.jdata.grad, torch.full_like(j.jdata, 2))
    assert not j.detach().requires_grad


def test_shapes():
    j = tg.JaggedTensor([torch.zeros(3, 4, 5), torch.zeros(1, 4, 5)])
    assert j.rshape == (4, 4, 5) and j.eshape == [4, 5] and j.edim == 2
    assert j.ldim == 1 and j.lshape == [3, 1]
    assert j.jflatten() is j and j.jsqueeze() is j
    with pytest.raises(ValueError, match="dim must be 0 or -1, got 1"):
        j.jflatten(1)


@pytest.mark.parametrize("device", DEVICES)
def test_rmask_keeps_each_tensors_masked_rows(device):
    j = batch(device)
    mask = j.jdata[:, 0] > 0
    got = j.rmask(mask)
    for t, m, g in zip(j.unbind(), mask.split(j.lshape), got.unbind()):
        assert torch.equal(g, t[m])
    with pytest.raises(ValueError, match=r"mask must be bool \[7\]"):
        j.rmask(mask[:3])
    with pytest.raises(ValueError, match="mask must be bool"):
        j.rmask(mask.int())


@pytest.mark.parametrize("device", DEVICES)
def test_factories(device):
    for make, check in [(tg.JaggedTensor.from_zeros, lambda x: bool((x == 0).all())),
                        (tg.JaggedTensor.from_ones, lambda x: bool((x == 1).all())),
                        (tg.JaggedTensor.from_rand, lambda x: bool(((x >= 0) & (x < 1)).all())),
                        (tg.JaggedTensor.from_randn, lambda x: x.isfinite().all()),
                        (tg.JaggedTensor.from_empty, lambda x: True)]:
        j = make([2, 0, 3], [4], device=device, dtype=torch.float64, requires_grad=True)
        assert j.lshape == [2, 0, 3] and j.rshape == (5, 4) and j.dtype == torch.float64
        assert j.device.type == device and j.requires_grad and check(j.jdata.detach())
    assert tg.JaggedTensor.from_zeros([2, 1]).rshape == (3,)
    t = torch.randn(4, 3)
    assert torch.equal(tg.JaggedTensor.from_tensor(t).jdata, t)
    assert tg.JaggedTensor.from_list_of_tensors([t, t[:1]]).lshape == [4, 1]
    cat = tg.JaggedTensor.from_cat([tg.JaggedTensor([t]), tg.JaggedTensor([t[:2], t[:1]])])
    assert cat.lshape == [4, 2, 1]
    d = tg.JaggedTensor.from_data_and_indices(torch.arange(6).to(device), torch.tensor([0, 0, 2, 2, 2, 2]).to(device),
                                              4)
    assert d.lshape == [2, 0, 4, 0] and torch.equal(d.unbind()[2].cpu(), torch.arange(2, 6))
    with pytest.raises(ValueError, match="non-decreasing"):
        tg.JaggedTensor.from_data_and_indices(torch.arange(3), torch.tensor([1, 0, 1]), 2)
    with pytest.raises(ValueError, match=r"must lie in \[0, 2\), got \[0, 2\]"):
        tg.JaggedTensor.from_data_and_indices(torch.arange(3), torch.tensor([0, 1, 2]), 2)
    with pytest.raises(ValueError, match="lsizes must be >= 0"):
        tg.JaggedTensor.from_zeros([2, -1])
    with pytest.raises(TypeError, match="expected JaggedTensors"):
        tg.JaggedTensor.from_cat([t])
