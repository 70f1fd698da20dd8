"""Sparse 3D convolution on the GPU: tilegrid vs spconv 2.x and TorchSparse 2.1 (each when it
imports) on the same grids, in one run. TorchSparse has no wheel: build it from source
(github.com/mit-han-lab/torchsparse, with the sparsehash headers) and put it on PYTHONPATH.

    python bench/bench_sparse_conv.py --out results.json [--channels 32 64 128 256] [--large]
        [--bunny] [--unet]

Scene: a synthetic surface scan (a ground plane of 20 x 20 m with 40 boxes standing on it,
surfaces sampled densely at voxel size 0.05 m: ~485k voxels, ~9.5 kernel-map pairs a voxel), the
shape of an indoor scan or a LiDAR sweep. --large adds the 40 x 40 m scene at 0.025 m (~5M
voxels) at 256 channels, forward only (spconv 2.3.8 fails it with an int32 overflow).
Layer: a submanifold 3x3x3 convolution C -> C without bias, maps built once and reused (spconv's
indice_key; TorchSparse: the kernel map cached with the first output); fp16 and bf16. Forward systems: "tilegrid" (the default kernels: Hopper's on an
H200, rows in the plan's tap-mask order), "tilegrid rows in tree order" (the same plan without
its row orders) and "tilegrid WMMA tiles" (TILEGRID_SPARSE_CONV_KERNEL=mma). Effective TFLOP/s = 2 * pairs * C^2 / time, pairs = the map's
(input, output) pairs. Also timed: building the 3x3x3 map (tilegrid: the ConvolutionPlan with its
inverse; spconv: the first call of a layer, map + convolution, minus the convolution).
--unet: inference of tg.nn.SparseUNet (4 levels, channels 32-256, fp16) on the scene and of the
same architecture in spconv and TorchSparse (bench/sparse_unet_peers.py: the same layers with
tilegrid's weights copied in, each peer's output checked against tilegrid's), with the maps built
in the call and with them reused as each library reuses them.

TorchSparse 2.1 is best run in a process of its own for each channel count (spconv's module
hidden from it): on an H200, one process that ran its Conv3d at C = 64 and then at 128 got an
impossible time at 128 (0.05 ms) and then an illegal memory access, while one process a
configuration gave outputs within 4e-4 of tilegrid's. For example:

    PYTHONPATH=<torchsparse build> python bench/bench_sparse_conv.py --out ts128.json \
        --dtypes float16 --channels 128
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import sparse_unet_peers as peers  # noqa: E402

import tilegrid as tg  # noqa: E402
from tilegrid.kernel_choice import override  # noqa: E402


def scene(extent: float, voxel: float, density: int = 16, seed: int = 0) -> torch.Tensor:
    """int32 [N, 3] voxel coordinates of the surface scene (>= 0)."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    per_m2 = density / voxel**2
    ground = torch.rand(int(per_m2 * extent**2), 3, device=dev, generator=g) * torch.tensor([extent, extent, 0.0], device=dev)
    boxes = int(extent * 2)
    lo = torch.rand(boxes, 3, device=dev, generator=g) * torch.tensor([extent, extent, 0.0], device=dev)
    size = torch.rand(boxes, 3, device=dev, generator=g) * torch.tensor([3.0, 3.0, 4.0], device=dev) + 0.3
    area = 2 * (size[:, 0] * size[:, 1] + size[:, 1] * size[:, 2] + size[:, 0] * size[:, 2])
    m = int(per_m2 * float(area.sum()))
    box = torch.multinomial(area, m, replacement=True, generator=g)
    u = torch.rand(m, 3, device=dev, generator=g)
    face = torch.randint(0, 3, (m,), device=dev, generator=g)
    side = torch.randint(0, 2, (m,), device=dev, generator=g).float()
    u[torch.arange(m, device=dev), face] = side
    pts = torch.cat([ground, lo[box] + u * size[box]])
    ijk = torch.unique(torch.floor(pts / voxel).int(), dim=0)
    return (ijk - ijk.min(0).values).contiguous()


