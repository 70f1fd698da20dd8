"""PyTorch integration shared by every op: streams and tilegrid's allocator."""

from __future__ import annotations

from typing import Optional

import torch

from . import _C


# torch's C entry points behind torch.cuda.current_stream(...).cuda_stream and
# Tensor.__dlpack__, without the Python layers around them (a stream object built, device
# lookups, export checks: several microseconds a call, which a sparse network's dozens of
# small layers a call pay on the host). Private to torch, so each has its public fallback.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_to_dlpack = getattr(torch._C, "_to_dlpack", None)


def current_stream(where) -> int:
    """The raw handle of torch's current CUDA stream on the device of `where` (a tensor or a
    torch.device); 0 on the CPU."""
    device = where.device if isinstance(where, torch.Tensor) else torch.device(where)
    if device.type != "cuda":
        return 0
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def dlpack(tensor: Optional[torch.Tensor]):
    """`tensor` as a DLPack capsule for the C++ module (which reads or writes it in place during
    the call), None as None. Callers handle autograd around the call, as for every _C op."""
    if tensor is None:
        return None
    return _to_dlpack(tensor) if _to_dlpack is not None else tensor.detach().__dlpack__()


def dlpack_pair(jdata: torch.Tensor, joffsets: torch.Tensor):
    """A jagged tensor's storage as two DLPack capsules for the C++ module (through dlpack;
    autograd is handled around the C++ calls)."""
    return dlpack(jdata.contiguous()), dlpack(joffsets.contiguous())


# The caching allocator's C entry points behind torch.cuda.caching_allocator_alloc / _delete,
# which add a device lookup, a stream check and a device context a call: a sparse U-Net's call
# allocates ~150 scratch buffers from C++ (its grids and plans), each through these
# callbacks. Private to torch, so each has its public fallback.
_raw_alloc = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
_raw_delete = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None)


def _alloc(nbytes: int, device: int, stream: int) -> int:
    # The raw entry allocates on the current device (the public function sets `device` first).
    if _raw_alloc is not None and _get_device is not None and _get_device() == device:
        return _raw_alloc(nbytes, stream)
    return torch.cuda.caching_allocator_alloc(nbytes, device, stream)


def _free(ptr: int) -> None:
    if _raw_delete is not None:
        return _raw_delete(ptr)
    torch.cuda.caching_allocator_delete(ptr)


def install_torch_allocator() -> None:
    """Serve tilegrid's own CUDA allocations (scratch space, data-dependent outputs) from
    PyTorch's caching allocator, so that tilegrid memory is torch memory: it shows in
    torch.cuda.memory_allocated() and is reused by torch."""
    _C.set_cuda_allocator(_alloc, _free)


def uninstall_torch_allocator() -> None:
    """Go back to tilegrid's built-in stream-ordered cudaMallocAsync allocator."""
    _C.set_cuda_allocator(None, None)
