import struct

import pytest
import torch

import tilegrid as tg

from conftest import DEVICES


def random_grid(sizes, spread=500, device="cpu"):
    parts = []
    for n in sizes:
        centre = torch.randint(-(1 << 24), 1 << 24, (1, 3), dtype=torch.int32)
        parts.append(centre + torch.randint(-spread, spread, (n, 3), dtype=torch.int32))
    ijk = tg.JaggedTensor(parts).to(device)
    sizes_ = torch.rand(len(sizes), 3, dtype=torch.float64) + 0.1
    origins = torch.randn(len(sizes), 3, dtype=torch.float64) * 10
    return tg.GridBatch.from_ijk(ijk, voxel_sizes=sizes_, origins=origins)


def random_features(n):
    return [
        torch.randn(n),
        torch.randn(n, 3, dtype=torch.float64),
        torch.randint(-(1 << 40), 1 << 40, (n, 2, 3)),
        torch.randint(-100, 100, (n,), dtype=torch.int32),
        torch.randn(n, 4).to(torch.float16),
        torch.randn(n, 2).to(torch.bfloat16),
        torch.randint(0, 256, (n, 5), dtype=torch.uint8),
        torch.rand(n) > 0.5,
    ]


def assert_same_grid(a, b):
    assert a.num_grids == b.num_grids
    assert torch.equal(a.voxel_offsets.cpu(), b.voxel_offsets.cpu())
    assert torch.equal(a.voxel_sizes, b.voxel_sizes)
    assert torch.equal(a.origins, b.origins)
    assert torch.equal(a.ijk.jdata.cpu(), b.ijk.jdata.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_round_trip_keeps_voxels_transforms_features_and_names(tmp_path, device):
    grid = random_grid([1500, 0, 200, 1], device=device)
    features = [f.to(device) for f in random_features(grid.total_voxels)]
    path = tmp_path / "batch.nvdb"
    tg.save(path, grid, features=features, names=["a", "b", "c", "d"])
    back, back_features, names = tg.load(path, device=device)
    assert back.device.type == torch.device(device).type
    assert_same_grid(grid, back)
    assert names == ["a", "b", "c", "d"]
    assert len(back_features) == len(features)
    for given, got in zip(features, back_features):
        assert isinstance(got, tg.JaggedTensor)
        assert got.jdata.dtype == given.dtype and got.jdata.shape == given.shape
        assert torch.equal(got.jdata, given)
        assert torch.equal(got.joffsets.cpu(), grid.voxel_offsets.cpu())


def test_features_as_one_jagged_tensor_or_tensor_and_default_names(tmp_path):
    grid = random_grid([300, 50])
    colors = torch.rand(grid.total_voxels, 3, requires_grad=True)
    jagged = tg.JaggedTensor.from_data_and_offsets(colors.detach().clone(), grid.voxel_offsets)
    for features in (jagged, colors):
        tg.save(tmp_path / "one.nvdb", grid, features=features)
        _, (back,), names = tg.load(tmp_path / "one.nvdb")
        assert torch.equal(back.jdata, colors.detach())
        assert names == ["grid_0", "grid_1"]
    tg.save(str(tmp_path / "none.nvdb"), grid, names="scan")
    back_grid, back_features, names = tg.load(str(tmp_path / "none.nvdb"))
    assert_same_grid(grid, back_grid)
    assert back_features == [] and names == ["scan", "scan"]


def test_empty_grids_and_extreme_coordinates(tmp_path):
    big, small = 2**31 - 1, -(2**31)
    ijk = tg.JaggedTensor(
        [
            torch.zeros(0, 3, dtype=torch.int32),
            torch.tensor([[big, big, big], [small, small, small], [0, -1, 5]], dtype=torch.int32),
            torch.zeros(0, 3, dtype=torch.int32),
        ]
    )
    grid = tg.GridBatch.from_ijk(ijk)
    values = torch.arange(3.0)
    tg.save(tmp_path / "x.nvdb", grid, features=values)
    back, (feature,), _ = tg.load(tmp_path / "x.nvdb")
    assert_same_grid(grid, back)
    assert torch.equal(feature.jdata, values)


@pytest.mark.parametrize("version", [None, "32.9", "32.4"])
def test_file_is_a_nanovdb_index_grid_file(tmp_path, version):
    """The framing NanoVDB's reader checks: magic, version, one record per grid naming it,
    GridType OnIndex (20; NanoVDB 32.9, the default) or Index (19; 32.4) and
    GridClass::IndexGrid (8)."""
    grid = random_grid([10, 20])
    kwargs = {} if version is None else {"nanovdb_version": version}
    tg.save(tmp_path / "g.nvdb", grid, names=["first", "second"], **kwargs)
    data = (tmp_path / "g.nvdb").read_bytes()
    magic, packed, count, codec = struct.unpack_from("<QIHH", data, 0)
    new = version != "32.4"
    assert magic.to_bytes(8, "little") == (b"NanoVDB2" if new else b"NanoVDB0")
    assert (packed >> 21, (packed >> 10) & 0x7FF) == ((32, 9) if new else (32, 4))
    assert count == 2 and codec == 0
    record = struct.unpack_from("<QQQQII", data, 16)
    grid_size, file_size, _, voxel_count, grid_type, grid_class = record
    name_size = struct.unpack_from("<I", data, 16 + 136)[0]
    assert data[16 + 176 : 16 + 176 + name_size] == b"first\0"
    assert (voxel_count, grid_type, grid_class) == (grid.num_voxels_at(0), 20 if new else 19, 8)
    assert grid_size == file_size


def test_bad_arguments_and_files_get_clear_errors(tmp_path):
    grid = random_grid([20, 10])
    with pytest.raises(ValueError, match="one row per active voxel"):
        tg.save(tmp_path / "a.nvdb", grid, features=torch.zeros(grid.total_voxels + 1))
    n0, n1 = grid.num_voxels_at(0), grid.num_voxels_at(1)
    wrong_split = tg.JaggedTensor([torch.zeros(n0 - 1), torch.zeros(n1 + 1)])
    with pytest.raises(ValueError, match="jagged as"):
        tg.save(tmp_path / "a.nvdb", grid, features=wrong_split)
    with pytest.raises(ValueError, match="one entry per grid"):
        tg.save(tmp_path / "a.nvdb", grid, names=["only one"])
    with pytest.raises(TypeError, match="GridBatch"):
        tg.save(tmp_path / "a.nvdb", torch.zeros(3))
    # Of the wrong kind: a TypeError naming the argument, not the binding's signature.
    with pytest.raises(TypeError, match=r"save: names\[1\] must be a str, got int \(7\)"):
        tg.save(tmp_path / "a.nvdb", grid, names=["a", 7])
    with pytest.raises(TypeError, match="load: path must be a str or an os.PathLike of str, got bytes"):
        tg.load(bytes(tmp_path / "a.nvdb"))
    with pytest.raises(TypeError, match="save: path must be a str or os.PathLike, got int"):
        tg.save(3, grid)
    for dtype in (torch.int16, torch.complex64):  # DLPack would refuse them naming nothing
        with pytest.raises(TypeError, match=rf"save: features\[0\] must be bool, .* got {str(dtype)[6:]}"):
            tg.save(tmp_path / "a.nvdb", grid, features=torch.zeros(grid.total_voxels, dtype=dtype))
    with pytest.raises(RuntimeError, match="cannot open"):
        tg.load(tmp_path / "absent.nvdb")
    (tmp_path / "text.nvdb").write_bytes(b"solid cube\nfacet normal 0 0 1\n")
    with pytest.raises(ValueError, match="not a NanoVDB file"):
        tg.load(tmp_path / "text.nvdb")
    tg.save(tmp_path / "good.nvdb", grid)
    data = (tmp_path / "good.nvdb").read_bytes()
    (tmp_path / "short.nvdb").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated"):
        tg.load(tmp_path / "short.nvdb")


def test_save_nanovdb_is_fvdbs_name_for_save(tmp_path, capsys):
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([torch.randint(0, 9, (20, 3)), torch.randint(0, 9, (5, 3))]))
    features = torch.randn(grid.total_voxels, 2)
    path = tmp_path / "g.nvdb"
    grid.save_nanovdb(str(path), data=grid.jagged_like(features), names=["a", "b"], name="both", verbose=True)
    assert "2 grids" in capsys.readouterr().out
    loaded, data, names = tg.load(path)
    assert names == ["both", "both"] and torch.equal(data[0].jdata, features)
    assert torch.equal(loaded.ijk.jdata, grid.ijk.jdata)
    with pytest.raises(NotImplementedError, match="compressed"):
        grid.save_nanovdb(str(path), compressed=True)
