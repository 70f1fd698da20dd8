"""The version is written once and the build report tells the truth about the build."""

import re

import tilegrid as tg
from tilegrid import _C
from tilegrid.info import build_info, report


def test_python_and_cpp_versions_are_the_one_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", tg.__version__)
    assert build_info()["version"] == tg.__version__


def test_build_info_agrees_with_the_compiled_module():
    info = build_info()
    assert info["with_cuda"] == _C.with_cuda == tg.with_cuda
    assert info["host_compiler"]
    if info["with_cuda"]:
        assert info["cuda_compiler"] and info["cuda_architectures"]
        assert any("portable CUDA" in k for k in info["kernels"])
    else:
        assert info["kernels"] == [] and info["cuda_compiler"] == ""


def test_report_names_the_version_torch_and_the_kernels():
    text = report()
    assert f"tilegrid {tg.__version__}" in text
    assert "torch" in text and "kernels:" in text and "GPU" in text
