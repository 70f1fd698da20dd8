"""One sparse convolution of bench_sparse_conv.py's 485k-voxel scene (submanifold 3x3x3,
C -> C, maps built once), run a few times, for a profiler to attach to.

    ncu --clock-control none -k regex:sparse_conv_sm90 --launch-skip 2 --launch-count 1 \
        --set full python bench/profile_sparse_conv.py --channels 64 [--backward]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sparse_conv import scene  # noqa: E402

import tilegrid as tg  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--backward", action="store_true",
                        help="forward and backward (both gradients) instead of the forward")
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()

    grid = tg.GridBatch.from_ijk(tg.JaggedTensor([scene(20, 0.05)]))
    plan = tg.ConvolutionPlan.from_grid_batch(3, 1, grid, grid)
    c, dtype = args.channels, getattr(torch, args.dtype)
    x = torch.randn(grid.total_voxels, c, device="cuda", dtype=dtype, requires_grad=args.backward)
    w = (torch.randn(c, c, 3, 3, 3, device="cuda") / (27 * c) ** 0.5).to(dtype)
    w.requires_grad_(args.backward)
    for _ in range(args.runs):
        out = plan.execute(x, w)
        if args.backward:
            out.backward(torch.ones_like(out))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
