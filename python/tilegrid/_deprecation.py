"""Old spellings kept working while users move to fVDB's: each use warns with a
DeprecationWarning that names the spelling to use instead."""

from __future__ import annotations

import functools
import warnings


def warn(message: str, stacklevel: int = 3) -> None:
    """A DeprecationWarning pointing at the caller's caller (stacklevel 3: the user's line
    when called from the deprecated function itself)."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def renamed_arguments(op: str, **renames: str):
    """A decorator: keyword arguments named by an old name (a key of `renames`) are passed under
    the new name (its value), with one DeprecationWarning a call that names them all; an old
    and a new name of one argument at once is a TypeError."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            used = [(old, new) for old, new in renames.items() if old in kwargs]
            for old, new in used:
                if new in kwargs:
                    raise TypeError(f"{op}: got both {old}= and {new}= ({old} is the old "
                                    f"name of {new})")
                kwargs[new] = kwargs.pop(old)
            if used:
                names = ", ".join(f"{old}= is now {new}=" for old, new in used)
                warn(f"{op}: the argument {names} (fVDB's names)")
            return fn(*args, **kwargs)

        return wrapper

    return decorate
