"""Epilogue programs on torch tensors: a small handle to build a program and run it after a
matrix product (see include/tilegrid/gemm/epilogue/program.h for the semantics)::

    prog = tg.epilogue.Program().per_row(rstd).store(pre).glu("silu").store(h)
    tg.epilogue.matmul(x, w.t(), prog)          # writes pre and h

Outputs are tensors the caller allocates: stores take [M, W] tensors (float32, float16 or
bfloat16), row partials float32 [M, ceil(W / tile_n)], column sums float32 [W], where W is
the width of the value tile at that step (a glu halves it, a glu_grad doubles it). Every
program runs on CPU tensors (the unfused float64 reference). On CUDA tensors a program runs
as one fused sm_90a kernel (H100/H200; bfloat16 or float16 a and b, b = w.t()) when its
signature(), with a and b's dtype written T, is one of the compiled set, and is otherwise an
error that lists them. Compiled signatures include::

    "per_column(add, T) > store(T) > elementwise(gelu_tanh) > store(T)"
    "per_row(multiply, float32) > store(T)"
    "tile(add, T) > store(T) > row_partials(sum_squares, 256)"
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._torch import current_stream, dlpack


class Program:
    """An ordered list of epilogue steps; every method appends one and returns the program."""

    def __init__(self):
        self.steps: list[tuple] = []

    def _add(self, kind, name="", t0=None, t1=None, number=0.0, count=0, flag=False):
        self.steps.append((kind, name, t0, t1, float(number), int(count), bool(flag)))
        return self

    def per_row(self, values: torch.Tensor, combine: str = "multiply") -> "Program":
        """v(i, j) = v(i, j) + values[i] (combine "add") or v(i, j) * values[i] (combine
        "multiply"); values [M]."""
        return self._add("per_row", combine, values)

    def per_column(self, values: torch.Tensor, combine: str = "add") -> "Program":
        """v(i, j) = v(i, j) + values[j] (combine "add") or v(i, j) * values[j] (combine
        "multiply"); values [W]."""
        return self._add("per_column", combine, values)

    def scalar(self, value: float, combine: str = "multiply") -> "Program":
        """v = v + value (combine "add") or v * value (combine "multiply")."""
        return self._add("scalar", combine, number=value)

    def tile(self, values: torch.Tensor, combine: str = "add") -> "Program":
        """v = v + values (combine "add") or v * values (combine "multiply"); values [M, W]
        (e.g. a residual)."""
        return self._add("tile", combine, values)

    def elementwise(self, fn: str) -> "Program":
        """v = fn(v); fn: identity, relu, sigmoid, silu, gelu_tanh."""
        return self._add("elementwise", fn)

    def elementwise_grad(self, fn: str, input: torch.Tensor) -> "Program":
        """v = v * fn'(input); input [M, W], the saved pre-activation."""
        return self._add("elementwise_grad", fn, input)

    def glu(self, act: str = "silu") -> "Program":
        """Interleaved [g0, u0, g1, u1, ...] -> act(g) * u; the width halves."""
        return self._add("glu", act)

    def glu_grad(self, input: torch.Tensor, act: str = "silu") -> "Program":
        """v = d(glu output), input the saved [M, 2W] pairs -> interleaved (dg, du)."""
        return self._add("glu_grad", act, input)

    def rope(self, positions: torch.Tensor, frequencies: torch.Tensor,
             inverse: bool = False) -> "Program":
        """Rotates pair j of row i by positions[i] * frequencies[j] (-that when inverse)."""
        return self._add("rope", "", positions, frequencies, flag=inverse)

    def row_partials(self, op: str, partials: torch.Tensor, tile_n: int = 256) -> "Program":
        """partials(i, t) = op over columns [t * tile_n, (t + 1) * tile_n) of row i; op: sum,
        sum_squares, max, logsumexp. finish_row_partials combines them."""
        return self._add("row_partials", op, partials, count=tile_n)

    def column_sum(self, out: torch.Tensor) -> "Program":
        """out[j] = sum over rows of v(i, j); out float32 [W]."""
        return self._add("column_sum", "", out)

    def store(self, out: torch.Tensor) -> "Program":
        """Writes v into out [M, W], rounded to out's dtype."""
        return self._add("store", "", out)

    def signature(self) -> str:
        """The program's steps with its tensors' dtypes, e.g. "per_row(multiply, float32) >
        store(bfloat16)": what is matched against the compiled set on CUDA (the module's
        text)."""
        return _C.epilogue_signature(self.steps)


