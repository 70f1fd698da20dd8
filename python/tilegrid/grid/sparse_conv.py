"""Sparse 3D convolution over GridBatch topologies, with fVDB's ConvolutionPlan interface.

    plan = tg.ConvolutionPlan.from_grid_batch(kernel_size=3, stride=1, source_grid=grid,
                                              target_grid=grid)      # submanifold
    out = plan.execute(features, weight)    # weight [C_out, C_in, 3, 3, 3], as torch.nn.Conv3d

A plan holds the kernel map between two grids (for every tap and output voxel, the input row
or -1; built once on the grids' device) and its inverse (the input gradient's map), so it is
reused by every layer, forward and backward, on the same pair of grids. Geometry (tap t of
output o reads input o * stride + t - pad, pad = (K - 1) // 2, fVDB 0.6's relation: for K = 2
taps o * stride .. o * stride + 1, for K = 4 o * stride - 1 .. o * stride + 2; transposed:
input i feeds output i * stride + t - pad) is documented in include/tilegrid/grid/convolution.h.
fVDB's conv_grid keeps the source grid's origin where tilegrid's moves it to the centre of an
output's receptive field (half a source voxel for even K; odd kernel sizes agree).

The GEMMs are custom ops (`tilegrid::sparse_conv`, `tilegrid::sparse_conv_backward`) with fake
kernels and a registered autograd formula, so they are differentiable and torch.compile traces
them. They run on the CPU (float64 sums) or the GPU, where the grids are.
"""

from __future__ import annotations

import operator
from typing import Optional, Union

import torch

from .. import _C
from .._torch import current_stream, dlpack
from ..gemm import matmul
from .jagged_tensor import JaggedTensor


_INT32_MAX = 2**31 - 1


def vec3(name: str, value, minimum: int = 1) -> tuple[int, int, int]:
    """An int or three ints (Python, numpy or torch integers; not bools or floats, which
    int() would truncate), each in [minimum, 2**31 - 1], the C++ side's int32, as a tuple."""
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        items = tuple(value) if hasattr(value, "__iter__") else (operator.index(value),) * 3
        if any(isinstance(v, bool) for v in items):
            raise TypeError
        out = tuple(operator.index(v) for v in items)
    except TypeError:
        raise TypeError(f"{name} must be an int or three ints, got {value!r}") from None
    if len(out) != 3 or any(not minimum <= v <= _INT32_MAX for v in out):
        raise ValueError(f"{name} must be an int or three ints, each in [{minimum}, 2**31 - 1], "
                         f"got {value!r}")
    return out


# ---------------------------------------------------------------------------------------------
# The custom ops. `weight` here is tilegrid's layout, [taps, C_in, C_out] (one GEMM operand a
# tap); ConvolutionPlan.execute converts from torch's [C_out, C_in, kx, ky, kz].


def _order(row_order: torch.Tensor):
    """An empty row order (or map in row order) means none (the CPU plans build none)."""
    return row_order if row_order.numel() > 0 else None


@torch.library.custom_op("tilegrid::sparse_conv", mutates_args=())
def sparse_conv(
    features: torch.Tensor,
    weight: torch.Tensor,
    kernel_map: torch.Tensor,
    inverse_map: torch.Tensor,
    row_order: torch.Tensor,
    inverse_row_order: torch.Tensor,
    map_in_row_order: torch.Tensor,
    inverse_map_in_row_order: torch.Tensor,
    allow_tf32: bool,
) -> torch.Tensor:
    """out[o] = sum over taps t of features[kernel_map[t, o]] @ weight[t] (absent rows skipped).
    The inverse map, its order and its map in that order are not read here; they are the input
    gradient's (arguments so that the autograd formula has them). row_order:
    kernel_map_row_order of the map, or empty; map_in_row_order: kernel_map_in_row_order of the
    map and that order, or empty (both speed only, never the result). allow_tf32: float32 on a
    GPU (sm_80+) multiplies as TF32 on tensor cores, in both passes."""
    return _forward(features, weight, kernel_map, row_order, map_in_row_order, allow_tf32)


