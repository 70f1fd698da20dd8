"""fVDB's module-level functions: the torch-compatible ones (tg.relu, tg.add, tg.sum, ...) on
tensors and JaggedTensors, tg.morton / tg.hilbert of coordinates, and tg.gcat."""

import pytest
import torch

import tilegrid as tg
import tilegrid.grid.torch_jagged as tj
from conftest import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_each_function_is_torchs_on_tensors_and_jagged_tensors(device):
    j = tg.JaggedTensor([torch.randn(3, 4), torch.randn(2, 4)]).to(device)
    positive = j.abs() + 0.5
    for name in tj.__all__:
        f = getattr(tg, name)
        assert f is getattr(tj, name) and f.__doc__
        if name in ("relu_",):
            continue
        if name == "where":
            args = (j.jdata > 0, j.jdata, 0.0)
            got = f(j > 0, j, 0.0)
        elif name in ("add", "sub", "mul", "true_divide", "floor_divide", "remainder", "pow",
                      "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"):
            other = positive if name in ("true_divide", "floor_divide", "remainder") else j
            args = (j.jdata, other.jdata)
            got = f(j, other)
        elif name in ("sum", "mean", "amax", "amin", "argmax", "argmin", "all", "any", "norm", "var", "std"):
            args = (j.jdata > 0,) if name in ("all", "any") else (j.jdata,)
            got = f(j > 0, dim=-1) if name in ("all", "any") else f(j, dim=-1)
            want = getattr(torch, name)(*args, dim=-1)
            assert isinstance(got, tg.JaggedTensor) and torch.equal(got.joffsets, j.joffsets), name
            torch.testing.assert_close(got.jdata, want, msg=name)
            continue
        elif name == "clamp":
            args, got = (j.jdata,), f(j, min=-0.1, max=0.2)
            torch.testing.assert_close(got.jdata, torch.clamp(j.jdata, min=-0.1, max=0.2))
            continue
        elif name in ("log", "sqrt"):
            args, got = (positive.jdata,), f(positive)
        else:
            args, got = (j.jdata,), f(j)
        want = getattr(torch, name)(*args)
        assert isinstance(got, tg.JaggedTensor) and torch.equal(got.joffsets, j.joffsets), name
        torch.testing.assert_close(got.jdata, want, equal_nan=True, msg=name)
        tensor_result = f(*args)  # a plain tensor in, a plain tensor out
        assert isinstance(tensor_result, torch.Tensor) and not isinstance(tensor_result, tg.JaggedTensor)
    k = j.clone()
    assert tg.relu_(k) is k and bool((k.jdata >= 0).all())


@pytest.mark.parametrize("device", DEVICES)
def test_morton_and_hilbert_of_coordinates_equal_the_grids_codes(device):
    ijk = torch.unique(torch.randint(0, 64, (300, 3), dtype=torch.int32), dim=0).to(device)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]))
    coords = grid.ijk.jdata
    assert torch.equal(tg.morton(coords), grid.morton(offset=0).jdata)
    assert torch.equal(tg.hilbert(coords), grid.hilbert(offset=0).jdata)
    assert tg.morton(torch.tensor([[0, 0, 1], [0, 1, 0], [1, 0, 0]])).tolist() == [1, 2, 4]
    with pytest.raises(ValueError, match=r"coordinates must lie in \[0, 2097152\)"):
        tg.morton(torch.tensor([[-1, 0, 0]]))
    with pytest.raises(ValueError, match=r"ijk must be an integer tensor \[N, 3\]"):
        tg.hilbert(torch.zeros(4, 2, dtype=torch.long))


def test_gcat_is_from_cat():
    a = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.randint(0, 9, (20, 3))]))
    b = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.randint(0, 9, (10, 3)), torch.randint(0, 9, (5, 3))]))
    joined = tg.gcat([a, b])
    assert joined.num_grids == 3
    assert torch.equal(joined.ijk.jdata, torch.cat([a.ijk.jdata, b.ijk.jdata]))