# The steps whose tensor the program writes (its outputs); every other tensor is read.
_WRITES = ("store", "row_partials", "column_sum")


@torch.library.custom_op("tilegrid::matmul_epilogue", mutates_args=("outputs",))
def _matmul_epilogue_op(a: torch.Tensor, b: torch.Tensor, steps_spec: str, numbers: list[float],
                        counts: list[int], flags: list[bool], slots: list[int],
                        inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
    """A program in torch.library's types: steps_spec "kind:name;kind:name;..." and one
    number, count and flag a step; step i's tensors are slots[2i] and slots[2i + 1], each -1
    (none), 2k (inputs[k]) or 2k + 1 (outputs[k], written)."""
    def tensor(slot):
        return None if slot < 0 else (outputs if slot % 2 else inputs)[slot // 2]

    named = [step.split(":") for step in steps_spec.split(";")] if steps_spec else []
    steps = [(kind, name, dlpack(tensor(slots[2 * i])), dlpack(tensor(slots[2 * i + 1])), numbers[i],
              counts[i], flags[i])
             for i, (kind, name) in enumerate(named)]
    _C.matmul_epilogue(dlpack(a), dlpack(b), steps, current_stream(a))


@_matmul_epilogue_op.register_fake
def _(a, b, steps_spec, numbers, counts, flags, slots, inputs, outputs):
    return None


def matmul(a: torch.Tensor, b: torch.Tensor, program: Program) -> None:
    """Runs `program` on a @ b (a, b as for tg.matmul); writes the program's outputs. A
    torch.library custom op (tilegrid::matmul_epilogue) that mutates the outputs, so that
    torch.compile traces it as one node."""
    inputs: list[torch.Tensor] = []
    outputs: list[torch.Tensor] = []
    written = [s[2] for s in program.steps if s[0] in _WRITES and s[2] is not None]

    def slot(t) -> int:  # by identity (`is`: torch.compile traces it; id() it does not)
        if t is None:
            return -1
        pool, odd = (outputs, 1) if any(t is w for w in written) else (inputs, 0)
        for k, u in enumerate(pool):
            if u is t:
                return 2 * k + odd
        pool.append(t)
        return 2 * (len(pool) - 1) + odd

    kinds, names, numbers, counts, flags, slots = [], [], [], [], [], []
    for kind, name, t0, t1, number, count, flag in program.steps:
        kinds.append(kind)
        names.append(name)
        numbers.append(number)
        counts.append(count)
        flags.append(flag)
        slots += [slot(t0), slot(t1)]
    spec = ";".join(f"{kind}:{name}" for kind, name in zip(kinds, names))
    _matmul_epilogue_op(a.detach(), b.detach(), spec, numbers, counts, flags, slots,
                        [t.detach() for t in inputs], outputs)


@torch.library.custom_op("tilegrid::finish_row_partials", mutates_args=())
def _finish_row_partials_op(op: str, partials: torch.Tensor) -> torch.Tensor:
    out = torch.empty(partials.shape[0], dtype=torch.float32, device=partials.device)
    _C.finish_row_partials(op, partials, out, current_stream(partials))
    return out


@_finish_row_partials_op.register_fake
def _(op, partials):
    return partials.new_empty(partials.shape[0], dtype=torch.float32)


def finish_row_partials(op: str, partials: torch.Tensor,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The full rows' reduction from row partials: float32 [M] (a custom op,
    tilegrid::finish_row_partials; with `out`, copied into it)."""
    result = _finish_row_partials_op(op, partials)
    if out is None:
        return result
    out.copy_(result)
    return out
