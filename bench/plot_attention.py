"""Plots a bench_attention.py result: forward TFLOP/s against sequence length, one panel per
(head dim, causal), one line per system.

    python bench/plot_attention.py bench/results/<run>.json docs/<name>.png

Needs matplotlib (not a dependency of tilegrid: `pip install matplotlib`).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict


def series(results):
    """{(head_dim, causal): {system: [(seqlen, tflops)]}} from the result rows."""
    out = defaultdict(lambda: defaultdict(list))
    for r in results:
        m = re.match(r"d(\d+) s(\d+) .* (full|causal)$", r["problem"])
        tflops = r["extra"].get("tflops")
        if m is None or tflops is None:
            continue
        head_dim, seqlen, mask = int(m.group(1)), int(m.group(2)), m.group(3)
        out[(head_dim, mask == "causal")][r["system"]].append((seqlen, tflops))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("json")
    parser.add_argument("png")
    args = parser.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"plot_attention: needs matplotlib ({e}); pip install matplotlib")

    with open(args.json) as f:
        run = json.load(f)
    data = series(run["results"])
    panels = sorted(data)
    head_dims = sorted({d for d, _ in panels})
    fig, axes = plt.subplots(2, len(head_dims), figsize=(4.2 * len(head_dims), 7), squeeze=False)
    for col, head_dim in enumerate(head_dims):
        for row, causal in enumerate((False, True)):
            ax = axes[row][col]
            for system, points in sorted(data.get((head_dim, causal), {}).items()):
                points.sort()
                ax.plot([s for s, _ in points], [t for _, t in points], marker="o", label=system)
            ax.set_xscale("log", base=2)
            ax.set_title(f"head dim {head_dim}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("sequence length (16k tokens a batch)")
            ax.set_ylabel("forward TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    env = run["environment"]
    fig.suptitle(f"flash attention forward, bf16, {env['gpu']}, torch {env['torch']}, "
                 f"git {env['git_revision'][:10]}")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
