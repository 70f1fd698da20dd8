"""Shared benchmark harness: times our ops and the reference systems side by side on one GPU.

- Timing: GPU time from CUDA-graph replays (several calls per graph, CUDA events around each
  replay), after warm-up; the median over rounds that interleave the systems (so a drift of
  the GPU's clocks hits all of them). The launch-by-launch time, which adds the CPU's
  overhead, is recorded beside it.
- Inputs: several input sets rotated so that their total exceeds 3x the L2 cache, so no call
  reads data the previous one left in L2.
- Ceilings measured in the same run: device-to-device copy (TB/s, bytes read + written) and a
  bf16 8192^3 GEMM through torch (cuBLAS), on random data.
- JSON output carries the GPU name, date, git revision and library versions.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

import torch


def git_revision() -> str:
    """The revision of the tree being measured: .deps/REVISION when present (written by whoever
    copies the tree to a GPU machine, where a .git may be missing or belong to another
    checkout), else git's HEAD (with -dirty for uncommitted changes)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, ".deps", "REVISION")
    if os.path.exists(path):
        return open(path).read().strip()
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
        return rev + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "multiprocessors": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
    }


def rotation_count(bytes_per_set: int, l2_bytes: Optional[int] = None) -> int:
    """How many input sets to rotate through so their total exceeds 3x L2 (at least 2)."""
    l2 = l2_bytes or torch.cuda.get_device_properties(0).L2_cache_size
    return max(2, -(-3 * l2 // max(bytes_per_set, 1)))


def time_ms(fn: Callable[[int], object], sets: int, warmup: int = 10, iters: int = 100) -> float:
    """Median time in ms of fn(i % sets) over `iters` calls, each bracketed by CUDA events."""
    for i in range(warmup):
        fn(i % sets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_ms_graph(fn: Callable[[int], object], sets: int, replays: int = 20) -> float:
    """Median GPU time in ms of one fn(i) call, from replays of a CUDA graph that holds
    several calls (rotating over the input sets). Graph replay takes the CPU's launch overhead
    out of the measurement, so a system with a slow Python path is not mistaken for a slow
    kernel; time_ms keeps measuring that overhead."""
    calls = sets * max(1, -(-8 // sets))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for i in range(3):
            fn(i % sets)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i % sets)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    del graph
    return statistics.median(times)


def measure_copy_tbps(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda _: dst.copy_(src), sets=1, warmup=5, iters=30)
    return 2 * nbytes / (ms * 1e-3) / 1e12


def measure_gemm_tflops(n: int = 8192) -> float:
    """bf16 n x n x n matrix product through torch (cuBLAS) on random data."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda _: a @ b, sets=1, warmup=5, iters=30)
    return 2 * n**3 / (ms * 1e-3) / 1e12


@dataclass
class Result:
    op: str
    problem: str
    system: str
    median_ms: Optional[float]
    bytes: Optional[int] = None
    flops: Optional[int] = None
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def tbps(self) -> Optional[float]:
        if self.median_ms is None or not self.bytes:
            return None
        return self.bytes / (self.median_ms * 1e-3) / 1e12


class Report:
    """Collects results; writes JSON and prints a table with ratios to the copy ceiling and
    to the best reference system of the same (op, problem). Systems whose name starts with
    "tilegrid" are ours; every other system is a reference."""

    def __init__(self, name: str):
        self.name = name
        self.env = environment()
        self.ceilings: dict[str, float] = {}
        self.results: list[Result] = []
        self.checks: dict[str, object] = {}

    def measure_ceilings(self) -> None:
        self.ceilings["copy_tbps"] = measure_copy_tbps()
        self.ceilings["bf16_gemm_tflops"] = measure_gemm_tflops()

    def add(self, result: Result) -> Result:
        self.results.append(result)
        return result

    def rows(self) -> list[dict]:
        rows = []
        for r in self.results:
            row = asdict(r)
            row["tbps"] = r.tbps
            row["fraction_of_copy"] = r.tbps / self.ceilings["copy_tbps"] if r.tbps and "copy_tbps" in self.ceilings else None
            peers = [
                p.median_ms
                for p in self.results
                if p.op == r.op and p.problem == r.problem and p.median_ms and not p.system.startswith("tilegrid")
            ]
            row["speedup_vs_best_reference"] = min(peers) / r.median_ms if peers and r.median_ms else None
            rows.append(row)
        return rows

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(
                {"benchmark": self.name, "environment": self.env, "ceilings": self.ceilings,
                 "checks": self.checks, "results": self.rows()},
                f, indent=2,
            )

    def table(self) -> str:
        lines = [f"{self.name} on {self.env['gpu']} ({self.env['git_revision'][:12]})"]
        lines.append("ceilings: " + ", ".join(f"{k} {v:.3g}" for k, v in self.ceilings.items()))
        lines.append(f"{'op':18} {'problem':24} {'system':28} {'ms':>8} {'TB/s':>6} {'%copy':>6} {'vs best ref':>11} {'launch ms':>9}")
        for row in self.rows():
            ms = f"{row['median_ms']:.4f}" if row["median_ms"] else "-"
            tb = f"{row['tbps']:.2f}" if row["tbps"] else "-"
            fr = f"{100 * row['fraction_of_copy']:.1f}" if row["fraction_of_copy"] else "-"
            sp = f"{row['speedup_vs_best_reference']:.2f}x" if row["speedup_vs_best_reference"] else "-"
            note = f"  ({row['note']})" if row["note"] else ""
            launch = row["extra"].get("launch_by_launch_ms")
            la = f"{launch:.4f}" if launch else "-"
            lines.append(f"{row['op']:18} {row['problem']:24} {row['system']:28} {ms:>8} {tb:>6} {fr:>6} {sp:>11} {la:>9}{note}")
        return "\n".join(lines)


def optional_import(module: str):
    """Import a reference system if present; returns (module, None) or (None, error text)."""
    try:
        return __import__(module, fromlist=["_"]), None
    except Exception as e:  # a peer that does not load is recorded with its error
        return None, f"{type(e).__name__}: {e}"


def run_each(
    report: Report, op: str, problem: str, nbytes: Optional[int], systems: Sequence[tuple], sets: int,
    rounds: int = 3, graph: bool = True, iters: int = 100, extra: Optional[Callable[[str, float], dict]] = None,
) -> None:
    """Times each (system name, fn(i)) pair in `rounds` interleaved rounds. The reported time
    is the median over rounds of the CUDA-graph replay time (GPU time); `extra` keeps each
    round and the plain launch-by-launch time, which includes the CPU's overhead. A system
    that fails is recorded with its error; one that cannot be captured in a graph is timed
    launch by launch and says so. graph=False times everything launch by launch (operations
    that read results back to the host, such as grid construction, cannot be captured).
    extra(system, ms) adds derived numbers (e.g. points per second) to each result."""
    graph_times: dict[str, list[float]] = {name: [] for name, _ in systems}
    launch_times: dict[str, list[float]] = {name: [] for name, _ in systems}
    errors: dict[str, str] = {}
    no_graph: dict[str, str] = {}
    for _ in range(rounds):
        for name, fn in systems:
            if name in errors:
                continue
            try:
                launch_times[name].append(time_ms(fn, sets, warmup=min(10, iters), iters=iters))
            except Exception as e:
                errors[name] = f"failed: {type(e).__name__}: {str(e)[:200]}"
                continue
            if name in no_graph or not graph:
                continue
            try:
                graph_times[name].append(time_ms_graph(fn, sets))
            except Exception as e:
                no_graph[name] = f"no CUDA graph ({type(e).__name__}: {str(e)[:120]}): launch timing"
                torch.cuda.synchronize()
    for name, _ in systems:
        if name in errors:
            report.add(Result(op, problem, name, None, note=errors[name]))
            continue
        graphed = graph and name not in no_graph
        ms = statistics.median(graph_times[name] if graphed else launch_times[name])
        report.add(Result(
            op, problem, name, ms, bytes=nbytes, note=no_graph.get(name, ""),
            extra={"timing": "cuda_graph_replay" if graphed else "launch_by_launch",
                   "round_ms": graph_times[name] if graphed else launch_times[name],
                   "launch_by_launch_ms": statistics.median(launch_times[name]),
                   **(extra(name, ms) if extra else {})},
        ))
