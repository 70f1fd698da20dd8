"""Tabulate scripts/profile_attention.sh's Nsight Compute output: one column per profiled
kernel, one row per counter that tells the attention kernels apart (time, launch shape,
tensor-pipe and exponential-unit busy, issue rate, warp stall reasons, instructions, L2).

    python bench/ncu_compare.py ncu_attention.csv [more.csv ...] [--markdown]

Several files merge (e.g. tilegrid and FlashAttention-3 profiled in separate runs); a
later block with the same heading replaces an earlier one.
"""

from __future__ import annotations

import argparse
import csv
import io

# (row label, ncu metric). Stall reasons are warps stalled per issued instruction, so they
# add up (with "selected", 1.0) to the average cycles between a warp's instructions.
ROWS = [
    ("time (us)", "gpu__time_duration.sum"),
    ("grid", "launch__grid_size"),
    ("cluster", "launch__cluster_size"),
    ("registers/thread", "launch__registers_per_thread"),
    ("shared mem/block (B)", "launch__shared_mem_per_block"),
    ("tensor pipe busy (% elapsed)", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
    ("exp unit XU (% active)", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    ("FMA pipe (% active)", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("ALU pipe (% active)", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    ("issue active (% active)", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("instructions (M)", "smsp__inst_executed.sum"),
    ("SM cycles active", "sm__cycles_active.avg"),
    ("stall: wait (fixed latency)", "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"),
    ("stall: barrier", "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"),
    ("stall: long scoreboard", "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
    ("stall: short scoreboard", "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio"),
    ("stall: gmma", "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"),
    ("stall: dispatch", "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio"),
    ("stall: mio throttle", "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"),
    ("stall: math pipe throttle", "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"),
    ("stall: not selected", "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio"),
    ("stall: no instruction", "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio"),
    ("stall: sleeping", "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"),
    ("L2 hit rate (%)", "lts__t_sector_hit_rate.pct"),
    ("DRAM read (MB)", "dram__bytes_read.sum"),
    ("TMA loads issued", "smsp__inst_executed_op_tma_ld.sum"),
    ("smem bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
]
SCALE = {"smsp__inst_executed.sum": 1e-6, "dram__bytes_read.sum": 1e-6,
         "gpu__time_duration.sum": 1e-3}


def load(paths):
    """{heading: {metric: value string}} from files of '# heading' lines, each followed by
    ncu's raw CSV page (a header row, a units row, a values row)."""
    blocks = {}
    for path in paths:
        heading, lines = None, []
        for line in list(open(path)) + ["# end"]:
            if line.startswith("#"):
                rows = list(csv.reader(io.StringIO("".join(lines))))
                if heading and len(rows) >= 3:
                    blocks[heading] = dict(zip(rows[0], rows[2]))
                heading, lines = line[1:].strip(), []
            else:
                lines.append(line)
    return blocks


def number(text, metric):
    try:
        value = float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return text or "-"
    value *= SCALE.get(metric, 1.0)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
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
