"""Switches for the kernel families tilegrid may choose, like torch.backends.cuda's.

    with tg.backends.hopper_kernels(False):
        y = tg.rms_norm(x, w)   # the generic CUDA kernels, even on an H100/H200
"""

from __future__ import annotations

import contextlib

from . import _C


def hopper_kernels_enabled() -> bool:
    """Whether ops may pick their sm_90a (Hopper) kernels; True by default."""
    return _C.hopper_kernels_enabled()


def enable_hopper_kernels(enabled: bool) -> None:
    """Allow (True) or forbid (False) the sm_90a kernels, process-wide."""
    _C.set_hopper_kernels_enabled(bool(enabled))


@contextlib.contextmanager
def hopper_kernels(enabled: bool):
    """Context manager form of enable_hopper_kernels; restores the previous setting."""
    previous = hopper_kernels_enabled()
    enable_hopper_kernels(enabled)
    try:
        yield
    finally:
        enable_hopper_kernels(previous)
