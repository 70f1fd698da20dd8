"""tg.load on .nvdb files corrupted on purpose: each raises ValueError naming the file and what
was expected and found, in time bounded by the file's size, and never crashes the process."""

import struct
import time

import pytest
import tilegrid as tg
import torch
from nvdb_file import UPPER, NvdbFile

# Two voxels in one leaf, one voxel in each of two more leaves of the same lower node, and one
# in a second upper node: 4 leaves, 2 lower nodes, 2 upper nodes.
IJK = [[0, 0, 0], [1, 0, 0], [8, 0, 0], [16, 0, 0], [5000, 0, 0]]


@pytest.fixture(params=["32.9", "32.4"])
def saved(tmp_path, request):
    """The file in both formats save writes; they differ in the leaf word holding its first
    index (first_index_at)."""
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.tensor(IJK, dtype=torch.int32)]))
    path = tmp_path / "good.nvdb"
    tg.save(path, grid, features=torch.arange(5.0), names="g", nanovdb_version=request.param)
    return NvdbFile(path.read_bytes())


def first_index_at(f: NvdbFile) -> int:
    """Offset in a leaf of its first voxel's index: word 0 from NanoVDB 32.5 on, word 1 before."""
    minor = (f.u32(f.grid + 16) >> 10) & 0x7FF
    return 80 if minor >= 5 else 88


def load_error(tmp_path, data: bytes) -> str:
    path = tmp_path / "bad.nvdb"
    path.write_bytes(data)
    with pytest.raises(ValueError) as error:
        tg.load(path)
    assert type(error.value) is ValueError
    assert str(path) in str(error.value)
    return str(error.value)


def leaf_at(f: NvdbFile, origin) -> int:
    """File offset of the leaf whose origin is `origin`."""
    for n in range(f.node_array(0)[1]):
        at = f.leaf(n)
        if [v & ~7 for v in struct.unpack_from("<3i", f.data, at)] == list(origin):
            return at
    raise AssertionError(f"no leaf at {origin}")


@pytest.mark.parametrize(
    "shape,elements",
    [
        ("float64[2305843009213693952]", 2**61),  # 8 x 2^61 bytes: 0 after wrapping
        ("float32[4611686018427387905]", 2**62 + 1),
        ("float32[4611686018427387904,2]", 2**63),
        ("float32[0,9223372036854775807]", 0),
    ],
)
def test_row_shapes_whose_byte_size_overflows_are_refused(tmp_path, saved, shape, elements):
    value_count = saved.u64(saved.grid + 656)
    saved.set_channel_name(0, f"feature_0:{shape}".encode())
    saved.put("<Q", saved.blind_meta(0) + 8, (elements * value_count) % 2**64)
    message = load_error(tmp_path, saved.finish())
    assert "declares rows of shape" in message
    assert "whose size overflows a 64-bit byte count" in message


def test_a_root_table_listing_one_upper_node_4001_times_is_refused_at_once(tmp_path, saved):
    first_child = saved.i64(saved.tile(0) + 8)
    saved.insert_root_tiles([((t + 3) << 42, first_child) for t in range(4000)])
    data = saved.finish()
    assert len(data) > 128_000
    start = time.perf_counter()
    message = load_error(tmp_path, data)
    assert time.perf_counter() - start < 1.0
    assert "upper node 0 (byte offset" in message
    assert "is the child of two parents: the tree shares or repeats nodes" in message


def test_a_lower_node_shared_by_two_upper_nodes_is_refused(tmp_path, saved):
    uppers, count = saved.node_array(2)
    assert count == 2
    lowers, _ = saved.node_array(1)
    # Point the second upper node's child at the first upper node's lower node.
    child_mask_at, table_at = 4128, 8256  # in an upper node (nvdb_layout.h)
    second = uppers + UPPER
    masks = [saved.u64(second + child_mask_at + 8 * w) for w in range(512)]
    slot = next(64 * w + (m & -m).bit_length() - 1 for w, m in enumerate(masks) if m)
    saved.put("<q", second + table_at + 8 * slot, lowers - second)
    message = load_error(tmp_path, saved.finish())
    assert "lower node 0 (byte offset" in message and "is the child of two parents" in message


def test_leaves_sharing_feature_rows_are_refused(tmp_path, saved):
    at = first_index_at(saved)
    first = saved.u64(leaf_at(saved, (0, 0, 0)) + at)
    saved.put("<Q", leaf_at(saved, (8, 0, 0)) + at, first)
    message = load_error(tmp_path, saved.finish())
    assert f"voxel index {first} belongs to two voxels" in message


def move_mask_bit(f: NvdbFile) -> None:
    """Move voxel (1, 0, 0) to (8, 0, 1): the first leaf counts one voxel fewer, the second one
    more, and the second's indices run into the third's."""
    a, b = leaf_at(f, (0, 0, 0)), leaf_at(f, (8, 0, 0))
    f.put("<Q", a + 16 + 8, 0)  # mask word 1 held bit 64, voxel (1, 0, 0)
    f.put("<Q", b + 16, f.u64(b + 16) | 2)  # bit 1: voxel (8, 0, 1)


def test_a_moved_leaf_mask_bit_is_refused(tmp_path, saved):
    move_mask_bit(saved)
    message = load_error(tmp_path, saved.finish())
    assert ("the leaf at (0, 0, 0) records active voxels from 0 to 1 on axis 0, its mask from 0 "
            "to 0: the tree is corrupt") in message
    # Without leaf bounding boxes (NanoVDB may leave them unset), the overlapping index ranges
    # give it away.
    for n in range(saved.node_array(0)[1]):
        flags_at = saved.leaf(n) + 15
        saved.data[flags_at] &= ~2
    message = load_error(tmp_path, saved.finish())
    assert "belongs to two voxels" in message


def test_a_channel_data_offset_before_the_records_is_refused(tmp_path, saved):
    saved.put("<q", saved.blind_meta(0), -1)
    message = load_error(tmp_path, saved.finish())
    assert "(record offset -1), before the end of the blind data records" in message


def test_a_grid_name_that_is_not_utf8_is_refused_clearly(tmp_path, saved):
    assert saved.data[saved.name_at : saved.name_at + 2] == b"g\0"
    saved.data[saved.name_at] = 0xFF
    message = load_error(tmp_path, saved.finish())
    assert 'grid name "\\xff" is not UTF-8 text' in message


def test_the_crafting_helper_keeps_a_good_file_good(tmp_path, saved):
    path = tmp_path / "same.nvdb"
    path.write_bytes(saved.finish())
    grid, (feature,), names = tg.load(path)
    assert names == ["g"] and grid.total_voxels == 5
    assert sorted(feature.jdata.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]

