"""Smoke test of an installed tilegrid (scripts/build_wheel.sh runs it in a fresh environment).

On the CPU: attention forward + backward, RMSNorm and a grid built from points, each checked
against torch. With a CUDA GPU: the same attention forward + backward in bfloat16 on the GPU
against torch's SDPA, and the grid on the GPU. Prints the build report and one line per check;
exits non-zero on the first failure.
"""

import sys
import time

import torch

import tilegrid as tg
from tilegrid.info import report


def relative_error(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def check(name, error, tolerance):
    print(f"{name}: relative error {error:.2e} (tolerance {tolerance:.0e})")
    if not error <= tolerance:
        sys.exit(f"smoke test failed: {name}")


def attention(device, dtype, tolerance):
    start = time.perf_counter()
    q, k, v = (torch.randn(2, 257, 4, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    out = tg.flash_attn_func(q, k, v, causal=True)
    grad = torch.randn_like(out)
    out.backward(grad)
    ours = [out, q.grad, k.grad, v.grad]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q64.transpose(1, 2), k64.transpose(1, 2), v64.transpose(1, 2), is_causal=True
    ).transpose(1, 2)
    ref.backward(grad.double())
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, [ref, q64.grad, k64.grad, v64.grad]):
        check(f"attention {name} ({device}, {dtype})", relative_error(a, b), tolerance)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"attention forward + backward on {device}: {time.perf_counter() - start:.2f} s with its first-call set-up")


def grid(device):
    clouds = [torch.rand(1000, 3, device=device), torch.rand(500, 3, device=device)]
    grid = tg.GridBatch.from_points(tg.JaggedTensor(clouds), voxel_sizes=0.1)
    counts = grid.num_voxels.tolist()
    expected = [len(torch.unique(torch.round(c / 0.1).long(), dim=0)) for c in clouds]
    print(f"grid on {device}: {counts} voxels, torch counts {expected}")
    if counts != expected:
        sys.exit(f"smoke test failed: grid on {device}")


def main():
    print(report())
    torch.manual_seed(0)
    attention("cpu", torch.float32, 1e-5)
    x, w = torch.randn(64, 256), torch.randn(256)
    check("rms_norm (cpu)", relative_error(tg.rms_norm(x, w, 1e-6), torch.nn.functional.rms_norm(x, (256,), w, 1e-6)), 1e-6)
    grid("cpu")
    if torch.cuda.is_available() and tg.with_cuda:
        attention("cuda", torch.bfloat16, 2e-2)
        grid("cuda")
    else:
        print("no CUDA GPU (or a CPU-only build): GPU checks not run")
    print("smoke test passed")


if __name__ == "__main__":
    main()
