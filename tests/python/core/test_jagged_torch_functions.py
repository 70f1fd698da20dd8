"""torch functions on JaggedTensors (__torch_function__, as fVDB's): elementwise ones and
reductions over the feature dimensions give JaggedTensors with the same offsets and the values
torch gives on jdata; anything else raises a TypeError that says what to do instead."""

import pytest
import torch
import torch.nn.functional as F

import tilegrid as tg
from conftest import DEVICES


def random_jagged(device):
    return tg.JaggedTensor([torch.randn(n, 4, device=device) for n in (3, 0, 5)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [
    torch.relu, torch.sigmoid, torch.abs, torch.exp, F.gelu, F.silu,
    lambda x: F.leaky_relu(x, 0.2), lambda x: torch.clamp(x, -0.5, 0.5),
    lambda x: torch.add(x, 1.5), lambda x: torch.mul(x, x), lambda x: x * 2, lambda x: 2 / (torch.abs(x) + 1),
    lambda x: x ** 2, lambda x: torch.ones(4, device=x.device) + x, lambda x: torch.where(x > 0, x, 0.0),
    lambda x: torch.maximum(x, torch.zeros(4, device=x.device)),
    lambda x: torch.sum(x, dim=-1), lambda x: torch.mean(x, 1, keepdim=True), lambda x: torch.amax(x, dim=(1,)),
    lambda x: F.softmax(x, dim=-1), lambda x: torch.norm(x, dim=1),
])
def test_elementwise_and_row_reductions_keep_the_offsets(device, op):
    x = random_jagged(device)
    out = op(x)
    assert isinstance(out, tg.JaggedTensor) and out.joffsets is x.joffsets
    torch.testing.assert_close(out.jdata, op(x.jdata), rtol=0, atol=0)  # torch's on jdata


def test_gradients_flow_through_jdata():
    data = torch.randn(8, 3, requires_grad=True)
    x = tg.JaggedTensor.from_data_and_offsets(data, torch.tensor([0, 5, 8]))
    torch.relu(x * 3).jdata.sum().backward()
    torch.testing.assert_close(data.grad, 3.0 * (data > 0))


def test_in_place_forms_and_out_write_the_jagged_tensor():
    x = random_jagged("cpu")
    before = x.jdata.clone()
    assert torch.relu_(x) is x
    torch.testing.assert_close(x.jdata, before.relu())
    out = x.jagged_like(torch.empty_like(x.jdata))
    assert torch.add(x, 1.0, out=out) is out
    torch.testing.assert_close(out.jdata, x.jdata + 1)


def test_operands_must_share_a_layout():
    x = random_jagged("cpu")
    y = tg.JaggedTensor([torch.randn(n, 4) for n in (5, 0, 3)])
    with pytest.raises(ValueError, match="different layouts"):
        torch.add(x, y)
    same = x.jagged_like(torch.ones_like(x.jdata))
    torch.testing.assert_close(torch.add(x, same).jdata, x.jdata + 1)


@pytest.mark.parametrize("op", [
    lambda x: torch.cat([x, x]), lambda x: torch.matmul(x, torch.ones(4, 4)), lambda x: torch.reshape(x, (-1,)),
    lambda x: torch.stack([x]), lambda x: F.linear(x, torch.ones(2, 4)),
])
def test_other_functions_raise_a_clear_type_error(op):
    with pytest.raises(TypeError, match="does not take a JaggedTensor.*jdata"):
        op(random_jagged("cpu"))


@pytest.mark.parametrize("op", [torch.sum, lambda x: torch.sum(x, dim=0), lambda x: torch.amax(x, (0, 1))])
def test_reductions_over_the_rows_point_to_jsum(op):
    with pytest.raises(ValueError, match="feature dimensions only.*jsum"):
        op(random_jagged("cpu"))
