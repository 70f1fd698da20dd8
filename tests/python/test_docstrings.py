"""Every public name of tilegrid, tilegrid.nn and tilegrid.distributed (their __all__) has a
docstring, and the docstring of a function or class names every argument of its signature:
the API reference (docs/api, scripts/build_docs.sh) is built from these docstrings.

A class's arguments are those of its __init__ (its own or inherited, e.g. torch.nn.LayerNorm's),
described in the class's own docstring. self, *args, **kwargs and names that start with an
underscore (private arguments) are not asked for. A module-level value is documented by the
"#:" comment above its assignment, which autodoc reads.
"""

from __future__ import annotations

import inspect
import re

import pytest

import tilegrid
import tilegrid.distributed
import tilegrid.nn

MODULES = (tilegrid, tilegrid.nn, tilegrid.distributed)
PUBLIC = [(module, name) for module in MODULES for name in module.__all__]
IDS = [f"{module.__name__}.{name}" for module, name in PUBLIC]


def attribute_comment(module, name: str) -> str | None:
    """The "#:" comment lines right above `name = ...` (or `name: type = ...`) in module's
    source, joined; None where there are none."""
    lines = inspect.getsource(module).splitlines()
    assignment = re.compile(rf"^{re.escape(name)}\s*(:[^=]*)?=")
    for i, line in enumerate(lines):
        if assignment.match(line):
            comment = []
            while i > 0 and lines[i - 1].lstrip().startswith("#:"):
                i -= 1
                comment.insert(0, lines[i].lstrip()[2:].strip())
            return " ".join(comment) or None
    return None


def docstring(module, name: str) -> str | None:
    obj = getattr(module, name)
    if inspect.isclass(obj):
        return obj.__dict__.get("__doc__")  # its own, not a base class's
    if inspect.ismodule(obj) or callable(obj):
        return obj.__doc__
    return attribute_comment(module, name)


def arguments(obj) -> list[str]:
    """The arguments a caller names: a function's, or a class's constructor's."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    skipped = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [
        p.name for p in inspect.signature(target).parameters.values()
        if p.name != "self" and not p.name.startswith("_") and p.kind not in skipped
    ]


@pytest.mark.parametrize("module, name", PUBLIC, ids=IDS)
def test_public_name_has_a_docstring(module, name):
    doc = docstring(module, name)
    assert doc is not None and doc.strip(), f"{module.__name__}.{name} has no docstring"


@pytest.mark.parametrize("module, name", PUBLIC, ids=IDS)
def test_docstring_names_every_argument(module, name):
    obj = getattr(module, name)
    if inspect.ismodule(obj) or not callable(obj):
        return
    doc = docstring(module, name) or ""
    # As a word of its own, not part of a longer name or an attribute (".dtype").
    missing = [a for a in arguments(obj) if not re.search(rf"(?<![\w.]){re.escape(a)}(?!\w)", doc)]
    assert not missing, f"{module.__name__}.{name}'s docstring does not name {missing}"