def spconv_layer(spconv, ijk, features, weight):
    """spconv's SubMConv3d with our weight ([C_out, C_in, 3, 3, 3] -> its [C_out, 3, 3, 3, C_in]),
    on the voxels moved to non-negative coordinates (spconv's indices must lie in its spatial
    shape; a mesh's grid has negative ones, which it would not find as neighbours)."""
    c = weight.shape[0]
    ijk = ijk - ijk.min(0).values
    conv = spconv.SubMConv3d(c, c, 3, bias=False, indice_key="bench").to(features.device, features.dtype)
    with torch.no_grad():
        conv.weight.copy_(peers.spconv_weight(weight))
    indices = torch.cat([torch.zeros(ijk.shape[0], 1, dtype=torch.int32, device=ijk.device), ijk], 1)
    shape = (ijk.max(0).values + 1).tolist()
    make = lambda f: spconv.SparseConvTensor(f, indices, shape, 1)  # noqa: E731
    return conv, make


def torchsparse_layer(ts, ijk, features, weight):
    """TorchSparse 2.1's Conv3d (k 3, stride 1: submanifold) with our weight in its [27, C_in,
    C_out] kernel, whose offset index is z * 9 + y * 3 + x (x fastest, for MinkowskiEngine's
    layout), on the same voxels as (batch, x, y, z) coordinates moved to non-negative ones.
    make(f, caches) is a SparseTensor of features f; given the caches of an earlier output,
    it reuses that call's kernel map, as the layers of a TorchSparse network share theirs."""
    c = weight.shape[0]
    conv = ts.nn.Conv3d(c, c, 3, bias=False).to(features.device, features.dtype)
    with torch.no_grad():
        conv.kernel.copy_(peers.torchsparse_weight(weight))
    ijk = ijk - ijk.min(0).values
    coords = torch.cat([torch.zeros(ijk.shape[0], 1, dtype=torch.int32, device=ijk.device),
                        ijk.int()], 1)

    def make(f, caches=None):
        t = ts.SparseTensor(f, coords)
        if caches is not None:
            t._caches = caches
        return t
    return conv, make


def with_kernel(kernel: str, fn):
    """fn run with the sparse_conv kernel choice `kernel` (auto, mma or simt; asked by the
    dispatcher at each call, so also when a CUDA graph is captured)."""
    def run(i):
        with override("sparse_conv", kernel):
            return fn(i)
    return run


def forward_runs(report, spconv, label: str, grid, channels) -> None:
    """fp16 forward of the submanifold 3x3x3 layer on another scene: tilegrid and spconv."""
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    pairs = int((plan.kernel_map >= 0).sum())
    n = grid.total_voxels
    report.checks[f"scene {label}"] = {"voxels": n, "pairs": pairs, "pairs_per_voxel": pairs / max(n, 1)}
    for c in channels:
        flops = 2 * pairs * c * c
        sets = harness.rotation_count(n * c * 2)
        xs = [torch.randn(n, c, device="cuda", dtype=torch.float16) for _ in range(sets)]
        w = (torch.randn(c, c, 3, 3, 3, device="cuda") / (27 * c) ** 0.5).half()
        systems = [("tilegrid", lambda i: plan.execute(xs[i], w))]
        if spconv is not None:
            try:
                conv, make = spconv_layer(spconv, grid.ijk.jdata, xs[0], w)
                out = conv(make(xs[0]))
                ref, ours = out.features.float(), plan.execute(xs[0], w).float()
                err = ((ref - ours).abs().max() / ref.abs().max()).item()
                report.checks[f"spconv vs tilegrid {label} C={c}"] = f"max relative difference {err:.2e}"
                shared = out.indice_dict
                tensors = [make(x) for x in xs]
                for t in tensors:
                    t.indice_dict = shared
                systems.append(("spconv SubMConv3d", lambda i: conv(tensors[i]).features))
            except Exception as e:  # e.g. spconv's int32 limit on large grids: recorded, not fatal
                report.checks[f"spconv {label} C={c}"] = f"failed: {type(e).__name__}: {str(e)[-200:]}"
        harness.run_each(report, "forward float16", f"{label}: {n} voxels, C={c}", None, systems,
                         sets=sets, rounds=2, iters=20,
                         extra=lambda _n, ms, f=flops: {"effective_tflops": f / (ms * 1e-3) / 1e12})
        for r in report.results[-len(systems):]:
            r.flops = flops


