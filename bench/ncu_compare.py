"""Tabulate scripts/profile_attention.sh's Nsight Compute output.

    python bench/ncu_compare.py ncu_attention.csv [more.csv ...] [--markdown]
    python bench/ncu_compare.py --source ncu_source.csv.gz [--opcodes wait mio] [--conflicts 8]

The first form: one column per profiled kernel, one row per counter that tells the attention
kernels apart (time, launch shape, tensor-pipe and exponential-unit busy, issue rate, warp
stall reasons, instructions, L2). Several files merge (e.g. tilegrid and FlashAttention-3
profiled in separate runs); a later block with the same heading replaces an earlier one.

--source reads the per-instruction source page and splits each kernel's sampled warp stalls
between the steady key-tile loop (instructions executed at least 30% as often as the most
executed one: the consumers' per-tile code) and the rest (prologue, epilogue, the producer
warp), by stall reason; --opcodes adds, for the stall reasons it names, their samples by
opcode; --conflicts N lists each kernel's N instructions with the most excess shared-memory
wavefronts (bank conflicts: wavefronts beyond the ideal for the access), with how often each
ran. Files may be gzip-compressed.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io

# (row label, ncu metric). Stall reasons are warps stalled per issued instruction, so they
# add up (with "selected", 1.0) to the average cycles between a warp's instructions.
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
ROWS = [
    ("time (us)", "gpu__time_duration.sum"),
    ("grid", "launch__grid_size"),
    ("cluster", "launch__cluster_size"),
    ("registers/thread", "launch__registers_per_thread"),
    ("shared mem/block (B)", "launch__shared_mem_per_block"),
    ("tensor pipe busy (% elapsed)",
     "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("exp unit XU (% active)", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    ("FMA pipe (% active)", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("ALU pipe (% active)", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    ("issue active (% active)", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("instructions (M)", "smsp__inst_executed.sum"),
    ("SM cycles active", "sm__cycles_active.avg"),
    ("stall: wait (fixed latency)", STALL.format("wait")),
    ("stall: barrier", STALL.format("barrier")),
    ("stall: long scoreboard", STALL.format("long_scoreboard")),
    ("stall: short scoreboard", STALL.format("short_scoreboard")),
    ("stall: gmma", STALL.format("gmma")),
    ("stall: dispatch", STALL.format("dispatch_stall")),
    ("stall: mio throttle", STALL.format("mio_throttle")),
    ("stall: math pipe throttle", STALL.format("math_pipe_throttle")),
    ("stall: not selected", STALL.format("not_selected")),
    ("stall: no instruction", STALL.format("no_instruction")),
    ("stall: sleeping", STALL.format("sleeping")),
    ("L2 hit rate (%)", "lts__t_sector_hit_rate.pct"),
    ("DRAM read (MB)", "dram__bytes_read.sum"),
    ("TMA loads issued", "smsp__inst_executed_op_tma_ld.sum"),
    ("smem bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
]
SCALE = {"smsp__inst_executed.sum": 1e-6, "dram__bytes_read.sum": 1e-6,
         "gpu__time_duration.sum": 1e-3}


def sections(paths):
    """{heading: csv rows} from files of '# heading' lines, each followed by one ncu page."""
    blocks = {}
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        heading, lines = None, []
        with opener(path, "rt") as file:
            for line in list(file) + ["# end"]:
                if line.startswith("# "):
                    if heading:
                        blocks[heading] = list(csv.reader(io.StringIO("".join(lines))))
                    heading, lines = line[2:].strip(), []
                else:
                    lines.append(line)
    return blocks


def load(paths):
    """{heading: {metric: value string}} from ncu's raw pages (a header row, a units row, a
    values row)."""
    return {h: dict(zip(rows[0], rows[2])) for h, rows in sections(paths).items()
            if len(rows) >= 3}


def parse_number(text):
    """ncu's number ("1,234.5"), or None for an empty or non-numeric cell."""
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def to_float(text):
    value = parse_number(text)
    return 0.0 if value is None else value


