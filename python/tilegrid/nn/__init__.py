"""Drop-in torch.nn modules backed by tilegrid kernels."""

from ..cross_entropy import CrossEntropyLoss
from ..linear_cross_entropy import LinearCrossEntropyLoss
from .llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP
from .rms_norm import RMSNorm
from .serialized_attention import SerializedAttention
from .sparse_conv import SparseConv3d, SparseConvTranspose3d
from .sparse_layers import (
    AvgPool,
    AvgPool3d,
    BatchNorm,
    GroupNorm,
    LayerNorm,
    LeakyReLU,
    MaxPool,
    MaxPool3d,
    ReLU,
    SiLU,
    SyncBatchNorm,
    UpsamplingNearest,
)
from .sparse_unet import SparseUNet, SparseUNetPlans

__all__ = [
    "AvgPool",
    "AvgPool3d",
    "BatchNorm",
    "CrossEntropyLoss",
    "GroupNorm",
    "LayerNorm",
    "LeakyReLU",
    "LinearCrossEntropyLoss",
    "LlamaAttention",
    "LlamaDecoderLayer",
    "LlamaMLP",
    "MaxPool",
    "MaxPool3d",
    "RMSNorm",
    "ReLU",
    "SerializedAttention",
    "SiLU",
    "SparseConv3d",
    "SparseConvTranspose3d",
    "SparseUNet",
    "SparseUNetPlans",
    "SyncBatchNorm",
    "UpsamplingNearest",
]
