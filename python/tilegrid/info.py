"""What this tilegrid was built with and what it finds here: ``python -m tilegrid.info``.

Like ``torch.__config__.show()``: the version, the torch and CUDA versions, the compilers and
GPU architectures of the C++ library, which kernel families it holds, the CUTLASS version it
was compiled against, and the GPUs this process sees. Paste its output into a bug report.
"""

from __future__ import annotations

import platform

import torch

from . import _C
from ._version import __version__


def build_info() -> dict:
    """The C++ library's build configuration (see ``tilegrid/core/build_info.h``).

    Returns:
        A dict with ``version``, ``host_compiler``, ``build_type``, ``with_cuda``,
        ``cuda_compiler``, ``cuda_architectures``, ``cutlass_version`` and ``kernels`` (the
        kernel families compiled in).
    """
    return dict(_C.build_info())


def report() -> str:
    """The build configuration and the run-time environment as readable text."""
    b = build_info()
    lines = [
        f"tilegrid {__version__} (C++ library {b['version']}, {b['build_type']})",
        f"python {platform.python_version()}, torch {torch.__version__} "
        f"(CUDA {torch.version.cuda or 'none'})",
        f"host compiler: {b['host_compiler']}",
    ]
    if b["with_cuda"]:
        lines += [
            f"CUDA compiler: {b['cuda_compiler']}",
            f"CUDA architectures: {b['cuda_architectures']}",
            f"CUTLASS: {b['cutlass_version'] or 'not found at build time'}",
        ]
    else:
        lines.append("CUDA: not compiled in (CPU-only library)")
    lines.append("kernels: " + ("; ".join(b["kernels"]) if b["kernels"] else "CPU only"))
    lines.append("compressed .nvdb files: " + (", ".join(b["nvdb_codecs"]) or "none (no zlib or c-blosc at build time)"))
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            lines.append(f"GPU {i}: {torch.cuda.get_device_name(i)} (compute capability {major}.{minor})")
    else:
        lines.append("GPU: none found by torch")
    return "\n".join(lines)


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