def source_phases(paths):
    """Print each kernel's sampled stalls, steady loop against the rest (see the module
    docstring)."""
    for heading, rows in sections(paths).items():
        header = rows[1]  # rows[0] names the kernel
        instructions = [dict(zip(header, r)) for r in rows[2:] if len(r) == len(header)]
        reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
        most = max(to_float(i["Instructions Executed"]) for i in instructions)
        phases = {"steady loop": collections.Counter(), "rest": collections.Counter()}
        executed = collections.Counter()
        for inst in instructions:
            count = to_float(inst["Instructions Executed"])
            phase = "steady loop" if count >= 0.3 * most else "rest"
            executed[phase] += count
            for reason in reasons:
                phases[phase][reason[len("stall_"):]] += to_float(inst[reason])
        total = sum(sum(c.values()) for c in phases.values())
        print(f"{heading}: {total:,.0f} stall samples")
        for phase, counter in phases.items():
            samples = sum(counter.values())
            top = ", ".join(f"{reason} {n / total:.1%}" for reason, n in counter.most_common()
                            if n >= 0.01 * total)
            print(f"  {phase:11} {samples / total:6.1%} of samples, "
                  f"{executed[phase] / 1e6:8.1f}M warp instructions: {top}")


def source_opcodes(paths, reasons):
    """Print each kernel's samples of each stall reason by opcode (the mnemonic before its
    first '.'), the largest first: which instructions a reason waits in."""
    for heading, rows in sections(paths).items():
        header = rows[1]
        instructions = [dict(zip(header, r)) for r in rows[2:] if len(r) == len(header)]
        for reason in reasons:
            column = "stall_" + reason
            by_opcode = collections.Counter()
            for inst in instructions:
                words = [w for w in inst["Source"].split() if not w.startswith("@")]
                by_opcode[words[0].split(".")[0] if words else "?"] += to_float(inst[column])
            total = sum(by_opcode.values()) or 1.0
            top = ", ".join(f"{op} {n:,.0f} ({n / total:.0%})"
                            for op, n in by_opcode.most_common(6))
            print(f"{heading}: {reason} {total:,.0f} samples: {top}")


def source_conflicts(paths, count):
    """Print each kernel's `count` instructions with the most excess shared-memory wavefronts
    (ncu's "L1 Wavefronts Shared Excessive": the wavefronts an access took beyond its ideal, so
    bank conflicts), with their share of the kernel's excess and their executed count."""
    for heading, rows in sections(paths).items():
        header = rows[1]
        instructions = [dict(zip(header, r)) for r in rows[2:] if len(r) == len(header)]
        excess = [(to_float(i["L1 Wavefronts Shared Excessive"]), i) for i in instructions]
        total = sum(e for e, _ in excess)
        shared = sum(to_float(i["L1 Wavefronts Shared"]) for i in instructions)
        print(f"{heading}: {total:,.0f} excess of {shared:,.0f} shared-memory wavefronts")
        for e, inst in sorted(excess, key=lambda x: x[0], reverse=True)[:count]:
            if e == 0:
                break
            ideal = to_float(inst["L1 Wavefronts Shared Ideal"])
            print(f"  {e / total:6.1%}  {e:14,.0f} excess, ideal {ideal:14,.0f}, "
                  f"{to_float(inst['Instructions Executed']):12,.0f} executed  "
                  f"{inst['Address'][-5:]}  {' '.join(inst['Source'].split())}")


def number(text, metric):
    value = parse_number(text)
    if value is None:
        return text or "-"
    value *= SCALE.get(metric, 1.0)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--source", action="store_true",
                        help="the files are source pages: stalls by phase")
    parser.add_argument("--opcodes", nargs="*", metavar="REASON",
                        help="with --source: these stall reasons (e.g. wait mio) by opcode")
    parser.add_argument("--conflicts", type=int, metavar="N",
                        help="with --source: the N instructions with the most bank conflicts")
    args = parser.parse_args()
    if args.source:
        source_phases(args.files)
        if args.opcodes:
            source_opcodes(args.files, args.opcodes)
        if args.conflicts:
            source_conflicts(args.files, args.conflicts)
        return
    blocks = load(args.files)
    headings = sorted(blocks, key=lambda h: (h.rsplit(" ", 1)[0], h))
    table = [["counter"] + headings]
    table += [[label] + [number(blocks[h].get(metric), metric) for h in headings]
              for label, metric in ROWS]
    if args.markdown:
        for i, row in enumerate(table):
            print("| " + " | ".join(row) + " |")
            if i == 0:
                print("|" + " --- |" * len(row))
        return
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.rjust(w) if c else cell.ljust(w)
                        for c, (cell, w) in enumerate(zip(row, widths))))


if __name__ == "__main__":
    main()
