import pytest
import torch

import tilegrid as tg
from conftest import DEVICES


@pytest.mark.parametrize("device", DEVICES)
def test_layout_and_batch_index_with_empty_tensors(device):
    parts = [torch.randn(n, 3, device=device) for n in (4, 0, 2, 0, 5)]
    j = tg.JaggedTensor(parts)
    assert j.num_tensors == 5 and len(j) == 5
    assert j.joffsets.tolist() == [0, 4, 4, 6, 6, 11]
    expected = torch.cat([torch.full((n,), b, dtype=torch.int32) for b, n in enumerate((4, 0, 2, 0, 5))])
    assert torch.equal(j.jidx.cpu(), expected)
    for got, want in zip(j.unbind(), parts):
        assert torch.equal(got, want)
    assert torch.equal(j[-1], parts[-1])


@pytest.mark.parametrize("device", DEVICES)
def test_batch_index_on_many_random_sizes(device):
    sizes = torch.randint(0, 50, (64,)).tolist()
    j = tg.JaggedTensor([torch.randn(n, device=device) for n in sizes])
    expected = torch.repeat_interleave(torch.arange(64, dtype=torch.int32), torch.tensor(sizes))
    assert torch.equal(j.jidx.cpu(), expected)


def test_elementwise_ops_keep_the_layout():
    a = tg.JaggedTensor([torch.ones(2), torch.ones(3)])
    b = a * 3 + a - 1
    assert torch.equal(b.joffsets, a.joffsets)
    assert torch.equal(b.jdata, torch.full((5,), 3.0))
    c = tg.JaggedTensor([torch.ones(3), torch.ones(2)])
    with pytest.raises(ValueError, match="different layouts"):
        a + c


@pytest.mark.parametrize("device", DEVICES)
def test_from_data_and_offsets_validates(device):
    data = torch.randn(5, 2, device=device)
    j = tg.JaggedTensor.from_data_and_offsets(data, torch.tensor([0, 3, 5], device=device))
    assert j.num_tensors == 2
    with pytest.raises(ValueError, match=r"non-decreasing, got joffsets\[1\] = 4 > joffsets\[2\] = 3"):
        tg.JaggedTensor.from_data_and_offsets(data, torch.tensor([0, 4, 3, 5], device=device))
    with pytest.raises(ValueError, match=r"joffsets\[-1\] must equal the number of rows 5 of jdata, got 4"):
        tg.JaggedTensor.from_data_and_offsets(data, torch.tensor([0, 4], device=device))
    with pytest.raises(ValueError, match=r"joffsets\[0\] must be 0, got 1"):
        tg.JaggedTensor.from_data_and_offsets(data, torch.tensor([1, 5], device=device))
    with pytest.raises(TypeError, match="joffsets must be int64, got int32"):
        tg.JaggedTensor.from_data_and_offsets(data, torch.tensor([0, 5], dtype=torch.int32))


@pytest.mark.parametrize("jdata,joffsets,name", [
    (torch.zeros(5, 3), [0, 5], "joffsets must be a torch.Tensor, got list"),
    ([[0.0] * 3] * 5, torch.tensor([0, 5]), "jdata must be a torch.Tensor, got list"),
    (torch.zeros(5, 3), None, "joffsets must be a torch.Tensor, got NoneType"),
])
def test_from_data_and_offsets_refuses_non_tensors_naming_them(jdata, joffsets, name):
    with pytest.raises(TypeError, match=f"JaggedTensor.from_data_and_offsets: {name}"):
        tg.JaggedTensor.from_data_and_offsets(jdata, joffsets)


@pytest.mark.parametrize("dtype", [torch.int16, torch.complex64, torch.int8])
def test_from_data_and_offsets_takes_data_of_any_dtype(dtype):
    """The offsets are validated against the data's rows alone, so data of a dtype the C++
    module has no use for (DLPack conversion refuses int16) is still wrapped."""
    j = tg.JaggedTensor.from_data_and_offsets(torch.zeros(5, 3, dtype=dtype), torch.tensor([0, 2, 5]))
    assert [t.shape[0] for t in j.unbind()] == [2, 3] and j.dtype == dtype
    with pytest.raises(ValueError, match=r"joffsets\[-1\] must equal the number of rows 5"):
        tg.JaggedTensor.from_data_and_offsets(torch.zeros(5, 3, dtype=dtype), torch.tensor([0, 4]))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_traces_wrapping_and_the_batch_index(device):
    """from_data_and_offsets and jidx inside one graph (fullgraph=True; aot_eager traces the
    backward too): eager's values and gradient. Traced, only the offsets' layout is checked."""
    offsets = torch.tensor([0, 3, 3, 7], device=device)

    def f(x):
        j = tg.JaggedTensor.from_data_and_offsets(x, offsets)
        return (j.jdata * (j.jidx.unsqueeze(1).to(x.dtype) + 1)).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = torch.randn(7, 2, device=device, requires_grad=True)
    got = compiled(x)
    (grad,) = torch.autograd.grad(got, x)
    want = f(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, torch.autograd.grad(want, x)[0])
    # A bad layout still stops the trace with the eager message (fullgraph reports the raise as
    # an error of its own, the message inside).
    with pytest.raises(Exception, match="joffsets must be int64, got int32"):
        torch.compile(lambda x: tg.JaggedTensor.from_data_and_offsets(x, offsets.int()).jdata,
                      fullgraph=True, backend="aot_eager")(x)


def test_mismatched_elements_are_rejected():
    with pytest.raises(ValueError, match="element 1 has shape"):
        tg.JaggedTensor([torch.randn(2, 3), torch.randn(2, 4)])