def unet_runs(report, grid, label: str, spconv=None, torchsparse=None) -> None:
    """Inference of tg.nn.SparseUNet (channels 32-256, 4 levels, fp16) on the scene, and of the same
    architecture in spconv and TorchSparse when they import (sparse_unet_peers: the same layers
    with tilegrid's weights copied in, outputs checked against tilegrid's): with the maps built
    in the call, and with them reused."""
    net = tg.nn.SparseUNet(1, 8, channels=(32, 64, 128, 256)).cuda().half().eval()
    feats = tg.JaggedTensor.from_data_and_offsets(
        torch.ones(grid.total_voxels, 1, device="cuda", dtype=torch.float16), grid.voxel_offsets)
    problem = f"{label}: {grid.total_voxels} voxels"

    def with_maps(_):
        net._cached = None  # the plans are built again
        return net(feats, grid).jdata

    def plans(_):
        return tg.nn.SparseUNetPlans(grid, net.levels)

    def plans_up_built_anew(_):
        # The level plans with the way up built as its own plans (as before
        # ConvolutionPlan.transpose()): what transposing the down plans saves.
        p = tg.nn.SparseUNetPlans(grid, net.levels)
        return [tg.ConvolutionPlan.from_grid_batch_transposed(2, 2, c, f) for f, c in zip(p.grids, p.grids[1:])]

    with torch.no_grad():
        harness.run_each(report, "SparseUNet inference", problem, None,
                         [("tilegrid with maps", with_maps),
                          ("tilegrid maps reused", lambda _: net(feats, grid).jdata)],
                         sets=1, rounds=2, graph=False, iters=5)
        # And the plans' parts, for where their time goes: the coarser grids alone, and the
        # submanifold and down plans on grids built once.
        levels = tg.nn.SparseUNetPlans(grid, net.levels).grids

        def coarser_grids(_):
            g = grid
            return [g := g.conv_grid(2, 2) for _ in range(net.levels - 1)]

        harness.run_each(report, "SparseUNet level plans", problem, None,
                         [("tilegrid", plans), ("tilegrid, way up built anew", plans_up_built_anew),
                          ("coarser grids alone", coarser_grids),
                          ("submanifold plans alone", lambda _: [
                              tg.ConvolutionPlan.from_grid_batch(3, 1, g, g) for g in levels]),
                          ("down plans alone", lambda _: [
                              tg.ConvolutionPlan.from_grid_batch(2, 2, f, c) for f, c in zip(levels, levels[1:])])],
                         sets=1, rounds=2, graph=False, iters=5)
        if spconv is None and torchsparse is None:
            return
        ref = net(feats, grid).jdata
        coords, shape, batch = peers.voxels(grid, net.levels)  # rows in ref's order
        x = feats.jdata
        if spconv is not None:
            peer_unet_runs(
                report, "spconv", problem, ref, coords, shape, lambda: peers.spconv_unet(spconv, net),
                lambda maps: peers.spconv_input(spconv, x, coords, shape, batch, maps),
                peers.spconv_maps, "spconv subm maps reused",
                "the submanifold maps only: spconv reuses a strided convolution's indice_key within "
                "one forward but not across calls (SparseConv3d asserts 'only support reuse subm "
                "indices'), so its stride-2 maps are built in every call")
        if torchsparse is not None:
            peer_unet_runs(
                report, "TorchSparse", problem, ref, coords, shape,
                lambda: peers.torchsparse_unet(torchsparse, net),
                lambda caches: peers.torchsparse_input(torchsparse, x, coords, shape, batch, caches),
                peers.torchsparse_maps, "TorchSparse maps reused")


