#!/usr/bin/env python3
"""Fails when a C++ file leans on another header for a standard-library include.

Two checks, over include/ and src/ (the C++ files; CUDA units are compiled by the CUDA build):

1. include-what-you-use (Debian's `iwyu`) on every header and every .cpp: any standard header
   it says the file should add (<cstdint> for uint8_t, <utility> for std::move, ...) is an
   error. libstdc++ 12 pulls <cstdint> into <string> and <memory>; libstdc++ 13 does not, so
   such a file builds with one compiler and breaks with the next. Suggestions to remove or
   forward-declare are not checked.
2. Every public header compiles on its own (one translation unit per header, as LLVM and
   Abseil check), with the compiler named by $CXX (default c++).

    python scripts/check_includes.py [--jobs N] [--no-iwyu]

Exit status 1 lists each offending file with the headers it is missing.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STD = "c++20"
INCLUDE_DIRS = ["include", "src"]

# The C and C++ standard library headers (C++20); iwyu names the C ones by their .h names.
CXX_HEADERS = set(
    """algorithm any array atomic barrier bit bitset charconv chrono codecvt compare complex
    concepts condition_variable coroutine deque exception execution filesystem format
    forward_list fstream functional future initializer_list iomanip ios iosfwd iostream
    istream iterator latch limits list locale map memory memory_resource mutex new numbers
    numeric optional ostream queue random ranges ratio regex scoped_allocator semaphore set
    shared_mutex source_location span sstream stack stdexcept stop_token streambuf string
    string_view syncstream system_error thread tuple type_traits typeindex typeinfo
    unordered_map unordered_set utility valarray variant vector version""".split()
)
C_HEADERS = set(
    """assert ctype errno fenv float inttypes limits locale math setjmp signal stdarg stddef
    stdint stdio stdlib string time uchar wchar wctype""".split()
)
STANDARD = CXX_HEADERS | {f"c{h}" for h in C_HEADERS} | {f"{h}.h" for h in C_HEADERS}
# The standard guarantees these through every container and <string>: not asked for.
STANDARD -= {"compare", "initializer_list"}


def c_to_cxx(name):
    """<stdint.h> -> <cstdint>: the form this project writes."""
    return f"c{name[:-2]}" if name.endswith(".h") and name[:-2] in C_HEADERS else name


def iwyu_missing(path, scratch):
    """Standard headers iwyu says `path` (a header or a .cpp) should add."""
    rel = path.relative_to(ROOT)
    if path.suffix == ".h":
        unit = Path(scratch) / (re.sub(r"\W", "_", str(rel)) + ".cpp")
        unit.write_text(f'#include "{path}"\n')
    else:
        unit = path
    cmd = ["include-what-you-use", f"-std={STD}", "-x", "c++"]
    cmd += [f"-I{ROOT / d}" for d in INCLUDE_DIRS]
    cmd += ["-Xiwyu", f"--check_also={path}", str(unit)]
    out = subprocess.run(cmd, capture_output=True, text=True).stderr
    missing, current = [], None
    for line in out.splitlines():
        m = re.match(r"(\S+) should (add|remove) these lines:", line)
        if m:
            current = m.group(1) if m.group(2) == "add" else None
            continue
        if current and Path(current).resolve() == path.resolve():
            m = re.match(r"#include <([^>]+)>", line)
            if m and m.group(1) in STANDARD:
                missing.append(c_to_cxx(m.group(1)))
        if line.startswith("The full include-list"):
            current = None
    return missing


def compiles_alone(header, cxx):
    """The compiler's error output when `header` does not compile as its own unit, else ''."""
    cmd = [cxx, f"-std={STD}", "-fsyntax-only", "-x", "c++", "-"]
    cmd += [f"-I{ROOT / d}" for d in INCLUDE_DIRS]
    run = subprocess.run(cmd, input=f'#include "{header}"\n', capture_output=True, text=True)
    return "" if run.returncode == 0 else run.stderr.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--no-iwyu", action="store_true", help="only the self-containment check")
    args = parser.parse_args()

    headers = sorted((ROOT / "include").rglob("*.h")) + sorted((ROOT / "src").rglob("*.h"))
    sources = sorted((ROOT / "src").rglob("*.cpp"))
    cxx = os.environ.get("CXX", "c++")
    failures = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool, tempfile.TemporaryDirectory() as scratch:
        public = [h for h in headers if h.is_relative_to(ROOT / "include")]
        for header, err in zip(public, pool.map(lambda h: compiles_alone(h, cxx), public)):
            if err:
                failures.append(f"{header.relative_to(ROOT)}: does not compile on its own ({cxx}):\n{err}")
        if not args.no_iwyu:
            if not shutil.which("include-what-you-use"):
                sys.exit("check_includes: include-what-you-use not found (Debian: apt install iwyu)")
            files = headers + sources
            for path, missing in zip(files, pool.map(lambda p: iwyu_missing(p, scratch), files)):
                if missing:
                    failures.append(f"{path.relative_to(ROOT)}: add #include <{'>, <'.join(sorted(set(missing)))}>")
    checked = f"{len(public)} public headers compiled alone" + (
        "" if args.no_iwyu else f"; iwyu over {len(headers)} headers and {len(sources)} sources"
    )
    if failures:
        print("\n".join(failures))
        print(f"check_includes: {len(failures)} problem(s) ({checked})")
        return 1
    print(f"check_includes: clean ({checked})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
