"""The kernel choice from Python (tilegrid.kernel_choice over tilegrid/core/kernel_choice.h):
each family's values, the override and its restoration, the environment variables read once
in a fresh process, bad values as ValueError, the Hopper predicate without a GPU, and the
Python predicates as constants under torch.compile. Runs on the CPU."""

import os
import subprocess
import sys

import pytest
import torch

from tilegrid import _C, kernel_choice
from tilegrid import flash_attn as fa
from tilegrid.nn import llama

VALUES = {
    "attention": ("auto", "sm90", "portable"),
    "attention_backward": ("auto", "portable", "simt"),
    "gemm": ("auto", "sm90", "portable"),
    "sparse_conv": ("auto", "mma", "simt"),
}
VARIABLES = ("TILEGRID_ATTENTION_KERNEL", "TILEGRID_ATTENTION_BACKWARD",
             "TILEGRID_SPARSE_CONV_KERNEL")


def test_every_family_takes_its_values_and_gives_back_the_previous_request():
    assert set(kernel_choice.FAMILIES) == set(VALUES)
    for family, values in VALUES.items():
        before = kernel_choice.requested_kernel(family)
        assert before in values
        for value in values:
            with kernel_choice.override(family, value):
                assert kernel_choice.requested_kernel(family) == value
            assert kernel_choice.requested_kernel(family) == before


def test_bad_values_and_families_are_value_errors_that_list_the_choices():
    with pytest.raises(ValueError, match=r"set_kernel_choice: sparse_conv must be auto, mma or "
                                         r"simt, got 'sm90'"):
        kernel_choice.set_kernel_choice("sparse_conv", "sm90")
    with pytest.raises(ValueError, match="attention_backward must be auto, portable or simt"):
        kernel_choice.set_kernel_choice("attention_backward", "sm90")
    with pytest.raises(ValueError, match="kernel family must be attention, attention_backward, "
                                         "gemm or sparse_conv, got 'conv'"):
        kernel_choice.requested_kernel("conv")
    with pytest.raises(ValueError, match="kernel family must be"):
        kernel_choice.hopper_kernels_run_on("conv", 0)
    assert kernel_choice.requested_kernel("sparse_conv") in VALUES["sparse_conv"]


# Prints each family's request, changes the variables, prints them again (read once: the same
# answers), then the request of a family whose variable is bad at its first request.
ENVIRONMENT_SCRIPT = """
import os
from tilegrid import kernel_choice
families = ("attention", "attention_backward", "gemm")
print(*(kernel_choice.requested_kernel(f) for f in families))
os.environ["TILEGRID_ATTENTION_KERNEL"] = "sm90"
os.environ["TILEGRID_ATTENTION_BACKWARD"] = "auto"
print(*(kernel_choice.requested_kernel(f) for f in families))
for attempt in range(2):
    try:
        kernel_choice.requested_kernel("sparse_conv")
    except ValueError as e:
        print(e)
kernel_choice.set_kernel_choice("sparse_conv", "simt")
print(kernel_choice.requested_kernel("sparse_conv"))
"""


def test_the_environment_is_read_once_and_a_bad_value_raises_until_overridden():
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(TILEGRID_ATTENTION_KERNEL="portable", TILEGRID_ATTENTION_BACKWARD="simt",
               TILEGRID_SPARSE_CONV_KERNEL="wmma")
    run = subprocess.run([sys.executable, "-c", ENVIRONMENT_SCRIPT], env=env, check=True,
                         capture_output=True, text=True, timeout=300)
    bad = "TILEGRID_SPARSE_CONV_KERNEL must be auto, mma or simt, got 'wmma'"
    assert run.stdout.splitlines() == ["portable simt auto", "portable simt auto", bad, bad,
                                       "simt"]


def test_no_device_runs_hopper_kernels_without_a_gpu():
    for family in VALUES:
        assert not _C._hopper_kernels_run_on(family, -1)
        if not torch.cuda.is_available():
            assert not kernel_choice.hopper_kernels_run_on(family, 0)


def test_attention_head_dims_and_fused_programs_ask_the_cpp_side():
    assert _C._attention_kernel_head_dims("cpu", 0) == [64, 96, 128, 192, 256]
    hopper = kernel_choice.hopper_kernels_run_on("attention", 0)
    assert fa._kernel_head_dims("cuda", 0) == ((64, 128, 256) if hopper else
                                               (64, 96, 128, 192, 256))
    for dtype, expected in ((torch.bfloat16, True), (torch.float16, True),
                            (torch.float32, False)):
        assert llama._fused_programs_run_on(torch.empty(2, 8, dtype=dtype)) == expected


def test_the_predicates_are_constants_under_torch_compile():
    """fullgraph=True fails on a graph break: the C++ answers are taken at trace time."""

    def f(x):
        dims = fa._kernel_head_dims("cuda", 0)
        return x * len(dims) + (1 if kernel_choice.hopper_kernels_run_on("gemm", 0) else 2)

    x = torch.ones(3)
    torch.testing.assert_close(torch.compile(f, backend="eager", fullgraph=True)(x), f(x))
