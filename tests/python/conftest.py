import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA GPU on this machine")

# Parametrise a test over this list to run it on the CPU always and on the GPU where there is
# one; on a machine without a GPU the CUDA cases are reported as skipped.
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_cuda])]


@pytest.fixture(autouse=True)
def fresh_random_inputs():
    """Each test draws fresh random inputs. The seed goes to the captured output, which pytest
    shows for a failing test, so the failure can be replayed with torch.manual_seed(seed)."""
    seed = torch.seed()
    print(f"torch seed: {seed}")
    yield seed


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill an output with NaN so that an element a kernel forgot to write fails the check."""
    return t.fill_(float("nan"))
