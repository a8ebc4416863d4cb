"""Code that looks at frames, compiled: what it sees equals eager.

After a graph break the rest of a frame runs in a resume function: another
frame, called from the transformed one.  A frame object taken before the
break then stops following the code (``f_lineno``; from 3.13 ``f_locals`` is
a live view that can also write), and a walk up the stack from the
continuation meets one frame more.  Such frames are not split
(``break_plan._refuse_splitting_a_frame_walker``, kind ``frame_walking``):
they run eagerly.  A function that reads its caller's locals
(``sys._getframe(1).f_locals``) and is called at a break finds every local
the caller bound, live or not (``frame_blind.reads_caller_locals``).

Each case runs eagerly and compiled (``raise_on_error``, conftest) and compares what
the code returned; each failed before the fix, on the versions noted.
"""

from __future__ import annotations

import inspect
import io
import sys
import traceback

import pytest
import torch

import bytegraph
from bytegraph.break_plan import FRAME_WALKING


def quiet():
    print("", end="", file=io.StringIO())   # a graph break (print is not captured)


def caller_name():
    return sys._getframe(2).f_code.co_name


def who_called():
    f = sys._getframe(1)
    return f.f_code.co_name, f.f_locals.get("a"), sorted(n for n in f.f_locals if not n.startswith("___"))


def own_frame_break():
    sys._getframe(0)     # takes its own frame and drops it: still split at the break
    return 1


# --- frame objects kept across a break -----------------------------------------------------

def kept_frame_then_read(x):        # 3.13: None instead of 2 (f_locals is a live view)
    fr = sys._getframe()
    a = 1
    x = x + 1
    a = 2
    return x, fr.f_locals.get("a"), fr.f_code.co_name


def line_numbers_of_a_kept_frame(x):     # all versions: 0 instead of 2
    fr = inspect.currentframe()
    x = x + 1
    n1 = fr.f_lineno
    x = x * 2
    n2 = fr.f_lineno
    return x, n2 - n1


def locals_of_the_frame_copied(x):       # 3.13: bytegraph's temporaries were among them
    a = 1
    names = dict(sys._getframe().f_locals)
    a = 2
    return x + a, sorted(names)


def write_through_f_locals(x):           # 3.13: the write was lost
    a = 1
    fr = sys._getframe()
    try:
        fr.f_locals["a"] = 5
    except Exception:
        pass
    return x + a, a


# --- walking up from after a break --------------------------------------------------------

def caller_after_a_break(x):             # all versions: 'f' instead of the caller
    y = x + 1
    quiet()
    return y, sys._getframe(1).f_code.co_name


def caller_after_two_breaks(x):
    y = x + 1
    quiet()
    y = y * 2
    quiet()
    return y, inspect.currentframe().f_back.f_code.co_name, inspect.stack()[1].function


def stack_depth_after_a_break(x):        # all versions: one frame more
    y = x + 1
    quiet()
    n, fr = 0, sys._getframe()
    while fr is not None:
        n += 1
        fr = fr.f_back
    return y, n


def helper_walks_after_a_break(x):       # all versions: 'f' instead of the caller
    y = x + 1
    quiet()
    return y, caller_name()


# --- a callee reading its caller's locals at the break -------------------------------------

def callee_reads_a_dead_local(x):        # all versions: None instead of 7 (a dead local was not stored)
    a = 7
    r = who_called()
    a = 8
    return x + 1, r


# --- the frames an exception passed through ---------------------------------------------

def boom():
    raise ValueError("b")


def traceback_entries(x):                # all versions: 4 entries instead of 2
    try:
        boom()
    except ValueError as e:
        tb, names = e.__traceback__, []
        while tb is not None:
            names.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        return x + 1, names


def traceback_entries_after_a_break(x):  # all versions: 4 instead of 2
    y = x + 1
    quiet()
    try:
        boom()
    except ValueError:
        return y, traceback.format_exc().count("File ")


CASES = [traceback_entries, traceback_entries_after_a_break, kept_frame_then_read, line_numbers_of_a_kept_frame, locals_of_the_frame_copied, write_through_f_locals,
         caller_after_a_break, caller_after_two_breaks, stack_depth_after_a_break, helper_walks_after_a_break,
         callee_reads_a_dead_local]


def _normal(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", v.tolist())
    if isinstance(v, tuple):
        return tuple(_normal(e) for e in v)
    return v


def run_from_a_caller(fn):
    """``fn`` called from a function of its own (the caller frame it may look at)."""
    def the_caller():
        return fn(torch.ones(2))
    return _normal(the_caller())


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_what_frame_inspection_sees_equals_eager(fn):
    expected = run_from_a_caller(fn)
    compiled = bytegraph.compile(fn, backend="eager")
    for _ in range(2):
        assert run_from_a_caller(compiled) == expected


@pytest.mark.parametrize("fn", [kept_frame_then_read, line_numbers_of_a_kept_frame, caller_after_a_break,
                                helper_walks_after_a_break], ids=lambda f: f.__name__)
def test_a_frame_walker_is_not_split_and_says_why(fn):
    report = bytegraph.explain(fn)(torch.ones(2))
    assert FRAME_WALKING in [r.kind for r in report.break_reasons]


def test_a_caller_reading_callee_is_still_split():
    # the callee's whole call runs natively at the break; the caller continues compiled
    compiled = bytegraph.compile(callee_reads_a_dead_local, backend="eager")
    compiled(torch.ones(2))
    stats = bytegraph.stats()
    assert stats.eager_fallbacks == 0 and stats.graph_breaks >= 1 and stats.frames_transformed >= 1


def test_a_frame_dropping_its_own_frame_object_is_still_split():
    def f(x):
        y = x + 1
        own_frame_break()
        return y * 2, own_frame_break()
    assert run_from_a_caller(bytegraph.compile(f, backend="eager")) == run_from_a_caller(f)
    stats = bytegraph.stats()
    assert stats.eager_fallbacks == 0 and stats.graph_breaks >= 1
