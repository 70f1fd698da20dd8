"""Per kernel of a compiled object: the innermost loop that issues wgmma, and what is in it.

    cuobjdump -sass build/.../flash_fwd_sm90_hdim128.cu.o > hdim128.sass
    python bench/sass_loops.py hdim128.sass [other.sass ...] [--filter Li128ELb1]

For each kernel (mangled name, shortened) prints its instruction count, its spill loads
(LDL) and, for the innermost backward branch whose body holds the most HGMMAs (the key-tile
loop of the attention kernels), the body's length, its HGMMAs, spill loads, special-register reads
(S2R: values the compiler recomputes because it kept no register for them) and
reconvergence regions (BSSY: a branch the compiler could not prove uniform in the warp).

Why: a change that leaves the loop's source alone can still slow it. A branch on the thread
index placed between the two products moved the K/V stage addresses out of the uniform
registers and cost every variant 3-5% at 16k queries on an H200 (2026-12-01,
docs/history/PERFORMANCE_LOG.md); the loop grew by only 20 instructions, but gained a BSSY
and two S2R. Compare the rows of two builds before measuring on a GPU.
"""

from __future__ import annotations

import argparse
import re

INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH_TARGET = re.compile(r"\bBRA\b.*0x([0-9a-f]+)\s*$")
FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")


def kernels(text: str) -> dict[str, list[tuple[int, str]]]:
    """Kernel name -> [(address, instruction text)] from cuobjdump -sass output."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = INSTRUCTION.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(instruction: str) -> str:
    """The opcode without its predicate guard: '@!P0 BRA 0x10' -> 'BRA'."""
    parts = instruction.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def mnemonic(instruction: str) -> str:
    """The opcode without its modifiers: 'HGMMA.64x128x16.F32.BF16 ...' -> 'HGMMA'."""
    return opcode(instruction).split(".")[0]


def count(body: list[tuple[int, str]], name: str) -> int:
    return sum(mnemonic(t) == name for _, t in body)


def is_wait_return(code: list[tuple[int, str]], i: int) -> bool:
    """Whether the branch at i returns from a spin-wait block that ptxas placed after the
    kernel's body (an mbarrier try-wait, a branch to itself, then back): not a loop."""
    return any(opcode(t).startswith("SYNCS.PHASECHK") for _, t in code[max(0, i - 3):i])


def innermost_wgmma_loop(code: list[tuple[int, str]]) -> list[tuple[int, str]] | None:
    """The [target, branch] range of a backward branch that contains HGMMAs and no other such
    range; of those, the one with the most HGMMAs (the key-tile loop issues both products),
    then the shortest."""
    index = {address: i for i, (address, _) in enumerate(code)}
    loops = []  # (first, last, HGMMAs) of each candidate range, as indices into code
    for i, (address, text) in enumerate(code):
        m = BRANCH_TARGET.search(text)
        if not m or mnemonic(text) != "BRA" or is_wait_return(code, i):
            continue
        target = int(m.group(1), 16)
        if target < address and target in index:
            hgmma = count(code[index[target]:i + 1], "HGMMA")
            if hgmma:
                loops.append((index[target], i, hgmma))
    innermost = [(a, b, n) for a, b, n in loops
                 if not any(a <= c and d <= b and (c, d) != (a, b) for c, d, _ in loops)]
    if not innermost:
        return None
    a, b, _ = max(innermost, key=lambda r: (r[2], r[0] - r[1]))
    return code[a:b + 1]


def short_name(name: str) -> str:
    """The template arguments of the attention kernels' traits, else the name itself."""
    m = re.search(r"Sm90TraitsI(?:N7cutlass)?(.*?)EEEE", name)
    return m.group(1) if m else name


def rows(text: str, name_filter: str = "") -> list[dict]:
    result = []
    for name, code in kernels(text).items():
        if name_filter not in name:
            continue
        loop = innermost_wgmma_loop(code) or []
        result.append({
            "kernel": short_name(name),
            "instructions": len(code),
            "LDL": count(code, "LDL"),
            "loop": len(loop),
            "loop HGMMA": count(loop, "HGMMA"),
            "loop LDL": count(loop, "LDL"),
            "loop S2R": count(loop, "S2R"),
            "loop BSSY": count(loop, "BSSY"),
        })
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="cuobjdump -sass output")
    parser.add_argument("--filter", default="", help="only kernels whose name contains this")
    args = parser.parse_args()
    for path in args.files:
        with open(path) as f:
            table = rows(f.read(), args.filter)
        print(f"== {path}")
        if not table:
            print("  no kernel matched")
            continue
        keys = list(table[0])
        width = max(len(r["kernel"]) for r in table)
        print(f"  {'kernel':{width}}" + "".join(f"{k:>12}" for k in keys[1:]))
        for r in table:
            print(f"  {r['kernel']:{width}}" + "".join(f"{r[k]:>12}" for k in keys[1:]))


if __name__ == "__main__":
    main()