def _forward(features, weight, kernel_map, row_order, map_in_row_order, allow_tf32,
             scale=None, shift=None, residual=None, relu=False):
    """The forward's kernels, with the inference epilogue (see ConvolutionPlan.execute) where
    any part of it is given."""
    out = features.new_empty(kernel_map.shape[1], weight.shape[2])
    _C.sparse_conv_forward(
        dlpack(kernel_map), dlpack(features), dlpack(weight), dlpack(out), False,
        current_stream(features), dlpack(_order(row_order)), dlpack(_order(map_in_row_order)),
        allow_tf32, dlpack(scale), dlpack(shift), dlpack(residual), relu,
    )
    return out


@sparse_conv.register_fake
def _(features, weight, kernel_map, inverse_map, row_order, inverse_row_order, map_in_row_order,
      inverse_map_in_row_order, allow_tf32):
    return features.new_empty(kernel_map.shape[1], weight.shape[2])


@torch.library.custom_op("tilegrid::sparse_conv_backward", mutates_args=())
def sparse_conv_backward(
    grad_out: torch.Tensor,
    features: torch.Tensor,
    weight: torch.Tensor,
    kernel_map: torch.Tensor,
    inverse_map: torch.Tensor,
    row_order: torch.Tensor,
    inverse_row_order: torch.Tensor,
    map_in_row_order: torch.Tensor,
    inverse_map_in_row_order: torch.Tensor,
    need_features: bool,
    need_weight: bool,
    allow_tf32: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_features, grad_weight); an unneeded one is an empty tensor."""
    stream = current_stream(grad_out)
    grad_features, grad_weight = features.new_empty(0), weight.new_empty(0)
    if need_features:
        # The input gradient is the same gathered GEMM over the inverse map with weight[t]^T.
        grad_features = torch.empty_like(features)
        _C.sparse_conv_forward(
            inverse_map, grad_out, weight, grad_features, True, stream, _order(inverse_row_order),
            _order(inverse_map_in_row_order), allow_tf32,
        )
    if need_weight:
        grad_weight = torch.empty_like(weight)
        _C.sparse_conv_backward_weight(
            kernel_map, features, grad_out, grad_weight, stream, _order(row_order),
            _order(map_in_row_order), allow_tf32,
        )
    return grad_features, grad_weight


@sparse_conv_backward.register_fake
def _(grad_out, features, weight, kernel_map, inverse_map, row_order, inverse_row_order,
      map_in_row_order, inverse_map_in_row_order, need_features, need_weight, allow_tf32):
    return (
        torch.empty_like(features) if need_features else features.new_empty(0),
        torch.empty_like(weight) if need_weight else weight.new_empty(0),
    )


def _setup_context(ctx, inputs, output):
    *tensors, ctx.allow_tf32 = inputs
    ctx.save_for_backward(*tensors)


def _backward(ctx, grad_out):
    features, weight, *maps = ctx.saved_tensors
    need_features, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    grad_features, grad_weight = sparse_conv_backward(
        grad_out.contiguous(), features, weight, *maps, need_features, need_weight, ctx.allow_tf32,
    )
    return (grad_features if need_features else None, grad_weight if need_weight else None,
            *([None] * len(maps)), None)


sparse_conv.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------------------------


def _epilogue_args(scale, shift, residual, relu, features, cout, rows):
    """execute()'s epilogue checked and in the kernels' forms (scale and shift float32
    contiguous, residual in the features' dtype, contiguous), or None where there is none."""
    if scale is None and shift is None and residual is None and not relu:
        return None
    op = "ConvolutionPlan.execute"

    def per_channel(name, v):
        if v is None:
            return None
        if not isinstance(v, torch.Tensor) or v.shape != (cout,) or not v.is_floating_point():
            raise ValueError(f"{op}: {name} must be a float tensor [{cout}] (one value an output "
                             f"channel), got {_describe(v)}")
        if v.device != features.device:
            raise ValueError(f"{op}: {name} is on {v.device} but data is on {features.device}")
        return v.to(torch.float32).contiguous()

    if isinstance(residual, JaggedTensor):
        residual = residual.jdata
    if residual is not None:
        if not isinstance(residual, torch.Tensor) or residual.shape != (rows, cout):
            raise ValueError(f"{op}: residual must be [{rows}, {cout}] (the target grid's rows, "
                             f"C_out), got {_describe(residual)}")
        if residual.device != features.device:
            raise ValueError(f"{op}: residual is on {residual.device} but data is on {features.device}")
        residual = residual.to(features.dtype).contiguous()
    return per_channel("scale", scale), per_channel("shift", shift), residual, bool(relu)


def _check_jagged_like(op: str, name: str, data: JaggedTensor, offsets: torch.Tensor,
                       whose: str) -> None:
    """Raises unless `data` is jagged as `offsets` (a grid's voxel_offsets): the same number
    of tensors with the same rows each. The offsets object itself passes at once (features
    made by tilegrid for that grid carry it); any other is compared on the host, as
    JaggedTensor's arithmetic compares operands, which waits for a GPU's stream. Under
    torch.compile only the number of tensors is checked (reading values would break the
    graph)."""
    j = data.joffsets
    if j is offsets:
        return
    if j.shape != offsets.shape:
        raise ValueError(f"{op}: {name} holds {j.shape[0] - 1} tensors but {whose} has "
                         f"{offsets.shape[0] - 1} grids")
    if torch.compiler.is_compiling():
        return
    got, want = j.cpu(), offsets.cpu()
    if not torch.equal(got, want):
        b = int((got != want).nonzero()[0, 0])
        raise ValueError(f"{op}: {name} is jagged as {_head(got)} but {whose}'s voxels as "
                         f"{_head(want)} (joffsets differ first at entry {b}: {int(got[b])} "
                         f"against {int(want[b])}); the features of grid b must be its rows")


def _head(offsets: torch.Tensor, n: int = 8) -> str:
    """The first n entries of a list of offsets, as text."""
    values = offsets[:n].tolist()
    return str(values) if offsets.shape[0] <= n else str(values)[:-1] + ", ...]"


def _describe(v) -> str:
    return f"{list(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__


def _unfused_epilogue(out, scale, shift, residual, relu):
    """The epilogue as differentiable torch ops, in float32 (float64 for float64 outputs) as
    the kernels compute it."""
    acc = torch.float64 if out.dtype == torch.float64 else torch.float32
    v = out.to(acc)
    if scale is not None:
        v = v * scale.to(acc)
    if shift is not None:
        v = v + shift.to(acc)
    if residual is not None:
        v = v + residual.to(acc)
    if relu:
        v = torch.relu(v)
    return v.to(out.dtype)


def _kernel_weight(weights: torch.Tensor, cout: int, cin: int, volume: int,
                   dtype: torch.dtype) -> torch.Tensor:
    """weights [C_out, C_in, taps...] as the kernels read them, [taps, C_in, C_out] in the
    features' dtype: one small copy, differentiable. Made every call: a copy kept between calls
    could not see a weight changed through .data (which no version counter records)."""
    return weights.reshape(cout, cin, volume).permute(2, 1, 0).to(dtype).contiguous()


def _check_grids(source_grid, target_grid) -> None:
    """TypeError unless source_grid is a GridBatch and target_grid one or None."""
    from .batch import GridBatch  # batch.py imports this module

    for name, grid in (("source_grid", source_grid), ("target_grid", target_grid)):
        if not isinstance(grid, GridBatch) and not (name == "target_grid" and grid is None):
            raise TypeError(f"ConvolutionPlan: {name} must be a GridBatch, got {type(grid).__name__}")


class ConvolutionPlan:
    """The maps of one convolution between two grids, reused across layers and passes.

    Build with from_grid_batch / from_grid_batch_transposed (fVDB's names and argument order);
    run with execute(data, weights).

    Args:
        kernel_size: An int or three ints (kx, ky, kz), each >= 1.
        stride: An int or three ints, each >= 1.
        source_grid: The GridBatch whose features the convolution reads.
        target_grid: The GridBatch whose features it writes, on source_grid's device.
        transposed: Whether the plan is of a transposed convolution (input i feeds output
            i * stride + t - pad through tap t) rather than a convolution (output o reads
            input o * stride + t - pad).
    """

    def __init__(self, kernel_size, stride, source_grid, target_grid, transposed: bool, *,
                 _row_orders: bool = True, _pooling: bool = False):
        """_row_orders=False leaves the GPU row orders empty (rows in order), for users of the
        maps alone (pooling), which would not read them. _pooling=True starts the taps at
        o * stride (pad 0), as pooling windows do (pooling.py)."""
        _check_grids(source_grid, target_grid)
        if source_grid.device != target_grid.device:
            raise ValueError(
                f"ConvolutionPlan: the source grid is on {source_grid.device} but the target "
                f"grid is on {target_grid.device}"
            )
        self.kernel_size = vec3("ConvolutionPlan: kernel_size", kernel_size)
        self.stride = vec3("ConvolutionPlan: stride", stride)
        self.transposed = bool(transposed)
        self.source_grid, self.target_grid = source_grid, target_grid
        # Plain values of the grids, so that execute() reads no C++ object (torch.compile
        # traces it whole).
        self.source_voxels = source_grid.total_voxels
        self.source_offsets = source_grid.voxel_offsets
        self.target_offsets = target_grid.voxel_offsets
        stream = current_stream(source_grid.device)
        args = (source_grid._impl, target_grid._impl, list(self.kernel_size), list(self.stride),
                self.transposed, stream)
        # On the GPU the map comes with its row order and its columns in that order (see
        # below) from one call, which builds the rows' tap masks (the sort's keys) with the map
        # instead of reading the map again for them.
        row_orders = _row_orders and source_grid.device.type == "cuda"
        if row_orders:
            self.kernel_map, row_order, map_in_row_order = (
                torch.from_dlpack(t) for t in _C.kernel_map_with_row_order(*args, pooling=_pooling)
            )
        else:
            self.kernel_map = torch.from_dlpack(_C.kernel_map(*args, pooling=_pooling))
        # A submanifold convolution with a centred (odd) stencil: tap t looks the opposite way
        # of tap taps - 1 - t, so its inverse map is the map with the taps reversed (a copy,
        # no scatter), and rows that share their taps in the map share them (reversed) in the
        # inverse: the map's row order serves the inverse too (one sort fewer).
        submanifold = (
            target_grid is source_grid and not self.transposed and self.stride == (1, 1, 1)
            and all(k % 2 == 1 for k in self.kernel_size)
        )
        # A 1x1x1 submanifold convolution maps every row to itself: a plain GEMM (execute).
        self.dense = submanifold and self.kernel_size == (1, 1, 1)
        # The submanifold inverse maps are copies (the taps reversed), made on first use
        # (inverse_map): inference never reads them, and a U-Net's four 3x3x3 plans spent 0.1
        # ms of an H200's time and 2 x 27 x N ints each on them.
        if submanifold:
            self._inverse_map = None
        else:
            self._inverse_map = torch.from_dlpack(
                _C.invert_kernel_map(self.kernel_map, source_grid.total_voxels, stream)
            )
        # On the GPU, the orders in which the kernels take the output rows (and the input
        # rows, for the input gradient): sorted by tap masks, so that a tile skips the taps
        # none of its rows has. The CPU reference needs none.
        # And the maps' columns in those orders, so that a tile reads its rows' entries as one
        # contiguous run a tap (two more maps' worth of memory).
        if row_orders:
            self.row_order, self.map_in_row_order = row_order, map_in_row_order
            if submanifold:
                self.inverse_row_order = self.row_order
                self._inverse_map_in_row_order = None
            else:
                self.inverse_row_order = torch.from_dlpack(
                    _C.kernel_map_row_order(self._inverse_map, stream)
                )
                self._inverse_map_in_row_order = torch.from_dlpack(
                    _C.kernel_map_in_row_order(self._inverse_map, self.inverse_row_order, stream)
                )
        else:
            self.row_order = self.inverse_row_order = self.kernel_map.new_empty(0)
            self.map_in_row_order = self.kernel_map.new_empty(0)
            self._inverse_map_in_row_order = self.kernel_map.new_empty(0)

    @property
    def inverse_map(self) -> torch.Tensor:
        """[taps, source voxels]: the target row each source row reaches through each tap, or
        -1 (the input gradient's map)."""
        if self._inverse_map is None:
            self._inverse_map = self.kernel_map.flip(0)
        return self._inverse_map

    @inverse_map.setter
    def inverse_map(self, value: torch.Tensor) -> None:
        self._inverse_map = value

    @property
    def inverse_map_in_row_order(self) -> torch.Tensor:
        """The inverse map's columns in inverse_row_order (empty where the row orders are)."""
        if self._inverse_map_in_row_order is None:
            self._inverse_map_in_row_order = self.map_in_row_order.flip(0)
        return self._inverse_map_in_row_order

    @inverse_map_in_row_order.setter
    def inverse_map_in_row_order(self, value: torch.Tensor) -> None:
        self._inverse_map_in_row_order = value

    @classmethod
    def from_grid_batch(cls, kernel_size, stride, source_grid, target_grid=None) -> "ConvolutionPlan":
        """A convolution from source_grid to target_grid (default: source_grid.conv_grid(
        kernel_size, stride), every voxel the convolution reaches). target_grid = source_grid
        with stride 1 is a submanifold convolution."""
        _check_grids(source_grid, target_grid)
        if target_grid is None:
            target_grid = source_grid.conv_grid(kernel_size, stride)
        return cls(kernel_size, stride, source_grid, target_grid, False)

    @classmethod
    def from_grid_batch_transposed(
        cls, kernel_size, stride, source_grid, target_grid=None
    ) -> "ConvolutionPlan":
        """A transposed convolution (upsampling for stride > 1) from source_grid to target_grid
        (default: source_grid.conv_transpose_grid(kernel_size, stride)). In a U-Net's decoder
        the target is the encoder's finer grid."""
        _check_grids(source_grid, target_grid)
        if target_grid is None:
            target_grid = source_grid.conv_transpose_grid(kernel_size, stride)
        return cls(kernel_size, stride, source_grid, target_grid, True)

    def transpose(self) -> "ConvolutionPlan":
        """The transposed convolution back from this plan's target grid to its source grid
        (for a stride-2 plan into a U-Net's coarser level, the decoder's way back up), built from
        this plan's maps without computing any: a transposed convolution sends input i to output
        o through tap t exactly where this one has output i read input o through t, so its map
        is this plan's inverse map and the other way round, and the row orders swap with them.
        Equal to from_grid_batch_transposed(kernel_size, stride, target_grid, source_grid) when
        this plan is a strided one (tested), at no cost."""
        out = ConvolutionPlan.__new__(ConvolutionPlan)
        out.kernel_size, out.stride = self.kernel_size, self.stride
        out.transposed = not self.transposed
        out.source_grid, out.target_grid = self.target_grid, self.source_grid
        out.source_voxels = self.target_grid.total_voxels
        out.source_offsets, out.target_offsets = self.target_offsets, self.source_offsets
        out.kernel_map, out._inverse_map = self.inverse_map, self.kernel_map
        out.dense = self.dense
        out.row_order, out.inverse_row_order = self.inverse_row_order, self.row_order
        out.map_in_row_order = self.inverse_map_in_row_order
        out._inverse_map_in_row_order = self.map_in_row_order
        return out

    @property
    def kernel_volume(self) -> int:
        k = self.kernel_size
        return k[0] * k[1] * k[2]

    def valid_usage(self, in_channels: int, out_channels: int, kernel_size, stride, transposed: bool) -> bool:
        """Whether a module with these settings may run on this plan (channels are free)."""
        return (
            vec3("kernel_size", kernel_size) == self.kernel_size
            and vec3("stride", stride) == self.stride
            and bool(transposed) == self.transposed
        )

    def execute(
        self, data: Union[JaggedTensor, torch.Tensor], weights: torch.Tensor, *,
        scale: Optional[torch.Tensor] = None, shift: Optional[torch.Tensor] = None,
        residual: Union[JaggedTensor, torch.Tensor, None] = None, relu: bool = False,
    ) -> Union[JaggedTensor, torch.Tensor]:
        """The convolution of `data` (the source grid's features, [N_in, C_in], a tensor or a
        JaggedTensor) with `weights` ([C_out, C_in, kx, ky, kz], or [C_out, C_in] for a 1x1x1
        kernel; cast to the features' dtype). Returns the target grid's features [N_out,
        C_out], as a JaggedTensor if data was one. Differentiable in data and weights.
        float32 on a GPU of compute capability 8.0 or newer multiplies as TF32 on tensor cores
        (channels a multiple of 8) while torch.backends.cudnn.allow_tf32 is set, as torch's
        own convolutions do (its default); set it to False for exact float32 products.

        scale, shift ([C_out]), residual ([N_out, C_out], the target grid's rows) and relu:
        an epilogue, out = relu?(conv * scale + shift + residual), e.g. an eval-mode BatchNorm
        folded into scale and shift and a residual block's skip input. Without autograd it
        runs inside the convolution kernels (in float32 on the sums, before they are rounded
        to the features' dtype; a separate pass after the portable kernels); where a gradient
        is wanted it is computed after the convolution by differentiable torch ops."""
        features = data.jdata if isinstance(data, JaggedTensor) else data
        for name, t in (("data", features), ("weights", weights)):
            if not isinstance(t, torch.Tensor):
                kinds = "a torch.Tensor or JaggedTensor" if name == "data" else "a torch.Tensor"
                raise TypeError(
                    f"ConvolutionPlan.execute: {name} must be {kinds}, got {type(t).__name__}"
                )
        if features.dim() != 2:
            raise ValueError(
                f"ConvolutionPlan.execute: data must be [N, C] features, got {list(features.shape)}"
            )
        if features.shape[0] != self.source_voxels:
            raise ValueError(
                f"ConvolutionPlan.execute: data must have one row per source voxel "
                f"({self.source_voxels}), got {features.shape[0]}"
            )
        if isinstance(data, JaggedTensor):
            _check_jagged_like("ConvolutionPlan.execute", "data", data, self.source_offsets,
                               "the source grid")
        if isinstance(residual, JaggedTensor):
            _check_jagged_like("ConvolutionPlan.execute", "residual", residual,
                               self.target_offsets, "the target grid")
        if features.device != self.kernel_map.device:
            raise ValueError(
                f"ConvolutionPlan.execute: data is on {features.device} but the plan's grids "
                f"are on {self.kernel_map.device}"
            )
        if features.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise TypeError(
                f"ConvolutionPlan.execute: data must be float16, bfloat16, float32 or float64, "
                f"got {features.dtype}"
            )
        cout, cin = (weights.shape[0], weights.shape[1]) if weights.dim() >= 2 else (None, None)
        expected = [cout, features.shape[1], *self.kernel_size]
        shape_ok = weights.dim() == 5 and list(weights.shape[1:]) == expected[1:]
        if self.kernel_volume == 1 and weights.dim() == 2:
            shape_ok = cin == features.shape[1]
        if not shape_ok:
            raise ValueError(
                f"ConvolutionPlan.execute: weights must be [C_out, {features.shape[1]}, "
                f"{', '.join(map(str, self.kernel_size))}] for {features.shape[1]} input channels, "
                f"got {list(weights.shape)}"
            )
        if weights.device != features.device:
            raise ValueError(
                f"ConvolutionPlan.execute: weights are on {weights.device} but data is on "
                f"{features.device}"
            )
        # Inference (no gradient wanted, not traced) skips what only autograd needs: the
        # custom op's dispatch. A U-Net's inference is bound by such per-layer host costs on
        # a GPU.
        epilogue = _epilogue_args(scale, shift, residual, relu, features, cout,
                                  self.kernel_map.shape[1])
        inputs = (features, weights, *(epilogue[:3] if epilogue else ()))
        inference = not torch.compiler.is_compiling() and not (
            torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs))
        w = _kernel_weight(weights, cout, cin, self.kernel_volume, features.dtype)
        fused = None
        if self.dense and features.dtype in (torch.float16, torch.bfloat16) and cin % 8 == 0 \
                and cout % 8 == 0 and features.shape[0] > 0:
            # tg.matmul's GEMM (cuBLAS-class on Hopper), differentiable in both operands.
            out = matmul(features.contiguous(), w[0])
        else:
            features = features.contiguous()
            if features.is_cuda and features.dtype in (torch.float16, torch.bfloat16) and cin % 8:
                # A network's first layer (1-4 input channels): zero channels up to a multiple
                # of 8, which the tensor-core kernels need. They add nothing to the result, and
                # the padded weight's gradient is the weight's plus zero rows, sliced off by
                # autograd. (The portable kernel took 0.85 ms for a U-Net's 1 -> 32 stem at 485k
                # voxels on an H200, 15% of the whole network's time.)
                pad = 8 - cin % 8
                features = torch.nn.functional.pad(features, (0, pad))
                w = torch.nn.functional.pad(w, (0, 0, 0, pad))
            # float32 multiplies as TF32 on tensor cores where torch lets its own convolutions
            # (torch.backends.cudnn.allow_tf32, True by default), exactly otherwise.
            allow_tf32 = bool(torch.backends.cudnn.allow_tf32)
            if inference:
                fused = epilogue
                out = _forward(features, w, self.kernel_map, self.row_order, self.map_in_row_order,
                               allow_tf32, *(epilogue or (None, None, None, False)))
            else:
                # The inverse maps are read by the input gradient alone: none is made for a
                # call that will not need one (a first layer's features).
                if torch.is_grad_enabled() and features.requires_grad:
                    inverse = (self.inverse_map, self.inverse_row_order, self.inverse_map_in_row_order)
                else:
                    inverse = (self.kernel_map.new_empty(0),) * 3
                out = sparse_conv(
                    features, w, self.kernel_map, inverse[0], self.row_order, inverse[1],
                    self.map_in_row_order, inverse[2], allow_tf32,
                )
        if epilogue is not None and fused is None:
            out = _unfused_epilogue(out, *epilogue)
        if isinstance(data, JaggedTensor):
            return JaggedTensor._from_trusted(out, self.target_offsets)
        return out

    def __repr__(self) -> str:
        kind = "transposed " if self.transposed else ""
        return (
            f"ConvolutionPlan({kind}kernel_size={self.kernel_size}, stride={self.stride}, "
            f"{self.source_grid.total_voxels} -> {self.target_grid.total_voxels} voxels, "
            f"device={self.kernel_map.device})"
        )
