"""Counts what a reader does with a fixed set of inputs: the hand-made bad files of the tests
and COUNT mutations of the seeds (the fuzz harness's own mutators, seeded 0..COUNT-1). Each
input runs in a worker process with a time limit, so crashes and hangs are counted, not
suffered:

    python tests/fuzz/replay.py ply 5000 [--mesh-io OLD_MESH_IO.py] > figures.json

Outcomes: clear_error (the documented error naming the file), unclear_error (any other
exception), crash (the worker died), hang (over --timeout seconds or past --memory-gb),
loaded (returned data that passes the harness's checks; for a mutated input that may be a
valid file or a corruption no reader can see) and silently_wrong (returned data that fails
them, or loaded a hand-made bad file). --mesh-io reads meshes with another mesh_io.py (this
tree's is python/tilegrid/grid/mesh_io.py), to count what an older reader did with the same
inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import resource
import select
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def worker(reader: str, mesh_io: str | None, memory_gb: float) -> None:
    """Reads input paths from stdin, answers one outcome a line."""
    limit = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.argv = [str(HERE / "fuzz_readers.py"), reader]
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_readers", HERE / "fuzz_readers.py")
    fr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fr)
    tg = fr.tg
    read_ply, read_off = tg.read_ply, tg.read_off
    documented = tg.MeshFormatError if reader != "nvdb" else ValueError
    if mesh_io:
        spec = importlib.util.spec_from_file_location("old_mesh_io", mesh_io)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        read_ply, read_off = old.read_ply, old.read_off
        documented = getattr(old, "MeshFormatError", ValueError)
    print("ready", flush=True)
    for line in sys.stdin:
        path = line.strip()
        try:
            if reader == "ply":
                fr.check_mesh(*read_ply(path))
            elif reader == "off":
                fr.check_mesh(*read_off(path))
            else:
                fr.check_nvdb(*tg.load(path))
            outcome = "loaded"
        except AssertionError:
            outcome = "silently_wrong"
        except MemoryError:
            outcome = "hang"
        except Exception as e:  # noqa: BLE001 - every exception is classified
            clear = type(e) is documented and path in str(e)
            outcome = "clear_error" if clear else f"unclear_error:{type(e).__name__}"
        print(outcome, flush=True)


def inputs(reader: str, count: int, folder: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
    """(kind, path) of the hand-made bad files and `count` mutated seeds."""
    sys.argv = [str(HERE / "fuzz_readers.py"), reader, str(folder / "seeds" / reader),
                str(HERE / "corpus" / reader)]
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_readers", HERE / "fuzz_readers.py")
    fr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fr)
    out = []
    if reader != "nvdb":
        sys.path.insert(0, str(ROOT / "tests" / "python"))
        sys.path.insert(0, str(ROOT / "tests" / "python" / "grid"))
        from test_mesh_io import BAD_MESHES

        for name, data, _ in BAD_MESHES:
            if name.endswith(reader):
                path = folder / f"hand-{name}"
                path.write_bytes(data)
                out.append(("hand", path))
    for i in range(count):
        rng = random.Random(i)
        k = rng.randrange(len(fr.SEEDS))
        if reader == "nvdb":
            data = bytes(fr.mutate_binary(bytearray(fr.SEEDS[k]), fr.FIELDS[k], rng))
            if fr.zlib.adler32(data) % 4:
                data = fr.with_checksums(data)
        else:
            data = fr.mutate_text(fr.SEEDS[k], rng)
        path = folder / f"fuzz-{i}.{reader}"
        path.write_bytes(data)
        out.append(("fuzzed", path))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reader", choices=("ply", "off", "nvdb"))
    parser.add_argument("count", type=int)
    parser.add_argument("--mesh-io")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--memory-gb", type=float, default=6.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.reader, args.mesh_io, args.memory_gb)
        return
    folder = pathlib.Path(tempfile.mkdtemp(prefix="tilegrid-replay-"))
    subprocess.run([sys.executable, str(HERE / "make_seeds.py"), "--large", str(folder / "seeds")],
                   check=True)
    todo = inputs(args.reader, args.count, folder)
    command = [sys.executable, __file__, args.reader, "0", "--worker",
               "--memory-gb", str(args.memory_gb)]
    if args.mesh_io:
        command += ["--mesh-io", args.mesh_io]
    figures = {kind: {} for kind in ("hand", "fuzzed")}
    proc = None
    for kind, path in todo:
        if proc is None:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
            assert proc.stdout.readline().strip() == "ready", "the worker did not start"
        proc.stdin.write(f"{path}\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], args.timeout)
        outcome = proc.stdout.readline().strip() if ready else None
        if outcome is None:
            outcome = "hang"
            proc.kill()
        elif not outcome:
            outcome = "crash"
        if kind == "hand" and outcome == "loaded":
            outcome = "silently_wrong"  # each hand-made file is one no reader should accept
        if outcome in ("hang", "crash"):
            proc.wait()
            proc = None
        counts = figures[kind]
        counts[outcome] = counts.get(outcome, 0) + 1
        os.remove(path)
    if proc is not None:
        proc.stdin.close()
        proc.wait()
    shutil.rmtree(folder)
    print(json.dumps({"reader": args.reader, "mesh_io": args.mesh_io or "this tree",
                      "inputs": {k: sum(v.values()) for k, v in figures.items()}, **figures},
                     indent=1))


if __name__ == "__main__":
    main()