def peer_unet_runs(report, system: str, problem: str, ref, coords, shape, build, make, maps_of,
                   reused_name: str, reuse_note: str = "") -> None:
    """One peer's U-Net (build()) checked against tilegrid's output ref on the same voxels
    (coords, ref's rows), then timed: make(None) is an input whose maps the call builds,
    make(maps_of(output)) one that reuses an earlier call's (what reuse_note, if any, says of
    the reused row is recorded beside it). Any failure is recorded, not fatal."""
    try:
        peer = build()
        first = peer(make(None))
        maps = maps_of(first)
        again = peer(make(maps))
        report.checks[f"{system} U-Net vs tilegrid ({problem})"] = (
            f"with maps: {output_difference(coords, ref, first, shape)}; "
            f"maps reused: {output_difference(coords, ref, again, shape)}")
        if reuse_note:
            report.checks[f"{reused_name} ({problem})"] = reuse_note
        first = again = None
        harness.run_each(report, "SparseUNet inference", problem, None,
                         [(f"{system} with maps", lambda _: peers.features(peer(make(None)))),
                          (reused_name, lambda _: peers.features(peer(make(maps))))],
                         sets=1, rounds=2, graph=False, iters=5)
    except Exception as e:  # recorded, not fatal
        report.checks[f"{system} U-Net"] = f"failed: {type(e).__name__}: {str(e)[-200:]}"


