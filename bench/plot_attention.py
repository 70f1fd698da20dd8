"""Plots bench_attention.py or bench_attention_backward.py results: TFLOP/s of the pass the
rows measured (their "op") against sequence length, one panel per
(head dim, causal), one line per system. Several runs can be merged (e.g. a sweep split over
calls); a later run's row replaces an earlier run's row of the same problem and system. A
run's rows can be renamed with `#OLD=NEW[,OLD=NEW]` after its path, the renamed row replacing
the run's own row of that name (e.g. a variant that has since become the default).

    python bench/plot_attention.py docs/<name>.png RUN.json [RUN.json#sm90 plain=tilegrid ...]
        [--systems tilegrid "torch SDPA cuDNN"] [--revision REV]

--revision names the git revision in the title where the runs' own field is not the tree that
was measured (a run of uncommitted changes records the parent).

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


def load(spec):
    """(environment, result rows) of one RUN.json[#OLD=NEW,...] argument, renames applied."""
    path, _, renames = spec.partition("#")
    with open(path) as f:
        run = json.load(f)
    mapping = dict(pair.split("=", 1) for pair in renames.split(",") if pair)
    rows = [r for r in run["results"] if r["system"] not in mapping.values()]
    for r in rows:
        r["system"] = mapping.get(r["system"], r["system"])
    return run["environment"], rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("png")
    parser.add_argument("runs", nargs="+", help="RUN.json, optionally #OLD=NEW,... renames")
    parser.add_argument("--systems", nargs="*", help="only these systems (default: all)")
    parser.add_argument("--revision", help="git revision for the title (default: the runs')")
    args = parser.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"plot_attention: needs matplotlib ({e}); pip install matplotlib")

    # A later run's row replaces an earlier run's row of the same problem and system.
    envs, rows = [], {}
    for spec in args.runs:
        env, run_rows = load(spec)
        envs.append(env)
        for r in run_rows:
            if not args.systems or r["system"] in args.systems:
                rows[(r["op"], r["problem"], r["system"])] = r
    data = series(rows.values())
    op = "/".join(sorted({r["op"] for r in rows.values()}))
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
            ax.set_ylabel(f"{op} TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    revisions = args.revision or ", ".join(sorted({e["git_revision"][:7] for e in envs}))
    fig.suptitle(f"flash attention {op}, bf16, {envs[0]['gpu']}, torch {envs[0]['torch']}, "
                 f"git {revisions}")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
