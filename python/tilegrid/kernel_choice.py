"""Which kernels run: the C++ library's one kernel choice (tilegrid/core/kernel_choice.h),
asked from Python.

Each kernel family has a requested path, from its environment variable (read once, at the
family's first request) or from set_kernel_choice:

    family              variable                      values (first: the default)
    attention           TILEGRID_ATTENTION_KERNEL     auto, sm90, portable
    attention_backward  TILEGRID_ATTENTION_BACKWARD   auto, portable, simt
    gemm                (none)                        auto, sm90, portable
    sparse_conv         TILEGRID_SPARSE_CONV_KERNEL   auto, mma, simt

A value outside a family's list raises ValueError. hopper_kernels_run_on answers whether a
CUDA device can run a family's Hopper (sm_90a) kernels: this build has them and the device is
of compute capability 9.0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from . import _C

#: The kernel families, as the functions below take them.
FAMILIES = ("attention", "attention_backward", "gemm", "sparse_conv")


def requested_kernel(family: str) -> str:
    """The family's requested path, e.g. "auto"; ValueError for a bad environment value."""
    return _C._kernel_choice(family)


def set_kernel_choice(family: str, value: str) -> None:
    """Requests `value` (one of the family's, see the module's table) for this process, in
    place of the environment variable; for tests and benchmarks."""
    _C._set_kernel_choice(family, value)


@contextlib.contextmanager
def override(family: str, value: str) -> Iterator[None]:
    """set_kernel_choice(family, value) for the with-block; the previous request after it."""
    previous = requested_kernel(family)
    set_kernel_choice(family, value)
    try:
        yield
    finally:
        set_kernel_choice(family, previous)


# Run as written (not traced) under torch.compile, its answer a constant of the graph: the
# device and the build fix it for the process (the C++ side caches it per device).
@torch.compiler.assume_constant_result
def hopper_kernels_run_on(family: str, device_index: int) -> bool:
    """Whether CUDA device `device_index` runs the family's Hopper (sm_90a) kernels."""
    return _C._hopper_kernels_run_on(family, device_index)
