"""Byte-level access to a one-grid .nvdb file that tg.save wrote, for tests that corrupt a
field on purpose (layout: src/grid/io/nvdb_layout.h). Offsets are into the file's bytes."""

from __future__ import annotations

import struct
import zlib

GRID_HEADER, TREE_HEADER, ROOT_HEADER, ROOT_TILE = 672, 64, 96, 32
UPPER, LOWER, LEAF, BLIND_META = 270400, 33856, 96, 288
RECORD = 176


class NvdbFile:
    def __init__(self, data: bytes):
        self.data = bytearray(data)
        (count,) = struct.unpack_from("<H", self.data, 12)
        assert count == 1, "one grid a file"
        self.record = 16
        name_size = self.u32(self.record + 136)
        self.name_at = self.record + RECORD
        self.grid = self.name_at + name_size

    # Plain fields.
    def u32(self, at: int) -> int:
        return struct.unpack_from("<I", self.data, at)[0]

    def u64(self, at: int) -> int:
        return struct.unpack_from("<Q", self.data, at)[0]

    def i64(self, at: int) -> int:
        return struct.unpack_from("<q", self.data, at)[0]

    def put(self, fmt: str, at: int, value) -> None:
        struct.pack_into(fmt, self.data, at, value)

    # Where the parts of the grid lie.
    @property
    def tree(self) -> int:
        return self.grid + GRID_HEADER

    def node_array(self, level: int) -> tuple[int, int]:
        """(file offset of the first node, node count) of leaves (0), lowers (1), uppers (2)."""
        return self.tree + self.u64(self.tree + 8 * level), self.u32(self.tree + 32 + 4 * level)

    @property
    def root(self) -> int:
        return self.tree + self.u64(self.tree + 24)

    def tile(self, t: int) -> int:
        return self.root + ROOT_HEADER + ROOT_TILE * t

    @property
    def tile_count(self) -> int:
        return self.u32(self.root + 24)

    def leaf(self, n: int) -> int:
        start, count = self.node_array(0)
        assert n < count
        return start + LEAF * n

    def blind_meta(self, k: int) -> int:
        return self.grid + self.i64(self.grid + 640) + BLIND_META * k

    def set_channel_name(self, k: int, name: bytes) -> None:
        at = self.blind_meta(k) + 32
        self.data[at : at + 256] = name.ljust(256, b"\0")

    def insert_root_tiles(self, tiles: list[tuple[int, int]]) -> None:
        """Append (key, child offset from the root, as it was before) tiles to the root table,
        moving the nodes and blind data after it and every offset that crosses the gap."""
        gap = ROOT_TILE * len(tiles)
        at = self.tile(self.tile_count)
        for level in range(3):
            if self.node_array(level)[1]:
                self.put("<Q", self.tree + 8 * level, self.u64(self.tree + 8 * level) + gap)
        for t in range(self.tile_count):
            if self.i64(self.tile(t) + 8):
                self.put("<q", self.tile(t) + 8, self.i64(self.tile(t) + 8) + gap)
        if self.u32(self.grid + 648):
            self.put("<q", self.grid + 640, self.i64(self.grid + 640) + gap)
        new = b"".join(struct.pack("<QqIIQ", key, child + gap, 0, 0, 0) for key, child in tiles)
        self.data[at:at] = new
        self.put("<I", self.root + 24, self.tile_count + len(tiles))
        self.put("<Q", self.grid + 32, self.u64(self.grid + 32) + gap)
        for field in (0, 8):
            self.put("<Q", self.record + field, self.u64(self.record + field) + gap)

    def finish(self) -> bytes:
        """The bytes, with the header checksum (CRC-32 from byte 16 of the grid to the end of
        the tree header, NanoVDB 32.6.1 on, or of the root table, before) brought up to date."""
        version = self.u32(self.grid + 16)
        if version >= (32 << 21 | 6 << 10 | 1):
            end = self.tree + TREE_HEADER
        else:
            end = self.root + ROOT_HEADER + ROOT_TILE * self.tile_count
        crc = zlib.crc32(bytes(self.data[self.grid + 16 : end]))
        checksum = self.u64(self.grid + 8)
        self.put("<Q", self.grid + 8, (checksum & ~0xFFFFFFFF) | crc)
        return bytes(self.data)
