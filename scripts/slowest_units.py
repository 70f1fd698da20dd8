#!/usr/bin/env python3
"""The slowest steps of a build, from ninja's log, so that the next person sees where the
build's time goes.

    python scripts/slowest_units.py BUILD_DIR [--top 10]

Reads BUILD_DIR/.ninja_log (every build ninja ran there; the latest entry of each output
counts, so a rebuild replaces the time of a full one) and prints the steps that took longest,
with the build's span and total compile time. Times are wall-clock seconds of each step, as
ninja measured them: on a loaded machine they include waiting for a core.
"""
from __future__ import annotations

import argparse
import os
import sys


def read_ninja_log(path: str) -> dict[str, tuple[int, int]]:
    """Output path -> (start ms, end ms) of its latest build step."""
    steps: dict[str, tuple[int, int]] = {}
    with open(path, encoding="utf-8") as log:
        header = log.readline()
        if not header.startswith("# ninja log v"):
            raise ValueError(f"{path}: not a ninja log (first line {header.strip()!r})")
        for line in log:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4 or line.startswith("#"):
                continue
            start, end, output = int(fields[0]), int(fields[1]), fields[3]
            # A later entry is a rebuild of the same output: it replaces the earlier one.
            steps[output] = (start, end)
    return steps


def slowest(steps: dict[str, tuple[int, int]], top: int) -> list[tuple[float, str]]:
    durations = [((end - start) / 1000.0, output) for output, (start, end) in steps.items()]
    durations.sort(reverse=True)
    return durations[:top]


def short_name(output: str) -> str:
    """CMake's object path without its CMakeFiles/<target>.dir/ part."""
    parts = output.split("/")
    for i, part in enumerate(parts):
        if part.endswith(".dir") and i > 0 and parts[i - 1] == "CMakeFiles":
            return "/".join(parts[i + 1:])
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    path = os.path.join(args.build_dir, ".ninja_log")
    if not os.path.exists(path):
        print(f"slowest_units: no {path} (not a ninja build folder, or nothing built yet)",
              file=sys.stderr)
        return 1
    steps = read_ninja_log(path)
    if not steps:
        print(f"slowest_units: {path} holds no build steps", file=sys.stderr)
        return 1
    total = sum(end - start for start, end in steps.values()) / 1000.0
    span = (max(end for _, end in steps.values()) - min(s for s, _ in steps.values())) / 1000.0
    print(f"{len(steps)} steps in {args.build_dir}: {total / 60:.1f} minutes of steps, "
          f"{span / 60:.1f} minutes from first start to last end")
    print(f"{'seconds':>8}  step")
    for seconds, output in slowest(steps, args.top):
        print(f"{seconds:8.1f}  {short_name(output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
