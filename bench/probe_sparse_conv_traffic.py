"""Does the Hopper sparse convolution's forward time follow the bytes it gathers? The same plan
on bench_sparse_conv.py's 485k-voxel scene, the same taps a tile, with 1/2 and 1/4 of the map's
pairs dropped (their rows zero-filled by the kernel, not read). Launch-by-launch CUDA events
(medians of 30), so the times include a launch each.

    python bench/probe_sparse_conv_traffic.py [C]      (default 64)
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sparse_conv import scene  # noqa: E402

import tilegrid as tg  # noqa: E402



def median_ms(plan, xs, w) -> float:
    for i in range(3):
        plan.execute(xs[i % len(xs)], w)
    times = []
    for r in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        plan.execute(xs[r % len(xs)], w)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    c = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([scene(20, 0.05)]))
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    n = grid.total_voxels
    xs = [torch.randn(n, c, device="cuda", dtype=torch.float16) for _ in range(4)]
    w = (torch.randn(c, c, 3, 3, 3, device="cuda") / (27 * c) ** 0.5).half()
    full = plan.map_in_row_order.clone()
    print(f"C={c} full map: {median_ms(plan, xs, w):.4f} ms, pairs {int((full >= 0).sum())}")
    row = torch.arange(n, device="cuda")
    for keep in (2, 4):
        dropped = (row % keep != 0).unsqueeze(0).expand_as(full).clone()
        dropped[13] = False  # the centre tap: every row keeps a pair
        # A tile's first row keeps its pairs: rows sorted by their taps, its taps are (nearly)
        # the tile's, so the tiles keep their K steps.
        dropped[:, row % 128 == 0] = False
        plan.map_in_row_order = full.masked_fill(dropped, -1)
        pairs = int((plan.map_in_row_order >= 0).sum())
        print(f"C={c} 1/{keep} of pairs: {median_ms(plan, xs, w):.4f} ms, pairs {pairs}")
    plan.map_in_row_order = full


if __name__ == "__main__":
    main()
