"""JaggedTensor: a batch of tensors with different leading sizes, in fVDB's terms.

jdata [N, ...] holds the rows of every tensor one after another; joffsets (int64, [B+1])
says where each starts; jidx (int32, [N]) gives each row's tensor index, computed on demand
by tilegrid's kernel. Element-wise arithmetic, and the torch functions of _ELEMENTWISE and
_ROW_REDUCTIONS (through __torch_function__), keep the jagged layout; jsum, jmax and jmin
reduce each tensor's rows.
"""

from __future__ import annotations

import operator
from typing import Any, Optional, Sequence, Union

import torch

from .. import _C
from .._torch import current_stream
from .jagged_tensor_methods import JaggedTensorMethods


@torch.library.custom_op("tilegrid::jagged_batch_index", mutates_args=())
def _batch_index(joffsets: torch.Tensor, rows: int) -> torch.Tensor:
    """int32 [rows]: the tensor index of each row (tilegrid's kernel); a custom op, so that
    torch.compile(fullgraph=True) traces JaggedTensor.jidx."""
    jidx = torch.empty(rows, dtype=torch.int32, device=joffsets.device)
    _C.jagged_batch_index(joffsets, jidx, current_stream(jidx))
    return jidx


@_batch_index.register_fake
def _(joffsets, rows):
    return joffsets.new_empty(rows, dtype=torch.int32)


# torch functions (by __name__) that act on each element, so that on a JaggedTensor they act on
# jdata and keep the layout (fVDB's list, and a few more of the kind). Tensor methods reached
# through a tensor operand (tensor + jagged calls Tensor.add) have the same names.
_ELEMENTWISE = frozenset({
    "abs", "abs_", "neg", "negative", "sign", "relu", "relu_", "relu6", "leaky_relu", "elu",
    "selu", "celu", "gelu", "silu", "mish", "softplus", "hardtanh", "hardswish", "hardsigmoid",
    "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
    "square", "reciprocal", "sin", "cos", "tan", "erf", "ceil", "floor", "round", "trunc",
    "frac", "nan_to_num", "clamp", "clamp_", "clip", "clamp_min", "clamp_max", "isnan",
    "isinf", "isfinite", "logical_not", "dropout",
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
    "floor_divide", "remainder", "fmod", "pow", "maximum", "minimum", "fmax", "fmin", "eq",
    "ne", "lt", "le", "gt", "ge", "where", "lerp", "logical_and", "logical_or", "logical_xor",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__pow__", "__rpow__", "__floordiv__", "__mod__",
})

# Reductions over a tensor's feature dimensions (never dim 0, the rows): they keep one row a
# row, so the layout. The position of their dim argument.
_ROW_REDUCTIONS = {"sum": 1, "mean": 1, "prod": 1, "amax": 1, "amin": 1, "argmax": 1,
                   "argmin": 1, "all": 1, "any": 1, "var": 1, "std": 1, "logsumexp": 1,
                   "softmax": 1, "log_softmax": 1, "norm": 2}


def _reduced_dims(name: str, args: tuple, kwargs: dict, ndim: int) -> Optional[list[int]]:
    """The dims a row reduction reduces (normalised), None for all of them."""
    dim = kwargs.get("dim")
    position = _ROW_REDUCTIONS[name]
    if dim is None and len(args) > position:
        dim = args[position]
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    return [d % ndim if ndim else d for d in dims]


def _check_layout(jdata: torch.Tensor, joffsets: torch.Tensor) -> None:
    """The checks of from_data_and_offsets that read no values (its C++ validation's first
    ones, with their messages): what it checks while torch.compile traces it."""
    if jdata.dim() < 1:
        raise ValueError(
            "JaggedTensor: jdata must have at least one dimension [N, ...], got a scalar"
        )
    if joffsets.dim() != 1:
        raise ValueError(f"JaggedTensor: joffsets must be 1-D, got {joffsets.dim()} dimensions")
    if joffsets.dtype != torch.int64:
        got = str(joffsets.dtype).removeprefix("torch.")
        raise TypeError(f"JaggedTensor: joffsets must be int64, got {got}")
    if joffsets.device != jdata.device:
        raise ValueError(
            f"JaggedTensor: joffsets is on {joffsets.device} but jdata on {jdata.device}"
        )
    if joffsets.shape[0] < 1:
        raise ValueError("JaggedTensor: joffsets must have B+1 >= 1 entries, got an empty tensor")


