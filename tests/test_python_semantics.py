"""Regression tests for Python semantics under bytegraph (issue 12).

Each test runs a program eagerly and compiled with ``force_transform`` (so
pure-Python frames are transformed too) and compares what a user can see:
results, printed output, state of mutated objects, exception types, and
whether the frame was really transformed rather than run eagerly.
"""

import enum
import io
import sys
import types

import pytest
import torch

import bytegraph
from bytegraph import config
from bytegraph.diagnostics import STATS


def run_both(fn, *args, **kwargs):
    """(eager outcome, compiled outcome, eager fallbacks) for ``fn(*args)``.

    An outcome is ``("ok", value)`` or ``("raise", exception type, str)``."""
    def outcome(f):
        try:
            return ("ok", f(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - the exception is the result
            return ("raise", type(e), str(e))

    eager = outcome(fn)
    bytegraph.reset()
    saved = config.force_transform
    config.force_transform = True
    before = STATS.eager_fallbacks, STATS.frames_compiled
    try:
        compiled = outcome(bytegraph.compile(fn, backend="eager"))
    finally:
        config.force_transform = saved
    return eager, compiled, STATS.eager_fallbacks - before[0], STATS.frames_compiled - before[1]


def assert_same_clean(fn, *args, **kwargs):
    """Compiled equals eager, and no frame ran eagerly."""
    eager, compiled, fallbacks, frames = run_both(fn, *args, **kwargs)
    assert compiled == eager
    assert fallbacks == 0 and frames > 0
    return compiled


# ---------------------------------------------------------------------------
# dicts keyed by classes, functions and enum members (unittest's
# _type_equality_funcs, dispatch tables)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def _double(v):
    return v * 2


TABLE = {int: "int", list: "list", _double: "double", Color.RED: "red"}


def test_dict_with_class_function_and_enum_keys_is_traced():
    def f(v):
        out = [TABLE.get(type(v)), TABLE[_double], TABLE.get(Color.RED), TABLE.get(Color.BLUE, "none")]
        return out, list(TABLE)[:2], _double in TABLE, str in TABLE

    assert_same_clean(f, 3)
    assert_same_clean(f, [1])


def test_dict_with_class_keys_guards_the_keys():
    table = {int: 1}

    def f():
        return table.get(float, "missing")

    compiled = bytegraph.compile(f, backend="eager")
    config.force_transform = True
    try:
        assert compiled() == "missing"
        table[float] = 2
        assert compiled() == 2
        del table[int]
        assert compiled() == 2
    finally:
        config.force_transform = False
