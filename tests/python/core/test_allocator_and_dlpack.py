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


def test_allocator_callbacks_take_the_raw_entry_on_the_current_device(monkeypatch):
    """tilegrid's allocations call torch's raw caching-allocator entry when the device asked
    for is the current one, and the public function (which sets the device) otherwise."""
    from tilegrid import _torch

    calls = []
    monkeypatch.setattr(_torch, "_raw_alloc", lambda n, s: calls.append(("raw", n, s)) or 1)
    monkeypatch.setattr(_torch, "_raw_delete", lambda p: calls.append(("raw delete", p)))
    monkeypatch.setattr(_torch, "_get_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "caching_allocator_alloc",
                        lambda n, d, s: calls.append(("public", n, d, s)) or 2)
    assert _torch._alloc(256, 0, 7) == 1 and _torch._alloc(512, 1, 9) == 2
    _torch._free(1)
    assert calls == [("raw", 256, 7), ("public", 512, 1, 9), ("raw delete", 1)]


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


def test_shapes_whose_bytes_overflow_are_refused():
    with pytest.raises(ValueError, match=r"shape \[4611686018427387904, 2\] and dtype float32 "
                       r"would take more than 2\^63 bytes"):
        _C.empty([2**62, 2], "float32", "cpu")


@requires_cuda
@pytest.mark.gpu
def test_an_error_raised_beside_cuda_grids_is_raised_not_fatal():
    """A derived grid refused on CUDA (refined_grid past int32 rows) raises a ValueError while
    the grid's CUDA memory goes back to torch's allocator: the free callback runs with that
    exception pending, and must neither fail on it nor throw out of a destructor (which would
    end the process). Run in a child process so that a crash fails the test."""
    import subprocess
    import sys

    code = ("import tilegrid as tg\n"
            "try:\n"
            "    (lambda: tg.GridBatch.from_dense(1, [3, 3, 3], device='cuda').refined_grid(10**5))()\n"
            "except ValueError as e:\n"
            "    print('ValueError:', e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "ValueError: refined_grid" in run.stdout
