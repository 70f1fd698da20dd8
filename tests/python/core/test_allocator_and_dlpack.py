import pytest
import torch

import tilegrid as tg
from tilegrid import _C
from conftest import requires_cuda


def test_cpu_tensor_exports_to_torch_without_copy():
    t = torch.from_dlpack(_C.empty([3, 5], "bfloat16", "cpu"))
    assert t.shape == (3, 5) and t.dtype == torch.bfloat16 and t.device.type == "cpu"
    assert t.data_ptr() % 256 == 0
    t.fill_(2.0)  # writable, owned memory
    assert t.sum().item() == 30.0


def test_unconsumed_capsule_frees_its_memory():
    for _ in range(100):
        _C.empty([1 << 20], "float32", "cpu")  # dropped at once: must not leak or crash


def test_bad_dtype_name():
    with pytest.raises(TypeError, match="unknown dtype name"):
        _C.empty([2], "complex64", "cpu")


@requires_cuda
@pytest.mark.gpu
def test_cuda_allocations_come_from_torch_caching_allocator():
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    t = torch.from_dlpack(_C.empty([1 << 20], "float32", "cuda", 0, torch.cuda.current_stream().cuda_stream))
    assert t.is_cuda
    assert torch.cuda.memory_allocated() - before >= 4 << 20
    del t
    assert torch.cuda.memory_allocated() == before


@requires_cuda
@pytest.mark.gpu
def test_builtin_allocator_can_be_restored():
    tg.uninstall_torch_allocator()
    try:
        before = torch.cuda.memory_allocated()
        t = torch.from_dlpack(_C.empty([1 << 20], "float32", "cuda"))
        assert torch.cuda.memory_allocated() == before  # cudaMallocAsync, not torch's pool
        del t
    finally:
        tg.install_torch_allocator()