class JaggedTensor(JaggedTensorMethods):
    """A batch of tensors of different leading sizes stored as one: jdata [N, ...] holds the
    rows of every tensor one after another, joffsets (int64 [B + 1]) where each starts.

    Args:
        tensors: The tensors (or one tensor, a batch of one), each with at least one
            dimension; their shapes agree in all but the first, and their dtypes and devices
            agree. They are copied into jdata.
    """

    def __init__(self, tensors: Union[Sequence[torch.Tensor], torch.Tensor]):
        """From a list of tensors whose shapes agree in all but the first dimension."""
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        tensors = list(tensors)
        if not tensors:
            raise ValueError("JaggedTensor: expected at least one tensor, got an empty list")
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.dim() < 1:
                raise ValueError(
                    f"JaggedTensor: element {i} must be a tensor with at least one dimension"
                )
            if t.shape[1:] != tensors[0].shape[1:] or t.dtype != tensors[0].dtype:
                raise ValueError(
                    f"JaggedTensor: element {i} has shape {tuple(t.shape)} and dtype {t.dtype}; "
                    f"expected [*, {', '.join(map(str, tensors[0].shape[1:]))}] "
                    f"and {tensors[0].dtype} like element 0"
                )
            if t.device != tensors[0].device:
                raise ValueError(
                    f"JaggedTensor: element {i} is on {t.device}, element 0 on {tensors[0].device}"
                )
        sizes = torch.tensor([0] + [t.shape[0] for t in tensors], dtype=torch.int64, device="cpu")
        self._jdata = torch.cat(tensors, dim=0)
        self._joffsets = torch.cumsum(sizes, 0).to(self._jdata.device)
        self._jidx = None

    @classmethod
    def from_data_and_offsets(cls, jdata: torch.Tensor, joffsets: torch.Tensor) -> "JaggedTensor":
        """Wrap existing storage; validated (offsets start at 0, never decrease, end at N). While
        torch.compile traces it, only shapes, dtypes and devices are checked: the offsets'
        values are checked in eager mode only (reading them would break the graph)."""
        for name, t in (("jdata", jdata), ("joffsets", joffsets)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"JaggedTensor.from_data_and_offsets: {name} must be a torch.Tensor, "
                                f"got {type(t).__name__}")
        if torch.compiler.is_compiling():
            _check_layout(jdata, joffsets)
        else:
            # The C++ check reads jdata's rank, rows and device only: an empty stand-in of
            # those passes any dtype (int16 or complex data would fail in DLPack).
            probe = (jdata if jdata.dim() == 0
                     else jdata.new_empty((jdata.shape[0], 0), dtype=torch.uint8))
            _C.validate_jagged(probe, joffsets, current_stream(jdata))
        self = cls.__new__(cls)
        self._jdata, self._joffsets, self._jidx = jdata, joffsets, None
        return self

    @classmethod
    def _from_trusted(cls, jdata: torch.Tensor, joffsets: torch.Tensor) -> "JaggedTensor":
        """Wrap storage whose offsets tilegrid made itself (a grid's voxel_offsets for its
        features): no validation, so no device-to-host copy on a GPU."""
        self = cls.__new__(cls)
        self._jdata, self._joffsets, self._jidx = jdata, joffsets, None
        return self

    @property
    def jdata(self) -> torch.Tensor:
        """[N, ...]: the rows of every tensor, one tensor after another."""
        return self._jdata

    @property
    def joffsets(self) -> torch.Tensor:
        """int64 [B + 1]: tensor b is rows joffsets[b] to joffsets[b + 1] of jdata."""
        return self._joffsets

    @property
    def jidx(self) -> torch.Tensor:
        """int32 [N]: the index of the tensor each row belongs to."""
        if self._jidx is None:
            self._jidx = _batch_index(self._joffsets, self._jdata.shape[0])
        return self._jidx

    @property
    def device(self) -> torch.device:
        """jdata's device."""
        return self._jdata.device

    @property
    def dtype(self) -> torch.dtype:
        """jdata's dtype."""
        return self._jdata.dtype

    @property
    def num_tensors(self) -> int:
        """The number of tensors (B)."""
        return self._joffsets.shape[0] - 1

    def __len__(self) -> int:
        return self.num_tensors

    def __getitem__(self, i: int) -> torch.Tensor:
        if not -self.num_tensors <= i < self.num_tensors:
            raise IndexError(f"JaggedTensor: index {i} out of range for {self.num_tensors} tensors")
        i %= self.num_tensors
        start, end = self._joffsets[i : i + 2].tolist()
        return self._jdata[start:end]

    def unbind(self) -> list[torch.Tensor]:
        """The tensors as a list of views into jdata."""
        sizes = torch.diff(self._joffsets).tolist()
        return list(torch.split(self._jdata, sizes, dim=0))

    def jagged_like(self, data: torch.Tensor) -> "JaggedTensor":
        """A JaggedTensor with this one's layout and new row data (same number of rows)."""
        if data.shape[0] != self._jdata.shape[0]:
            raise ValueError(
                f"jagged_like: data must have {self._jdata.shape[0]} rows, got {data.shape[0]}"
            )
        out = JaggedTensor.__new__(JaggedTensor)
        out._jdata, out._joffsets, out._jidx = data, self._joffsets, self._jidx
        return out

    def to(self, *args, **kwargs) -> "JaggedTensor":
        """jdata converted by torch.Tensor.to with the same arguments (a device, a dtype or
        both), joffsets moved to its device; the same layout."""
        data = self._jdata.to(*args, **kwargs)
        out = JaggedTensor.__new__(JaggedTensor)
        out._jdata, out._joffsets, out._jidx = data, self._joffsets.to(data.device), None
        return out

    def _reduce_dim(self, op: str, dim) -> int:
        """dim as a dimension of jdata in [0, jdata.dim()): negative ones count from the end and
        reach dim 1 at most (as fVDB's); dim 0 is the rows, the jagged dimension."""
        ndim = self._jdata.dim()
        try:
            if isinstance(dim, bool):
                raise TypeError
            dim = operator.index(dim)
        except TypeError:
            raise TypeError(f"JaggedTensor.{op}: dim must be an int, got {dim!r}") from None
        if not -(ndim - 1) <= dim < ndim:
            raise IndexError(f"JaggedTensor.{op}: dim must be in [{-(ndim - 1)}, {ndim - 1}] for "
                             f"jdata of {ndim} dimensions, got {dim}")
        return dim % ndim

    def _one_row_each(self, data: torch.Tensor) -> "JaggedTensor":
        """data [B, ...] as B tensors of one row each."""
        offsets = torch.arange(data.shape[0] + 1, dtype=torch.int64, device=data.device)
        return JaggedTensor._from_trusted(data, offsets)

    def jsum(self, dim: int = 0, keepdim: bool = False) -> "JaggedTensor":
        """Sums within each tensor, as fVDB's jsum. Differentiable.

        Args:
            dim: 0 (default): over each tensor's rows, giving [B, ...] (one row a tensor,
                zeros for an empty tensor; keepdim has no effect there); otherwise a feature
                dimension of jdata (negative ones count from the end), the rows kept.
            keepdim: Whether a summed feature dimension stays, with size 1.

        Returns:
            A JaggedTensor: B tensors of one row each for dim 0, this one's layout otherwise.
        """
        dim = self._reduce_dim("jsum", dim)
        if dim != 0:
            return self.jagged_like(self._jdata.sum(dim, keepdim=keepdim))
        out = self._jdata.new_zeros(self.num_tensors, *self._jdata.shape[1:])
        return self._one_row_each(out.index_add(0, self.jidx.long(), self._jdata))

    def jmax(self, dim: int = 0, keepdim: bool = False) -> list:
        """Maxima within each tensor and where they are, as fVDB's jmax. Differentiable in
        the values.

        Args:
            dim: 0 (default): over each tensor's rows, giving [B, ...] maxima (zeros for an
                empty tensor) and the row within its tensor of each (the last of equal ones, as
                fVDB's; -1 for an empty tensor); otherwise a feature dimension of jdata, as
                torch.max(jdata, dim) with the rows kept.
            keepdim: Whether a reduced feature dimension stays, with size 1.

        Returns:
            [values, indices]: two JaggedTensors (B tensors of one row each for dim 0).
        """
        return self._extreme("jmax", dim, keepdim, "amax")

    def jmin(self, dim: int = 0, keepdim: bool = False) -> list:
        """Minima within each tensor and where they are, as jmax does maxima (fVDB's jmin).

        Args:
            dim: 0 (default): over each tensor's rows; otherwise a feature dimension of jdata.
            keepdim: Whether a reduced feature dimension stays, with size 1.

        Returns:
            [values, indices]: two JaggedTensors (B tensors of one row each for dim 0).
        """
        return self._extreme("jmin", dim, keepdim, "amin")

    def _extreme(self, op: str, dim, keepdim: bool, reduce: str) -> list:
        dim = self._reduce_dim(op, dim)
        data = self._jdata
        if data.dtype == torch.bool:
            raise TypeError(f"JaggedTensor.{op}: jdata must not be bool")
        if dim != 0:
            values, indices = (torch.max if reduce == "amax" else torch.min)(data, dim, keepdim=keepdim)
            return [self.jagged_like(values), self.jagged_like(indices)]
        b = self.jidx.long()
        index = b.view(-1, *([1] * (data.dim() - 1))).expand_as(data)
        shape = (self.num_tensors, *data.shape[1:])
        values = data.new_zeros(shape).scatter_reduce(0, index, data, reduce, include_self=False)
        # Each row's position within its tensor where it equals its tensor's extreme; the last.
        local = torch.arange(data.shape[0], device=data.device) - self._joffsets[b]
        local = local.view(index.shape[:1] + (1,) * (data.dim() - 1)).expand_as(data)
        hit = torch.where(data.detach() == values.detach()[b], local, -1)
        indices = torch.full(shape, -1, dtype=torch.int64, device=data.device)
        indices = indices.scatter_reduce(0, index, hit, "amax", include_self=True)
        return [self._one_row_each(values), self._one_row_each(indices)]

    def jreshape(self, lshape: Sequence[int]) -> "JaggedTensor":
        """The same rows split into tensors of other sizes (fVDB's jreshape, one list dimension).

        Args:
            lshape: The tensors' row counts, adding up to jdata's rows.

        Returns:
            A JaggedTensor over the same jdata.
        """
        if isinstance(lshape, torch.Tensor):
            lshape = lshape.tolist()
        if isinstance(lshape, (str, bytes)) or not hasattr(lshape, "__iter__"):
            raise TypeError(f"JaggedTensor.jreshape: lshape must be a sequence of ints, got {lshape!r}")
        try:
            if any(isinstance(n, bool) for n in lshape):
                raise TypeError
            sizes = [operator.index(n) for n in lshape]
        except TypeError:
            raise TypeError(f"JaggedTensor.jreshape: lshape must be a sequence of ints (tilegrid's "
                            f"JaggedTensor has one list dimension), got {lshape!r}") from None
        if not sizes or any(n < 0 for n in sizes) or sum(sizes) != self._jdata.shape[0]:
            raise ValueError(f"JaggedTensor.jreshape: lshape must be at least one count >= 0 "
                             f"adding up to the {self._jdata.shape[0]} rows, got {sizes}")
        offsets = torch.tensor([0, *sizes], dtype=torch.int64).cumsum(0).to(self._jdata.device)
        return JaggedTensor._from_trusted(self._jdata, offsets)

    def jreshape_as(self, other: "JaggedTensor") -> "JaggedTensor":
        """This one's rows jagged as `other` (a JaggedTensor with as many rows)."""
        if not isinstance(other, JaggedTensor):
            raise TypeError(f"JaggedTensor.jreshape_as: other must be a JaggedTensor, got "
                            f"{type(other).__name__}")
        return other.jagged_like(self._jdata)

    def _binary(self, other, op) -> "JaggedTensor":
        if isinstance(other, JaggedTensor):
            if other._joffsets is not self._joffsets and not torch.equal(
                other._joffsets.cpu(), self._joffsets.cpu()
            ):
                raise ValueError("JaggedTensor: operands have different layouts (joffsets differ)")
            other = other._jdata
        return self.jagged_like(op(self._jdata, other))

    def __add__(self, o):
        return self._binary(o, torch.add)

    def __radd__(self, o):
        return self._binary(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._binary(o, torch.sub)

    def __rsub__(self, o):
        return self._binary(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._binary(o, torch.mul)

    def __rmul__(self, o):
        return self._binary(o, lambda a, b: b * a)

    def __truediv__(self, o):
        return self._binary(o, torch.div)

    def __rtruediv__(self, o):
        return self._binary(o, lambda a, b: b / a)

    def __pow__(self, o):
        return self._binary(o, torch.pow)

    def __lt__(self, o):
        return self._binary(o, torch.lt)

    def __le__(self, o):
        return self._binary(o, torch.le)

    def __gt__(self, o):
        return self._binary(o, torch.gt)

    def __ge__(self, o):
        return self._binary(o, torch.ge)

    def __neg__(self):
        return self.jagged_like(-self._jdata)

    def _same_layout(self, other: "JaggedTensor", op: str) -> None:
        """Raises a ValueError unless other has this one's offsets (the same object, or equal
        values: compared on the host, which waits for a GPU's stream)."""
        if other._joffsets is self._joffsets:
            return
        if other._joffsets.shape != self._joffsets.shape or not torch.equal(
                other._joffsets.cpu(), self._joffsets.cpu()):
            raise ValueError(f"{op}: the JaggedTensors have different layouts (joffsets differ)")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        """torch functions on JaggedTensors: an elementwise one (torch.relu, torch.add, a tensor
        operand's arithmetic, ...; _ELEMENTWISE) or a reduction over the feature dimensions
        (torch.sum(x, dim=-1), ...; _ROW_REDUCTIONS) runs on jdata and returns a JaggedTensor
        with the same offsets, as fVDB's; in-place forms and out= write the JaggedTensor's
        jdata and return it. JaggedTensor operands must share one layout. Any other function
        raises a TypeError (use jdata, or jcat / jsum / jmax / jmin / jreshape).

        Args:
            func: The torch function called.
            types: The types of its arguments that define __torch_function__.
            args: Its positional arguments.
            kwargs: Its keyword arguments.
        """
        kwargs = kwargs or {}
        name = getattr(func, "__name__", repr(func))
        jagged = [a for a in _flat(args) + _flat(list(kwargs.values())) if isinstance(a, JaggedTensor)]
        if not jagged:
            return NotImplemented
        if name not in _ELEMENTWISE and name not in _ROW_REDUCTIONS:
            raise TypeError(
                f"torch.{name} does not take a JaggedTensor: only elementwise functions and "
                f"reductions over the feature dimensions keep its layout. Apply it to .jdata "
                f"(and jagged_like the result), or use tg.jcat, jsum, jmax, jmin or jreshape")
        proto = jagged[0]
        for other in jagged[1:]:
            proto._same_layout(other, f"torch.{name}")
        rows = proto._jdata.shape[0]
        if name in _ROW_REDUCTIONS:
            dims = _reduced_dims(name, args, kwargs, proto._jdata.dim())
            if dims is None or 0 in dims:
                raise ValueError(
                    f"torch.{name} on a JaggedTensor reduces feature dimensions only (dim >= 1 "
                    f"of jdata), got dim={kwargs.get('dim', dims)}: the rows are the jagged "
                    f"dimension; use jsum / jmax / jmin to reduce each tensor's rows")
        out = kwargs.get("out")
        result = func(*_unwrap(args), **_unwrap(kwargs))
        if isinstance(out, JaggedTensor):
            return out
        if name.endswith("_") and not name.endswith("__"):
            return proto
        return _wrap_rows(result, proto, rows, name)

    def __repr__(self) -> str:
        return (
            f"JaggedTensor(num_tensors={self.num_tensors}, jdata={tuple(self._jdata.shape)}, "
            f"dtype={self.dtype}, device={self.device})"
        )


def _flat(values) -> list:
    """The items of a (nested) list or tuple, flattened."""
    out = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, (list, tuple)) else [v])
    return out


