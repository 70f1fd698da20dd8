"""fVDB's torch-compatible functions (fvdb.relu, fvdb.add, fvdb.sum, ...): each calls the
torch function of its name, so it takes a torch.Tensor or a JaggedTensor (whose
__torch_function__ applies it to jdata and keeps the layout; the reductions reduce feature
dims only) and returns the same kind. tilegrid exports them under the same names as fVDB.
"""

from __future__ import annotations

import torch

# (name, what it computes): elementwise functions, then the reductions over feature dims.
_FUNCTIONS = (
    ("relu", "max(x, 0)"), ("relu_", "max(x, 0), in place"), ("sigmoid", "1 / (1 + exp(-x))"),
    ("tanh", "tanh(x)"), ("exp", "e^x"), ("log", "the natural logarithm"), ("sqrt", "the square root"),
    ("floor", "the largest integer <= x"), ("ceil", "the smallest integer >= x"),
    ("round", "x rounded (halves to even; decimals= as torch.round)"),
    ("nan_to_num", "x with NaN and infinities replaced (nan=, posinf=, neginf= as torch's)"),
    ("clamp", "x clamped to [min, max]"), ("add", "input + other (alpha= as torch.add)"),
    ("sub", "input - other"), ("mul", "input * other"), ("true_divide", "input / other"),
    ("floor_divide", "floor(input / other)"), ("remainder", "input modulo other, the sign of other"),
    ("pow", "input ** exponent"), ("maximum", "the larger of input and other"),
    ("minimum", "the smaller of input and other"), ("eq", "input == other"), ("ne", "input != other"),
    ("lt", "input < other"), ("le", "input <= other"), ("gt", "input > other"), ("ge", "input >= other"),
    ("where", "input where condition holds, else other (torch.where(condition, input, other))"),
    ("sum", "the sum over feature dims (dim=)"), ("mean", "the mean over feature dims"),
    ("amax", "the maximum over feature dims"), ("amin", "the minimum over feature dims"),
    ("argmax", "the index of the maximum along a feature dim"),
    ("argmin", "the index of the minimum along a feature dim"),
    ("all", "whether all are true over feature dims"), ("any", "whether any is true over feature dims"),
    ("norm", "the p-norm over feature dims"), ("var", "the variance over feature dims"),
    ("std", "the standard deviation over feature dims"),
)


def _make(name: str, what: str):
    target = getattr(torch, name)

    def function(*args, **kwargs):
        return target(*args, **kwargs)
    function.__name__ = function.__qualname__ = name
    function.__module__ = __name__
    function.__doc__ = (f"torch.{name} for a torch.Tensor or a JaggedTensor: {what}.\n\n"
                        f"Args:\n    args: torch.{name}'s positional arguments.\n"
                        f"    kwargs: torch.{name}'s keyword arguments.\n")
    return function


for _name, _what in _FUNCTIONS:
    globals()[_name] = _make(_name, _what)

__all__ = [name for name, _ in _FUNCTIONS]
