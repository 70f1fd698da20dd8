"""Drop-in torch.nn modules backed by tilegrid kernels."""

from .rms_norm import RMSNorm

__all__ = ["RMSNorm"]