def output_difference(coords, ref, out, shape) -> str:
    """max |out - ref| / max |ref| over the voxels, rows matched by coordinates (a peer may order
    its rows otherwise): both sides sorted by the linear index of (batch, x, y, z) in `shape`.
    coords: the (batch, x, y, z) of ref's rows; out: a peer's output tensor."""
    def by_voxel(c):
        c = c.long()
        return torch.sort(((c[:, 0] * shape[0] + c[:, 1]) * shape[1] + c[:, 2]) * shape[2] + c[:, 3])

    ref_keys, ref_rows = by_voxel(coords)
    out_keys, out_rows = by_voxel(peers.coordinates(out))
    if not torch.equal(ref_keys, out_keys):
        return (f"outputs not compared: the peer's {out_keys.numel()} output voxels are not the "
                f"{ref_keys.numel()} input voxels")
    a, b = ref[ref_rows].float(), peers.features(out)[out_rows].float()
    return f"max relative difference {((a - b).abs().max() / a.abs().max()).item():.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--channels", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--bunny", action="store_true",
                        help="also the Stanford Bunny voxelized by from_mesh at 1024 and 2048 across "
                             "(bunny00.off from scripts/fetch_models.sh), forward fp16 at --channels")
    parser.add_argument("--unet", action="store_true",
                        help="also SparseUNet inference on the surface scene, maps built and reused: "
                             "tilegrid's, and the same net in spconv and TorchSparse")
    parser.add_argument("--no-scene", action="store_true",
                        help="skip the per-channel runs on the surface scene (for a run of "
                             "--unet / --bunny / --large alone)")
    parser.add_argument("--budget-s", type=float, default=1e9,
                        help="skip the remaining configurations after this many seconds (the JSON "
                             "is written after each one, so a cut-off run keeps what it measured)")
    args = parser.parse_args()
    start = time.time()

    report = harness.Report("sparse convolution (submanifold 3x3x3, maps reused)")
    report.measure_ceilings()
    spconv, error = harness.optional_import("spconv.pytorch")
    report.checks["spconv"] = f"spconv {harness.optional_import('spconv')[0].__version__}" if spconv else f"not measured: {error}"
    torchsparse, ts_error = harness.optional_import("torchsparse")
    if torchsparse is not None:
        import torchsparse.nn  # noqa: F401  (the Conv3d module)
    report.checks["TorchSparse"] = (f"TorchSparse {torchsparse.__version__}" if torchsparse
                                    else f"not measured: {ts_error}")

    ijk = scene(20, 0.05)
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([ijk]))
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    pairs = int((plan.kernel_map >= 0).sum())
    n = grid.total_voxels
    problem = f"{n} voxels"
    report.checks["scene"] = {"voxels": n, "pairs": pairs, "pairs_per_voxel": pairs / n}
    # tilegrid's rows are in tree order; spconv gets the same voxels in that order.
    rows_ijk = grid.ijk.jdata

    # The same plan without its row orders (tiles of rows in tree order), to show what the
    # ordering is worth.
    unordered = copy.copy(plan)
    unordered.row_order = unordered.inverse_row_order = plan.row_order.new_empty(0)
    unordered.map_in_row_order = unordered.inverse_map_in_row_order = plan.row_order.new_empty(0)

    def plan_build(_):
        return tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)

    map_systems = [("tilegrid ConvolutionPlan", plan_build)]
    harness.run_each(report, "3x3x3 kernel map", problem, None, map_systems, sets=1, graph=False, iters=20)

    for dtype_name in [] if args.no_scene else args.dtypes:
        dtype = getattr(torch, dtype_name)
        for c in args.channels:
            flops = 2 * pairs * c * c
            sets = harness.rotation_count(n * c * 2)
            xs = [torch.randn(n, c, device="cuda", dtype=dtype) for _ in range(sets)]
            gs = [torch.randn(n, c, device="cuda", dtype=dtype) for _ in range(sets)]
            w = (torch.randn(c, c, 3, 3, 3, device="cuda") / (27 * c) ** 0.5).to(dtype)
            tflops = lambda _name, ms, f=flops: {"effective_tflops": f / (ms * 1e-3) / 1e12}  # noqa: E731
            fwd = [("tilegrid", lambda i: plan.execute(xs[i], w)),
                   ("tilegrid rows in tree order", lambda i: unordered.execute(xs[i], w)),
                   ("tilegrid WMMA tiles", with_kernel("mma", lambda i: plan.execute(xs[i], w)))]
            wg = w.clone().requires_grad_()
            xg = [x.clone().requires_grad_() for x in xs]

            def tg_train(i):
                plan.execute(xg[i], wg).backward(gs[i])

            train = [("tilegrid", tg_train)]
            if spconv is not None:
                conv, make = spconv_layer(spconv, rows_ijk, xs[0], w)
                warm = make(xs[0])
                try:
                    out = conv(warm)
                    ref = out.features
                    shared = out.indice_dict  # the map built by the first call
                    ours = plan.execute(xs[0], w)
                    err = ((ref.float() - ours.float()).abs().max() / ref.float().abs().max()).item()
                    report.checks[f"spconv vs tilegrid {dtype_name} C={c}"] = f"max relative difference {err:.2e}"
                    tensors = [make(x) for x in xs]
                    for t in tensors:
                        t.indice_dict = shared  # maps reused, as an indice_key does
                    fwd.append(("spconv SubMConv3d", lambda i: conv(tensors[i]).features))
                    tensors_g = [make(x) for x in xg]
                    for t in tensors_g:
                        t.indice_dict = shared

                    def sp_train(i):
                        conv(tensors_g[i]).features.backward(gs[i])

                    train.append(("spconv SubMConv3d", sp_train))
                    if c == args.channels[0] and dtype_name == args.dtypes[0]:
                        def sp_map(i):
                            return conv(make(xs[i % sets])).features
                        harness.run_each(report, "3x3x3 map + conv", problem, None,
                                         [("spconv first call", sp_map),
                                          ("tilegrid plan + conv", lambda i: plan_build(i).execute(xs[i], w))],
                                         sets=sets, graph=False, iters=20)
                except Exception as e:  # spconv has no bf16: recorded, not fatal
                    report.checks[f"spconv {dtype_name} C={c}"] = f"failed: {type(e).__name__}: {str(e)[:160]}"
            if torchsparse is not None:
                try:
                    ts_conv, ts_make = torchsparse_layer(torchsparse, rows_ijk, xs[0], w)
                    first = ts_conv(ts_make(xs[0]))
                    ref = first.feats.float()
                    err = ((ref - plan.execute(xs[0], w).float()).abs().max() / ref.abs().max()).item()
                    report.checks[f"TorchSparse vs tilegrid {dtype_name} C={c}"] = f"max relative difference {err:.2e}"
                    ts_in = [ts_make(x, first._caches) for x in xs]
                    fwd.append(("TorchSparse Conv3d", lambda i: ts_conv(ts_in[i]).feats))
                    ts_train_in = [ts_make(x, first._caches) for x in xg]

                    def ts_train(i):
                        ts_conv(ts_train_in[i]).feats.backward(gs[i])

                    train.append(("TorchSparse Conv3d", ts_train))
                except Exception as e:  # recorded, not fatal
                    report.checks[f"TorchSparse {dtype_name} C={c}"] = f"failed: {type(e).__name__}: {str(e)[-200:]}"
            if time.time() - start > args.budget_s:
                report.checks[f"{dtype_name} C={c}"] = "not measured: past --budget-s"
                continue
            # TorchSparse's forward cannot be captured in a CUDA graph (its capture comes back
            # empty, timing nothing): with it in the run every system is timed launch by launch.
            harness.run_each(report, f"forward {dtype_name}", f"{problem}, C={c}", None, fwd, sets=sets,
                             rounds=2, iters=20, extra=tflops, graph=torchsparse is None)
            harness.run_each(report, f"fwd+bwd {dtype_name}", f"{problem}, C={c}", None, train, sets=sets,
                             rounds=2, iters=10,
                             extra=lambda _n, ms, f=flops: {"effective_tflops": 3 * f / (ms * 1e-3) / 1e12})
            for r in report.results:
                if r.flops is None and r.op.endswith(dtype_name) and r.problem.endswith(f"C={c}"):
                    r.flops = flops if r.op.startswith("forward") else 3 * flops
            report.write(args.out)
            for r in report.results[-len(fwd) - len(train):]:
                tf = r.extra.get("effective_tflops")
                print(f"{r.op:18} {r.problem:28} {r.system:22} {r.median_ms or float('nan'):9.3f} ms "
                      f"{tf or float('nan'):7.1f} TFLOP/s {r.note}", flush=True)
            xs = gs = xg = None  # free this configuration's tensors before the next

    if args.unet and time.time() - start < args.budget_s:
        unet_runs(report, grid, "surface scene", spconv, torchsparse)
        report.write(args.out)
    if args.bunny and time.time() - start < args.budget_s:
        models = os.environ.get("TILEGRID_MODELS_DIR") or os.path.join(os.path.dirname(__file__), "..", ".deps", "models")
        path = os.path.join(models, "bunny00.off")
        if not os.path.isfile(path):
            report.checks["bunny"] = f"not measured: no {path} (scripts/fetch_models.sh)"
        else:
            vertices, faces = tg.read_mesh(path)
            extent = (vertices.max(0).values - vertices.min(0).values).max().item()
            jv, jf = tg.JaggedTensor([vertices.cuda()]), tg.JaggedTensor([faces.cuda()])
            for across in (1024, 2048):
                bunny = tg.GridBatch.from_mesh(jv, jf, voxel_sizes=[extent / across] * 3)
                forward_runs(report, spconv, f"bunny {across} across", bunny, args.channels)
                report.write(args.out)
    if args.large and time.time() - start < args.budget_s:
        big = scene(40, 0.025)
        bgrid = tg.GridBatch.from_ijk(tg.JaggedTensor([big]))
        bplan = tg.ConvolutionPlan.from_grid_batch(3, 1, bgrid, bgrid)
        bpairs = int((bplan.kernel_map >= 0).sum())
        x = torch.randn(bgrid.total_voxels, 256, device="cuda", dtype=torch.float16)
        w = (torch.randn(256, 256, 3, 3, 3, device="cuda") / (27 * 256) ** 0.5).to(torch.float16)
        harness.run_each(report, "forward float16", f"{bgrid.total_voxels} voxels, C=256", None,
                         [("tilegrid", lambda _: bplan.execute(x, w))], sets=1, graph=False, iters=3, rounds=1,
                         extra=lambda _n, ms: {"effective_tflops": 2 * bpairs * 256 * 256 / (ms * 1e-3) / 1e12})

    report.write(args.out)
    print(report.table())
    for r in report.results:
        if "effective_tflops" in r.extra:
            print(f"{r.op:18} {r.problem:28} {r.system:22} {r.extra['effective_tflops']:8.1f} effective TFLOP/s")
    print(report.checks)


if __name__ == "__main__":
    main()
