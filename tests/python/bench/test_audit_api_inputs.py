"""bench/audit_api_inputs.py on the CPU (about ten seconds): every case runs in its own process
and ends as a clear error or a correct result, as the committed report has them; and the
classification tells a crash, a hang and a silently wrong result apart."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import audit_api_inputs as audit  # noqa: E402


def test_every_case_ends_as_a_clear_error_or_a_correct_result(tmp_path):
    """The whole audit (343 cases, ~10 s): an API change that makes a case stale (a refusal
    that became a feature) or a bad input answered unclearly fails here, not in the next
    report."""
    out = tmp_path / "audit.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "audit_api_inputs.py"), "--out", str(out)],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    report = json.loads(out.read_text())
    assert set(report["per_area"]) == set(audit.AREAS)
    bad = [c for c in report["cases"] if c["outcome"] not in ("clear_error", "correct")]
    assert not bad, bad
    assert report["total"]["inputs"] == len(report["cases"]) > 300


@pytest.mark.parametrize("call,outcome", [
    (lambda: os.kill(os.getpid(), 11), "crash"),
    (lambda: __import__("time").sleep(60), "hang"),
    (lambda: bytearray(8 * 2**30), "hang"),
])
def test_a_crash_a_hang_and_runaway_memory_are_told_apart(call, outcome):
    case = audit.Case("test", "fault", call, raises=(ValueError,), names=("x",))
    assert audit.run(case, timeout=1.0, memory_gb=1.0)["outcome"] == outcome


def test_a_bad_input_that_returns_is_silently_wrong_and_a_signature_dump_is_unclear():
    returns = audit.Case("test", "returns", lambda: 1, raises=(ValueError,), names=())
    assert audit.run(returns, 10.0, 1.0)["outcome"] == "silently_wrong"

    def dump():
        raise TypeError("f(): incompatible function arguments. The following argument types are supported: x: int")
    assert audit.run(audit.Case("test", "dump", dump, raises=(TypeError,), names=("x",)), 10.0, 1.0)["outcome"] \
        == "unclear_error"
