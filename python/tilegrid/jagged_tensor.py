"""JaggedTensor: a batch of tensors with different leading sizes, in fVDB's terms.

jdata [N, ...] holds the rows of every tensor one after another; joffsets (int64, [B+1])
says where each starts; jidx (int32, [N]) gives each row's tensor index, computed on demand
by tilegrid's kernel. Element-wise arithmetic keeps the jagged layout.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from . import _C
from ._torch import current_stream


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


class JaggedTensor:
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
        sizes = torch.tensor([0] + [t.shape[0] for t in tensors], dtype=torch.int64)
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

    def __neg__(self):
        return self.jagged_like(-self._jdata)

    def __repr__(self) -> str:
        return (
            f"JaggedTensor(num_tensors={self.num_tensors}, jdata={tuple(self._jdata.shape)}, "
            f"dtype={self.dtype}, device={self.device})"
        )


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
