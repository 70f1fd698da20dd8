"""Writes the Hopper attention forward's table of default variants
(src/attention/sm90/flash_fwd_sm90_defaults.inc, the rows of sm90::kDefaultVariants) from the
timings of a bench/bench_attention.py run in bfloat16, which times every variant of
attention_switch_variants.py on every problem:

    python bench/bench_attention.py --out sweep.json          # on the GPU, ~10 minutes
    python bench/attention_defaults_table.py sweep.json [--keep-within 0.01] [--check]

For each head dim, mask (causal or not) and sequence length of the run, the fastest variant
by median time; the table's current choice stays where it is within --keep-within (a
fraction, default 1%) of the fastest, so that noise does not move a default, and where the
run did not time it (a partial run cannot show that another variant beats it). Consecutive
lengths with the same choice merge into one row whose bound is the longest of them; the last
row of a head dim and mask takes any longer length. --check writes nothing and exits 1 if the
table would change (the rows it would write are printed either way). Commit the JSON beside
the table: the file's header names it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from itertools import groupby

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_switch_variants import (  # noqa: E402
    SWITCH_NAMES,
    SWITCH_VARIANTS,
    runs_at,
    switch_expression,
)

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "attention", "sm90",
                     "flash_fwd_sm90_defaults.inc")
PROBLEM = re.compile(r"^d(\d+) s(\d+) b\d+ h\d+ (full|causal)$")
ROW = re.compile(r"^\{(\d+), (true|false), (\d+), ([^}]*)\},$")
BITS = {name: bit for bit, name in SWITCH_NAMES.items()} | {"kNoSwitches": 0}


def parse_table(text: str) -> dict:
    """(head_dim, masked) -> [(bound, bits)] of an .inc file's rows, in file order."""
    table: dict = {}
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if m:
            bits = 0
            for name in m.group(4).split("|"):
                bits |= BITS[name.strip()]
            key = (int(m.group(1)), m.group(2) == "true")
            table.setdefault(key, []).append((int(m.group(3)), bits))
    return table


def choice_in(rows: list, seqlen: int) -> int | None:
    """The bits a table's rows choose for max_seqlen_q = seqlen (as default_switches does)."""
    for bound, bits in rows:
        if bound == 0 or seqlen <= bound:
            return bits
    return None


def fastest(results: list, current: dict, keep_within: float) -> dict:
    """(head_dim, masked) -> {seqlen: bits} from a run's forward rows of the named variants."""
    by_name = dict(SWITCH_VARIANTS)
    times: dict = {}
    for r in results:
        m = PROBLEM.match(r.get("problem", ""))
        if r.get("op") != "forward" or not m or r.get("system") not in by_name:
            continue
        head_dim, seqlen, masked = int(m.group(1)), int(m.group(2)), m.group(3) == "causal"
        bits = by_name[r["system"]]
        # kDirectStoreO exists for same-run comparisons, not as a default.
        if not runs_at(r["system"], head_dim) or r.get("median_ms") is None or bits & 512:
            continue
        times.setdefault((head_dim, masked, seqlen), {})[bits] = r["median_ms"]
    chosen: dict = {}
    for (head_dim, masked, seqlen), by_bits in sorted(times.items()):
        best = min(by_bits, key=by_bits.get)
        keep = choice_in(current.get((head_dim, masked), []), seqlen)
        # A default moves only when it was timed beside its replacement (a run of some of the
        # variants says nothing against the others), and by more than the margin.
        if keep is not None and (keep not in by_bits
                                 or by_bits[keep] <= by_bits[best] * (1 + keep_within)):
            best = keep
        chosen.setdefault((head_dim, masked), {})[seqlen] = best
    return chosen


def rows_of(chosen: dict) -> list:
    """[(head_dim, masked, bound, bits)]: runs of equal choices merged, the last unbounded."""
    rows = []
    for (head_dim, masked), by_seqlen in sorted(chosen.items(),
                                                key=lambda kv: (kv[0][0], not kv[0][1])):
        runs = [(bits, [s for s, _ in group])
                for bits, group in groupby(sorted(by_seqlen.items()), key=lambda sb: sb[1])]
        for i, (bits, seqlens) in enumerate(runs):
            rows.append((head_dim, masked, 0 if i == len(runs) - 1 else max(seqlens), bits))
    return rows


def render(rows: list, sources: list) -> str:
    lines = [
        "// The Hopper attention forward's default variant by problem class (internal; the rows",
        "// of kDefaultVariants in flash_fwd_sm90.h). Written by bench/attention_defaults_table.py",
        f"// from {', '.join(os.path.basename(s) for s in sources)}: a row holds the fastest",
        "// variant measured for problems of its head dim and mask with max_seqlen_q up to its",
        "// bound (0: any longer), the classes in rising order.",
        "// {head_dim, masked, max_seqlen_q up to (0: any), switches}",
    ]
    for head_dim, masked, bound, bits in rows:
        flag = "true" if masked else "false"
        lines.append(f"{{{head_dim}, {flag}, {bound}, {switch_expression(bits)}}},")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="bench_attention.py JSON")
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--keep-within", type=float, default=0.01)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with open(args.table) as f:
        current = parse_table(f.read())
    results = []
    for path in args.results:
        with open(path) as f:
            results += json.load(f)["results"]
    chosen = fastest(results, current, args.keep_within)
    if not chosen:
        sys.exit("no forward rows of the named sm90 variants in " + ", ".join(args.results))
    # Head dims the run did not measure keep their rows.
    merged = rows_of(chosen) + [(d, m, bound, bits) for (d, m), rs in current.items()
                                if (d, m) not in chosen for bound, bits in rs]
    merged.sort(key=lambda r: (r[0], not r[1]))
    text = render(merged, args.results)
    print(text, end="")
    changed = parse_table(text) != current
    if args.check:
        sys.exit(1 if changed else 0)
    if changed:
        with open(args.table, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
