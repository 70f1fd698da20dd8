"""A sparse U-Net under DDP with tg.nn.SyncBatchNorm: two CPU processes over gloo, each with its
own grid (a JaggedTensor batch split across the ranks), give the gradients and the running
statistics of one process training on both grids as one GridBatch (where BatchNorm sees every
voxel of the batch, as SyncBatchNorm does across the ranks)."""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tilegrid as tg


def _grids_and_features():
    """Two random grids (different voxel counts) and their features, the same on every rank."""
    g = torch.Generator().manual_seed(5)
    grids, feats = [], []
    for n in (260, 340):
        ijk = torch.randint(0, 10, (n, 3), generator=g, dtype=torch.int32)
        grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]))
        grids.append(ijk)
        feats.append(torch.randn(grid.total_voxels, 4, generator=g))
    return grids, feats


def _model():
    torch.manual_seed(0)
    return tg.nn.SparseUNet(4, 3, channels=(8, 16))


def _loss(out: torch.Tensor, total_rows: int, world: int) -> torch.Tensor:
    # The batch mean of out^2; a rank's share times the world size, since DDP averages.
    return out.square().sum() * world / (total_rows * out.shape[1])


def _worker(rank, world, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        ijk, feats = _grids_and_features()
        total = sum(f.shape[0] for f in feats)
        # One process, both grids in one batch.
        ref = _model()
        batch = tg.GridBatch.from_ijk(tg.JaggedTensor(ijk))
        out = ref(tg.JaggedTensor(feats), batch)
        _loss(out.jdata, total, 1).backward()
        # Two processes, a grid each.
        model = torch.nn.parallel.DistributedDataParallel(tg.nn.SyncBatchNorm.convert_sync_batchnorm(_model()))
        mine = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk[rank]]))
        out_r = model(tg.JaggedTensor([feats[rank]]), mine)
        _loss(out_r.jdata, total, world).backward()
        offset = sum(f.shape[0] for f in feats[:rank])
        torch.testing.assert_close(out_r.jdata, out.jdata[offset:offset + feats[rank].shape[0]],
                                   atol=1e-5, rtol=1e-4, msg="outputs")
        ref_params = dict(ref.named_parameters())
        for name, p in model.module.named_parameters():
            torch.testing.assert_close(p.grad, ref_params[name].grad, atol=1e-6, rtol=1e-4, msg=f"grad {name}")
        ref_buffers = dict(ref.named_buffers())
        synced = 0
        for name, b in model.module.named_buffers():
            torch.testing.assert_close(b, ref_buffers[name], atol=1e-6, rtol=1e-5, msg=f"buffer {name}")
            synced += name.endswith("running_mean")
        assert synced >= 4
    finally:
        dist.destroy_process_group()


def test_sparse_unet_under_ddp_with_sync_batch_norm_trains_as_one_process():
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(2, os.path.join(tmp, "init")), nprocs=2, join=True)


def test_sync_batch_norm_without_a_group_is_batch_norm():
    x = torch.randn(50, 6)
    a, b = tg.nn.BatchNorm(6), tg.nn.SyncBatchNorm(6)
    torch.testing.assert_close(b(x), a(x))
    torch.testing.assert_close(b.running_var, a.running_var)
    net = tg.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.Sequential(tg.nn.BatchNorm(6), tg.nn.ReLU()))
    assert isinstance(net[0], tg.nn.SyncBatchNorm) and not isinstance(net[1], tg.nn.SyncBatchNorm)
