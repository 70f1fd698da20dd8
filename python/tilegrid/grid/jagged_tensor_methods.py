"""fVDB's tensor-like methods of JaggedTensor (a mixin of tilegrid.JaggedTensor): conversions
(cpu, cuda, float, long, type, ...), elementwise ops (abs, sqrt, round, floor division, modulo,
their in-place forms), autograd flags, shapes (rshape, eshape, lshape, ...), row masks and the
factories (from_tensor, from_zeros, from_data_and_indices, ...). Each works on jdata and keeps
the layout: a JaggedTensor here has one list dimension (ldim 1), a batch of tensors.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch


def _unary(name: str, doc: str):
    def method(self):
        return self.jagged_like(getattr(self._jdata, name)())
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


def _in_place(name: str):
    def method(self):
        getattr(self._jdata, name)()
        return self
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"{name[:-1]} of every element, in place (jdata is written); returns self."
    return method


def _in_place_binary(name: str, op):
    def method(self, other):
        if hasattr(other, "_jdata"):
            self._same_layout(other, f"JaggedTensor.{name}")
            other = other._jdata
        op(self._jdata, other)
        return self
    method.__name__ = method.__qualname__ = name
    return method


def _factory(name: str, fill, what: str):
    def make(cls, lsizes: Sequence[int], rsizes: Optional[Sequence[int]] = None, *, device=None, dtype=None,
             requires_grad: bool = False, pin_memory: bool = False):
        return cls._filled(fill, lsizes, rsizes, device, dtype, requires_grad, pin_memory)
    make.__name__ = make.__qualname__ = name
    make.__doc__ = (f"A batch of {what}: tensor i has lsizes[i] rows, each of shape rsizes.\n\n"
                    f"Args:\n    lsizes: The rows of each tensor.\n"
                    f"    rsizes: The shape of a row; default () (a row is one number).\n"
                    f"    device: As torch.{fill.__name__}'s.\n    dtype: As torch.{fill.__name__}'s.\n"
                    f"    requires_grad: As torch.{fill.__name__}'s.\n"
                    f"    pin_memory: As torch.{fill.__name__}'s.\n")
    return classmethod(make)


class JaggedTensorMethods:
    """The methods above, for JaggedTensor (which holds _jdata and _joffsets)."""

    abs = _unary("abs", "|x| of every element.")
    ceil = _unary("ceil", "The smallest integer >= each element.")
    floor = _unary("floor", "The largest integer <= each element.")
    sqrt = _unary("sqrt", "The square root of every element.")
    float = _unary("float", "The elements as float32.")
    double = _unary("double", "The elements as float64.")
    int = _unary("int", "The elements as int32.")
    long = _unary("long", "The elements as int64.")
    detach = _unary("detach", "The same elements, detached from autograd's graph (sharing storage).")
    clone = _unary("clone", "A copy of the elements (the offsets shared: they are never written).")
    abs_ = _in_place("abs_")
    ceil_ = _in_place("ceil_")
    floor_ = _in_place("floor_")
    sqrt_ = _in_place("sqrt_")
    __iadd__ = _in_place_binary("__iadd__", torch.Tensor.add_)
    __isub__ = _in_place_binary("__isub__", torch.Tensor.sub_)
    __imul__ = _in_place_binary("__imul__", torch.Tensor.mul_)
    __itruediv__ = _in_place_binary("__itruediv__", torch.Tensor.div_)
    __ifloordiv__ = _in_place_binary("__ifloordiv__", lambda a, b: a.copy_(torch.floor_divide(a, b)))
    __imod__ = _in_place_binary("__imod__", torch.Tensor.remainder_)
    __ipow__ = _in_place_binary("__ipow__", torch.Tensor.pow_)

    def __floordiv__(self, o):
        return self._binary(o, torch.floor_divide)

    def __rfloordiv__(self, o):
        return self._binary(o, lambda a, b: torch.floor_divide(b, a))

    def __mod__(self, o):
        return self._binary(o, torch.remainder)

    def __rmod__(self, o):
        return self._binary(o, lambda a, b: torch.remainder(b, a))

    def round(self, decimals: int = 0):
        """Every element rounded to `decimals` decimal places (halves to even, as torch).

        Args:
            decimals: Decimal places; default 0.
        """
        return self.jagged_like(torch.round(self._jdata, decimals=decimals))

    def round_(self, decimals: int = 0):
        """round, in place; returns self.

        Args:
            decimals: Decimal places; default 0.
        """
        self._jdata.round_(decimals=decimals)
        return self

    def cpu(self):
        """This JaggedTensor on the CPU (itself if it is there)."""
        return self.to("cpu")

    def cuda(self, device: Optional[int] = None):
        """This JaggedTensor on a CUDA device.

        Args:
            device: The device index; default the current one.
        """
        return self.to(torch.device("cuda", device) if device is not None else "cuda")

    @property
    def is_cpu(self) -> bool:
        """Whether the elements are on the CPU."""
        return self._jdata.is_cpu

    @property
    def is_cuda(self) -> bool:
        """Whether the elements are on a CUDA device."""
        return self._jdata.is_cuda

    @property
    def requires_grad(self) -> bool:
        """Whether autograd records operations on the elements."""
        return self._jdata.requires_grad

    def requires_grad_(self, requires_grad: bool = True):
        """Sets requires_grad of the elements, in place; returns self.

        Args:
            requires_grad: Whether autograd records operations on them; default True.
        """
        self._jdata.requires_grad_(requires_grad)
        return self

    def type(self, dtype: torch.dtype):
        """The elements converted to `dtype`.

        Args:
            dtype: A torch dtype.
        """
        return self.jagged_like(self._jdata.to(dtype))

    def type_as(self, other):
        """The elements converted to the dtype of `other`.

        Args:
            other: A JaggedTensor or a torch.Tensor.
        """
        return self.type(other.dtype)

    @property
    def rshape(self) -> tuple:
        """The shape of jdata ("raw shape": all rows, then the element dims)."""
        return tuple(self._jdata.shape)

    @property
    def eshape(self) -> list:
        """The shape of one row (jdata's dims after the first)."""
        return list(self._jdata.shape[1:])

    @property
    def edim(self) -> int:
        """How many dims a row has (len(eshape))."""
        return self._jdata.dim() - 1

    @property
    def ldim(self) -> int:
        """How many list dims the batch has: 1 (a batch of tensors; fVDB also has lists of
        lists)."""
        return 1

    @property
    def lshape(self) -> list:
        """The rows of each tensor of the batch."""
        return self._joffsets.diff().tolist()

    def jflatten(self, dim: int = 0):
        """The batch with its list dims from `dim` on merged into one: with one list dim, the
        batch itself.

        Args:
            dim: The first list dim to merge: 0 (or -1).
        """
        if dim not in (0, -1):
            raise ValueError(f"JaggedTensor.jflatten: this batch has one list dim, so dim must be 0 or -1, "
                             f"got {dim}")
        return self

    def jsqueeze(self, dim: Optional[int] = None):
        """The batch without its list dims of size one: with one list dim, the batch itself.

        Args:
            dim: None, or the list dim to squeeze: 0 (or -1).
        """
        if dim not in (None, 0, -1):
            raise ValueError(f"JaggedTensor.jsqueeze: this batch has one list dim, so dim must be None, 0 "
                             f"or -1, got {dim}")
        return self

    def rmask(self, mask: torch.Tensor):
        """The rows where `mask` is set, each in its tensor (the offsets recounted).

        Args:
            mask: bool [rows] on the elements' device.
        """
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 1 \
                or mask.shape[0] != self._jdata.shape[0]:
            got = (f"{mask.dtype} of shape {list(mask.shape)}" if isinstance(mask, torch.Tensor)
                   else type(mask).__name__)
            raise ValueError(f"JaggedTensor.rmask: mask must be bool [{self._jdata.shape[0]}] (one entry a "
                             f"row), got {got}")
        if mask.device != self._jdata.device:
            raise ValueError(f"JaggedTensor.rmask: mask must be on {self._jdata.device}, got {mask.device}")
        counts = torch.bincount(self.jidx.long()[mask], minlength=self.num_tensors)
        offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        return type(self)._from_trusted(self._jdata[mask], offsets)

    @classmethod
    def from_tensor(cls, data: torch.Tensor):
        """A batch of one tensor.

        Args:
            data: A tensor with at least one dim.
        """
        return cls([data])

    @classmethod
    def from_list_of_tensors(cls, tensors: Sequence[torch.Tensor]):
        """A batch of the tensors (as the constructor).

        Args:
            tensors: Tensors whose shapes agree in all but the first dim.
        """
        return cls(tensors)

    @classmethod
    def from_cat(cls, things_to_cat: Sequence, dim: Optional[int] = None):
        """The batches concatenated (as tilegrid.jcat).

        Args:
            things_to_cat: JaggedTensors.
            dim: None: the batches one after another; k: their i-th tensors joined along dim k.
        """
        from .jagged_tensor import jcat_jagged

        things = list(things_to_cat)
        if not things:
            raise ValueError("JaggedTensor.from_cat: expected at least one JaggedTensor, got none")
        if not all(isinstance(t, cls) for t in things):
            raise TypeError(f"JaggedTensor.from_cat: expected JaggedTensors, got "
                            f"{sorted({type(t).__name__ for t in things})}")
        return jcat_jagged(things, dim)

    @classmethod
    def from_data_and_indices(cls, data: torch.Tensor, indices: torch.Tensor, num_tensors: int):
        """A batch from its rows and the tensor each row belongs to.

        Args:
            data: The rows [N, ...], grouped by tensor (indices non-decreasing).
            indices: Integer [N] on data's device, in [0, num_tensors), non-decreasing.
            num_tensors: How many tensors (some may have no rows).
        """
        op = "JaggedTensor.from_data_and_indices"
        if not isinstance(indices, torch.Tensor) or indices.dim() != 1 or indices.is_floating_point() \
                or indices.dtype == torch.bool or not isinstance(data, torch.Tensor) or data.dim() < 1 \
                or indices.shape[0] != data.shape[0]:
            raise ValueError(f"{op}: need data [N, ...] and integer indices [N], got "
                             f"{getattr(data, 'shape', type(data).__name__)} and "
                             f"{getattr(indices, 'shape', type(indices).__name__)}")
        if indices.shape[0] and (int(indices.min()) < 0 or int(indices.max()) >= num_tensors):
            raise ValueError(f"{op}: indices must lie in [0, {num_tensors}), got [{int(indices.min())}, "
                             f"{int(indices.max())}]")
        if indices.shape[0] > 1 and bool((indices.diff() < 0).any()):
            raise ValueError(f"{op}: indices must be non-decreasing (each tensor's rows together)")
        counts = torch.bincount(indices.long(), minlength=num_tensors)
        return cls.from_data_and_offsets(data, torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)]))

    @classmethod
    def _filled(cls, make, lsizes, rsizes, device, dtype, requires_grad: bool, pin_memory: bool):
        sizes = [int(n) for n in lsizes]
        if any(n < 0 for n in sizes):
            raise ValueError(f"JaggedTensor: lsizes must be >= 0, got {sizes}")
        data = make((sum(sizes), *(rsizes or ())), device=device, dtype=dtype, pin_memory=pin_memory)
        offsets = torch.tensor([0] + sizes, dtype=torch.int64).cumsum(0).to(data.device)
        return cls.from_data_and_offsets(data.requires_grad_(requires_grad), offsets)

    from_zeros = _factory("from_zeros", torch.zeros, "zeros")
    from_ones = _factory("from_ones", torch.ones, "ones")
    from_empty = _factory("from_empty", torch.empty, "uninitialised elements")
    from_rand = _factory("from_rand", torch.rand, "uniform samples in [0, 1)")
    from_randn = _factory("from_randn", torch.randn, "standard normal samples")
