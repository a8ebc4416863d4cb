"""Compiles defer CPython's automatic full garbage collections.

A full collection walks every tracked object of the process.  With torch
and a model zoo loaded that is a few hundred thousand objects, about 0.17 s,
and it starts once enough young objects have survived into the oldest
generation -- which the graphs, guards and code objects of a compile are.
So the collection tends to land inside the first call, where it frees
nothing of the compile's (those objects are alive) and makes the user wait.

While the outermost compile runs, the oldest generation's threshold is
raised so that only young collections run (young cyclic garbage is still
freed).  When it ends the program's own threshold comes back, and the
full collection runs at its usual place in the program.  Nothing is
skipped: CPython keeps counting, so the deferred collection is due as soon
as the next young ones run.

Young collections run at least as seldom as CPython's default makes them
(every 700 net allocations) while compiling: a program that asked for one per
allocation (``gc.set_threshold(1)``, a stress test) would otherwise have the
compiler's own allocations run thousands of collections, and its
``gc.callbacks`` with them, for garbage that is the compiler's.

A program that turned the collector off, or set its own thresholds while
we compiled, keeps its setting.

Example::

    >>> import gc
    >>> from bytegraph import gc_defer
    >>> before = gc.get_threshold()
    >>> with gc_defer.full_collections_deferred():
    ...     gc.get_threshold()[2] > before[2]
    True
    >>> gc.get_threshold() == before
    True
"""

from __future__ import annotations

import gc

from . import config

#: the oldest generation's threshold while compiling: never reached
_DEFERRED = 1 << 30

#: the youngest generation's threshold while compiling, at least (CPython's default)
_YOUNG = 700


class full_collections_deferred:
    """Context manager: no automatic full collection until the outermost exits.

    Re-entrant (a backend may call compiled code that compiles): only the
    outermost entry saves and restores the thresholds.
    """

    _depth = 0
    _saved = None       # the program's thresholds, when this module replaced them
    _installed = None   # what this module set, to see if the program changed it since

    __slots__ = ()

    def __enter__(self) -> None:
        cls = full_collections_deferred
        cls._depth += 1
        if cls._depth == 1 and config.defer_full_gc and gc.isenabled():
            saved = gc.get_threshold()
            if saved[0] and saved[2] < _DEFERRED:
                cls._saved = saved
                cls._installed = (max(saved[0], _YOUNG), saved[1], _DEFERRED)
                gc.set_threshold(*cls._installed)

    def __exit__(self, *exc) -> None:
        cls = full_collections_deferred
        cls._depth -= 1
        if cls._depth == 0 and cls._saved is not None:
            saved, installed = cls._saved, cls._installed
            cls._saved = cls._installed = None
            if gc.get_threshold() == installed:
                gc.set_threshold(*saved)
