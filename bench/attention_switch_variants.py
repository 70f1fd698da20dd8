"""The Hopper attention forward's variants that bench_attention.py times, as data: a name in
its tables and the sm90::Switches bits (src/attention/sm90/flash_fwd_sm90.h) that select it.
Shared with attention_defaults_table.py, which turns a run's timings into the table of
default variants the library dispatches by."""

from __future__ import annotations

# The bits by their names in sm90::Switches.
SWITCH_NAMES = {
    1: "kConditionalRescale", 2: "kSoftwareExp2", 4: "kPingPong", 8: "kThreeConsumerWarpgroups",
    16: "kWideKeyTiles", 32: "kPersistent", 64: "kDynamicTiles", 128: "kKeyValueMulticast",
    512: "kDirectStoreO",
}

# Bits: 1 conditional rescaling, 2 software exp2, 4 ping-pong, 8 three consumer warpgroups
# (head dim 64 only), 16 wider key tiles (176 at head dim 128, 80 at 256), 32 persistent CTAs
# looping over tiles, 64 (with 32) dynamic tiles, 128 clusters of two CTAs sharing K/V loads
# (head dims 128 and 256; applies without a mask and with an even number of query tiles, else
# runs as without it), 512 the output from registers where the kernel would store it by TMA.
SWITCH_VARIANTS = [
    ("sm90 plain", 0),
    ("sm90 rescale", 1),
    ("sm90 ping-pong", 4),
    ("sm90 ping-pong+rescale", 5),
    ("sm90 ping-pong+exp2", 6),
    ("sm90 ping-pong+both", 7),
    ("sm90 3wg", 8),
    ("sm90 3wg+ping-pong", 12),
    ("sm90 wide-n", 16),
    ("sm90 wide-n+ping-pong", 20),
    ("sm90 persistent", 32),
    ("sm90 ping-pong+persistent", 36),
    ("sm90 persistent+dynamic", 96),
    ("sm90 ping-pong+persistent+dynamic", 100),
    ("sm90 3wg+ping-pong+persistent+dynamic", 108),
    ("sm90 wide-n+persistent", 48),
    # FlashAttention-3's choice with a causal mask at head dim 256: 128 x 80 tiles taken
    # dynamically by persistent CTAs (tile_size_fwd_sm90, DynamicPersistentTileScheduler).
    ("sm90 wide-n+persistent+dynamic", 112),
    ("sm90 wide-n+ping-pong+persistent+dynamic", 116),
    ("sm90 kv-multicast", 128),
    ("sm90 wide-n+kv-multicast", 144),
    ("sm90 wide-n+kv-multicast+ping-pong", 148),
    ("sm90 3wg+ping-pong+persistent", 44),
    ("sm90 direct-store-o", 512),
    ("sm90 persistent+direct-store-o", 544),
]

# Variants whose bits apply at some head dims only (elsewhere the kernel ignores them, and the
# benchmark skips their rows).
ONLY_AT_HEAD_DIM = {"3wg": (64,), "wide-n": (128, 256), "kv-multicast": (128, 256)}


def runs_at(name: str, head_dim: int) -> bool:
    return all(head_dim in dims for key, dims in ONLY_AT_HEAD_DIM.items() if key in name)


def switch_expression(bits: int) -> str:
    """bits as the C++ expression of sm90::Switches names: 36 -> 'kPingPong | kPersistent'."""
    if bits == 0:
        return "kNoSwitches"
    unknown = bits & ~sum(SWITCH_NAMES)
    if unknown:
        raise ValueError(f"unknown switch bits {unknown} in {bits}")
    return " | ".join(name for bit, name in sorted(SWITCH_NAMES.items()) if bits & bit)
