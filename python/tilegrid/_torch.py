"""PyTorch integration shared by every op: streams and tilegrid's allocator."""

from __future__ import annotations

import torch

from . import _C


def current_stream(tensor: torch.Tensor) -> int:
    """The raw handle of torch's current CUDA stream on `tensor`'s device (0 on the CPU)."""
    if tensor.device.type != "cuda":
        return 0
    return torch.cuda.current_stream(tensor.device).cuda_stream


def _alloc(nbytes: int, device: int, stream: int) -> int:
    return torch.cuda.caching_allocator_alloc(nbytes, device, stream)


def _free(ptr: int) -> None:
    torch.cuda.caching_allocator_delete(ptr)


def install_torch_allocator() -> None:
    """Serve tilegrid's own CUDA allocations (scratch space, data-dependent outputs) from
    PyTorch's caching allocator, so that tilegrid memory is torch memory: it shows in
    torch.cuda.memory_allocated() and is reused by torch."""
    _C.set_cuda_allocator(_alloc, _free)


def uninstall_torch_allocator() -> None:
    """Go back to tilegrid's built-in stream-ordered cudaMallocAsync allocator."""
    _C.set_cuda_allocator(None, None)
