"""RoPE on interleaved pairs as one pass over a matrix (tilegrid/fusion/rope_rotate.h):

    tg.rope_rotate(x, positions, inv_freq)                    # a new [M, W] tensor
    tg.rope_rotate(dq, positions, inv_freq, inverse=True, out=d[:, :W])   # into d's columns

Pair j of each head of row i, (x[2j], x[2j + 1]) with heads of head_dim = 2 * len(inv_freq)
side by side, is rotated by positions[i] * inv_freq[j] (by minus that when inverse): the
rotation of the QKV product's `rope` epilogue, whose backward this serves. A custom op
(tilegrid::rope_rotate, mutating `out`, with a fake kernel) that torch.compile traces as one
node; in eager mode the C++ op is called directly. Not differentiable itself: its gradient is
the inverse rotation, which callers (the QKV product's backward) apply by this function.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._torch import current_stream, dlpack


@torch.library.custom_op("tilegrid::rope_rotate", mutates_args=("out",))
def _rope_rotate_op(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, inverse: bool,
                    out: torch.Tensor) -> None:
    _C.rope_rotate(dlpack(x), dlpack(positions), dlpack(inv_freq), inverse, dlpack(out),
                   current_stream(x))


@_rope_rotate_op.register_fake
def _(x, positions, inv_freq, inverse, out):
    return None


def _tracing(t: torch.Tensor) -> bool:
    """True under torch.compile / export (fake or functional tensors): use the custom op."""
    return torch.compiler.is_compiling() or type(t) is not torch.Tensor


def rope_rotate(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor,
                inverse: bool = False, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x rotated pair by pair (the module's text); returns `out`. Not differentiable.

    Math in float32 on the GPU, float64 on the CPU; the result is rounded to x's dtype once.

    Args:
        x: [M, W] float32, float16 or bfloat16, the last dimension contiguous, any row
            stride; W a multiple of head_dim = 2 * len(inv_freq) (heads side by side).
        positions: int32 or int64 [M]: the position of each row.
        inv_freq: float32 [head_dim / 2]: pair j of every head turns by positions[i] *
            inv_freq[j].
        inverse: Rotate by minus that angle (the rotation's inverse, its gradient).
            Default False.
        out: Where to write: x's shape and dtype, the last dimension contiguous, any row
            stride that keeps its rows apart (a column block of a wider matrix), or x itself.
            None: a new contiguous tensor.
    """
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if _tracing(x):
        _rope_rotate_op(x, positions, inv_freq, bool(inverse), out)
    else:
        _C.rope_rotate(dlpack(x), dlpack(positions), dlpack(inv_freq), bool(inverse), dlpack(out),
                       current_stream(x))
    return out
