"""tilegrid.nn.RMSNorm: the parameters and state_dict of torch.nn.RMSNorm."""

from __future__ import annotations

import math
import numbers
from typing import Optional, Union

import torch

from ..rms_norm import rms_norm


class RMSNorm(torch.nn.Module):
    """Same constructor, parameter (`weight`) and defaults as torch.nn.RMSNorm, so that a
    model's modules and checkpoints swap either way. Normalises over the trailing
    `normalized_shape` dimensions, which must be contiguous in the input, with tg.rms_norm.

    Args:
        normalized_shape: The trailing dimensions normalised over: an int or a list of ints.
        eps: Added to the mean square; None (default): torch's default, the machine epsilon
            of the dtype the math runs in (float32 for float16 and bfloat16 inputs).
        elementwise_affine: Whether there is a learnable weight of normalized_shape,
            initialised to ones; default True.
        device: The weight's device.
        dtype: The weight's dtype.
    """

    def __init__(
        self,
        normalized_shape: Union[int, list[int], torch.Size],
        eps: Optional[float] = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(
                torch.empty(self.normalized_shape, device=device, dtype=dtype)
            )
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(
                f"RMSNorm: input's trailing dimensions must be {list(self.normalized_shape)}, "
                f"got shape {list(x.shape)}"
            )
        if k == 1:
            return rms_norm(x, self.weight, self.eps)
        hidden = math.prod(self.normalized_shape)
        weight = self.weight.reshape(hidden) if self.weight is not None else None
        y = rms_norm(x.reshape(*x.shape[:-k], hidden), weight, self.eps)
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}"
        )
