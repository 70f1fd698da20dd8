"""JaggedTensor's jsum, jmax, jmin and jreshape (fVDB's signatures and return layouts) against
a loop over the tensors in float64, on random sizes with empty tensors among them; gradients
against the loop's own."""

import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


def random_jagged(device, dtype=torch.float32, features=(3, 2)):
    sizes = torch.randint(0, 6, (7,)).tolist()
    sizes[2] = 0  # an empty tensor among them
    parts = [torch.randn(n, *features, dtype=dtype) for n in sizes]
    return tg.JaggedTensor(parts).to(device), parts


@pytest.mark.parametrize("device", DEVICES)
def test_jsum_over_the_rows_gives_one_row_a_tensor(device):
    j, parts = random_jagged(device, torch.float64)
    x = j.jdata.clone().requires_grad_()
    j = j.jagged_like(x)
    out = j.jsum()
    assert out.num_tensors == 7 and out.joffsets.tolist() == list(range(8))
    want = torch.stack([p.sum(0) for p in parts])
    torch.testing.assert_close(out.jdata.cpu(), want, rtol=1e-12, atol=1e-12)
    assert j.jsum(keepdim=True).jdata.shape == want.shape  # keepdim has no effect on dim 0
    weights = torch.randn_like(out.jdata)
    (out.jdata * weights).sum().backward()
    torch.testing.assert_close(x.grad, weights[j.jidx.long()])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim, keepdim", [(1, False), (-1, True), (2, False)])
def test_jsum_over_a_feature_dim_keeps_the_layout(device, dim, keepdim):
    j, parts = random_jagged(device)
    out = j.jsum(dim, keepdim)
    assert torch.equal(out.joffsets, j.joffsets)
    torch.testing.assert_close(out.jdata.cpu(), torch.cat(parts).sum(dim, keepdim=keepdim))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["jmax", "jmin"])
def test_jmax_jmin_over_the_rows(device, name):
    j, parts = random_jagged(device, torch.float64)
    # Ties: a repeated extreme takes the last row that has it, as fVDB's.
    parts[0] = torch.cat([parts[0], parts[0]]) if len(parts[0]) else torch.ones(2, 3, 2, dtype=torch.float64)
    j = tg.JaggedTensor(parts).to(device)
    x = j.jdata.clone().requires_grad_()
    values, indices = getattr(j.jagged_like(x), name)()
    assert values.joffsets.tolist() == list(range(8)) and indices.jdata.dtype == torch.int64
    pick = torch.max if name == "jmax" else torch.min
    for b, p in enumerate(parts):
        if len(p) == 0:
            assert torch.equal(values[b].cpu(), torch.zeros(1, 3, 2, dtype=torch.float64))
            assert torch.equal(indices[b].cpu(), torch.full((1, 3, 2), -1))
            continue
        want = pick(p, 0).values
        last = torch.where(p == want, torch.arange(len(p)).view(-1, 1, 1), -1).amax(0)
        assert torch.equal(values[b][0].detach().cpu(), want)
        assert torch.equal(indices[b][0].cpu(), last)
    # The gradient goes to the extreme, shared among equal ones (torch's amax / amin rule).
    values.jdata.sum().backward()
    for b, p in enumerate(parts):
        if len(p):
            hits = (p == pick(p, 0).values).double()
            start = int(j.joffsets[b])
            torch.testing.assert_close(x.grad[start:start + len(p)].cpu(), hits / hits.sum(0))


@pytest.mark.parametrize("device", DEVICES)
def test_jmax_over_a_feature_dim_is_torch_max(device):
    j, parts = random_jagged(device)
    values, indices = j.jmin(-1, keepdim=True)
    want = torch.cat(parts).min(-1, keepdim=True)
    assert torch.equal(values.jdata.cpu(), want.values) and torch.equal(indices.jdata.cpu(), want.indices)
    assert torch.equal(values.joffsets, j.joffsets)


def test_reductions_refuse_bad_dims_and_bools():
    j, _ = random_jagged("cpu")
    with pytest.raises(IndexError, match=r"dim must be in \[-2, 2\]"):
        j.jsum(3)
    with pytest.raises(IndexError, match=r"dim must be in \[-2, 2\]"):
        j.jmax(-3)
    with pytest.raises(TypeError, match="jdata must not be bool"):
        (j > 0).jmax()


@pytest.mark.parametrize("device", DEVICES)
def test_jreshape_regroups_the_same_rows(device):
    j, _ = random_jagged(device)
    n = j.jdata.shape[0]
    sizes = [n // 3, 0, n - n // 3]
    out = j.jreshape(sizes)
    assert out.jdata is j.jdata and out.joffsets.tolist() == [0, n // 3, n // 3, n]
    assert out.joffsets.device == j.jdata.device
    assert torch.equal(out.jreshape_as(j).joffsets, j.joffsets)
    with pytest.raises(ValueError, match=f"adding up to the {n} rows"):
        j.jreshape([n + 1])
    with pytest.raises(TypeError, match="one list dimension"):
        j.jreshape([[n], [0]])