def _unwrap(value: Any) -> Any:
    """value with every JaggedTensor in it (at any depth of lists, tuples and dicts) replaced
    by its jdata."""
    if isinstance(value, JaggedTensor):
        return value.jdata
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


def _wrap_rows(result: Any, proto: JaggedTensor, rows: int, name: str) -> Any:
    """A torch function's result with each tensor of `rows` rows jagged like proto; a tensor
    of another shape is an error (the function changed the rows)."""
    if isinstance(result, torch.Tensor):
        if result.dim() == 0 or result.shape[0] != rows:
            raise ValueError(f"torch.{name} on a JaggedTensor gave a result of shape "
                             f"{list(result.shape)}, not one row a row of jdata ({rows})")
        return proto.jagged_like(result)
    if isinstance(result, tuple) and hasattr(result, "_fields"):  # torch.return_types
        return type(result)([_wrap_rows(r, proto, rows, name) for r in result])
    if isinstance(result, (list, tuple)):
        return type(result)(_wrap_rows(r, proto, rows, name) for r in result)
    return result


def jcat_jagged(tensors: Sequence[JaggedTensor], dim: Optional[int] = None) -> JaggedTensor:
    """fVDB's jcat for JaggedTensors: dim=None puts the batches one after another (their
    tensors in order); dim=k concatenates the i-th tensors of every batch along dimension k of
    each tensor (k=0: their rows; the batches must hold equally many tensors)."""
    if not tensors:
        raise ValueError("jcat: expected at least one JaggedTensor")
    if dim is None:
        return JaggedTensor([t for j in tensors for t in j.unbind()])
    counts = {j.num_tensors for j in tensors}
    if len(counts) != 1:
        raise ValueError(f"jcat: with dim={dim} the JaggedTensors must hold equally many tensors, got "
                         f"{[j.num_tensors for j in tensors]}")
    parts = [j.unbind() for j in tensors]
    return JaggedTensor([torch.cat([p[i] for p in parts], dim=dim) for i in range(counts.pop())])
