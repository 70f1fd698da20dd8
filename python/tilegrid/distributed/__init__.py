"""Multi-GPU pieces over torch.distributed: context-parallel (ring) attention."""

from .ring_attention import (
    ring_flash_attn_func,
    ring_flash_attn_varlen_func,
    zigzag_ring_flash_attn_func,
    zigzag_ring_flash_attn_varlen_func,
    zigzag_shard,
    zigzag_unshard,
)

__all__ = [
    "ring_flash_attn_func",
    "ring_flash_attn_varlen_func",
    "zigzag_ring_flash_attn_func",
    "zigzag_ring_flash_attn_varlen_func",
    "zigzag_shard",
    "zigzag_unshard",
]
