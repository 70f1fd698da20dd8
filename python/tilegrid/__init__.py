"""tilegrid: fast, differentiable GPU primitives for deep learning on NVIDIA Hopper.

    import tilegrid as tg
    y = tg.rms_norm(x, weight, eps)
"""

from __future__ import annotations

import torch  # noqa: F401  (tensors cross into the C++ module through DLPack)

from . import _C, distributed, epilogue, nn
from ._torch import install_torch_allocator, uninstall_torch_allocator
from .cross_entropy import cross_entropy
from .flash_attn import flash_attn_func, flash_attn_varlen_func
from .flash_attn_kvcache import flash_attn_with_kvcache
from .flash_attn_packed import (
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)
from .gemm import describe_matmul, linear, matmul
from .grid.batch import GridBatch, gcat, jcat
from .grid.single import Grid
from .grid.serialize import hilbert_codes as hilbert, morton_codes as morton
from .grid.metrics import voxel_chamfer_distance, voxel_iou
from .grid.nvdb_io import load, save
from .grid.jagged_losses import jagged_binary_cross_entropy_with_logits
from .grid.jagged_tensor import JaggedTensor
from .grid.mesh_io import MeshFormatError, read_mesh, read_off, read_ply
from .grid.sparse_conv import ConvolutionPlan
from .grid.volume_render import volume_render
from .linear_cross_entropy import linear_cross_entropy
from .rms_norm import rms_norm, rms_norm_keep_input
from .rope_rotate import rope_rotate
# fVDB's torch-compatible functions (tg.relu, tg.add, tg.sum, ...: torch's, for tensors and
# JaggedTensors alike). Kept out of __all__: a star import would shadow sum, all, any, round
# and pow.
from .grid.torch_jagged import *  # noqa: E402,F401,F403

from ._version import __version__

#: True when the C++ library was compiled with CUDA kernels.
with_cuda: bool = _C.with_cuda

if with_cuda:
    install_torch_allocator()

__all__ = [
    "ConvolutionPlan",
    "Grid",
    "GridBatch",
    "JaggedTensor",
    "MeshFormatError",
    "cross_entropy",
    "describe_matmul",
    "epilogue",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "gcat",
    "hilbert",
    "install_torch_allocator",
    "jagged_binary_cross_entropy_with_logits",
    "jcat",
    "load",
    "linear",
    "linear_cross_entropy",
    "matmul",
    "morton",
    "nn",
    "read_mesh",
    "read_off",
    "read_ply",
    "rms_norm",
    "rms_norm_keep_input",
    "rope_rotate",
    "save",
    "uninstall_torch_allocator",
    "volume_render",
    "voxel_chamfer_distance",
    "voxel_iou",
    "with_cuda",
]
