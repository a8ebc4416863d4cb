"""The one cell kind (DESIGN.md §4, C1).

Every closure cell the tracer meets is a :class:`CellValue`, however it
arrived:

(a) the root frame's own cell variables (made by its ``MAKE_CELL`` prologue);
(b) the root frame's free variables (pre-existing cells from ``__closure__``);
(c) cells in the closure of a pre-existing function being inlined;
(d) cells created while tracing (an inlined or nested frame's cell variables).

A pre-existing cell is registered in the side-effect table by the identity of
the real cell, so a cell reachable two ways is one value and a write through
one path is seen through the other.  Contents are read lazily through a
source that dereferences the cell (C3) and written as buffered side effects
(C5): codegen writes back only the final contents, once.
"""

from __future__ import annotations

import types
from typing import Optional

from ..errors import Unsupported
from ..sources import CellContentsSource, RootCellSource, Source
from .base import Value


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


#: The cell holds nothing (``del x``, or never assigned).
EMPTY = _Marker("EMPTY")
#: A pre-existing cell whose contents have not been read yet.
UNREAD = _Marker("UNREAD")


def _immutable(obj) -> bool:
    """A constant all the way down (so a copy of it is as good as it)."""
    if type(obj) in (int, float, complex, bool, str, bytes, type(None)):
        return True
    if type(obj) in (tuple, frozenset):
        return all(_immutable(x) for x in obj)
    return False


class CellValue(Value):
    """A Python cell object (``types.CellType``).

    ``source`` locates a pre-existing cell (``RootCellSource`` for the root's
    own cells, a ``__closure__[i]`` path for others); it is ``None`` for cells
    created during tracing.  ``name`` is the variable name the cell holds (for
    error messages).  ``contents`` is a value, ``EMPTY`` or ``UNREAD``.

    Reconstruction: a root cell is pushed with ``LOAD_CLOSURE name``; another
    pre-existing cell through its source; a cell created during tracing as a
    fresh ``types.CellType(final contents)``.
    """

    __slots__ = ("contents", "real_cell", "name")

    def __init__(self, name: str, source: Optional[Source] = None, contents=EMPTY, real_cell=None):
        super().__init__(source)
        self.name = name
        self.contents = contents
        self.real_cell = real_cell

    def python_type(self):
        return types.CellType

    @property
    def is_root_cell(self) -> bool:
        return isinstance(self.source, RootCellSource)

    @property
    def is_new(self) -> bool:
        """Created during tracing (has no real counterpart yet)."""
        return self.source is None and self.real_cell is None

    def read(self, tx) -> Value:
        """``LOAD_DEREF``: the contents, loading a pre-existing cell's contents lazily."""
        if self.contents is UNREAD:
            try:
                obj = self.real_cell.cell_contents
            except ValueError:
                self._guard_emptiness(tx, True)
                self.contents = EMPTY
            else:
                self._guard_emptiness(tx, False)
                if self.source is None:
                    # a pre-existing cell the trace cannot locate (a closure of a
                    # function read without a source): only a value that needs
                    # no source (immutable, rebuilt from constants) is usable
                    if not _immutable(obj):
                        raise Unsupported(f"free variable '{self.name}' of a function the trace cannot locate",
                                          kind="unsupported_closure")
                    self.contents = tx.wrap(obj, None)
                else:
                    self.contents = tx.wrap(obj, CellContentsSource(self.source))
        if self.contents is EMPTY:
            tx.raise_python_exception(NameError(
                f"cannot access free variable '{self.name}' where it is not associated with a value"
                " in enclosing scope"))
        return self.contents

    def _guard_emptiness(self, tx, empty: bool) -> None:
        """The trace took the cell's being empty or bound for granted (a
        ``NameError`` raised or not, contents read through their source):
        guard it.  (A root frame's own cell variable needs none: it is
        empty when the frame starts.)"""
        src = self.source
        if src is None or (isinstance(src, RootCellSource) and src.closure_index is None):
            return
        from ..guards import Guard
        tx.guards.add(Guard("CELL_EMPTY", src, empty))

    def _check_locatable(self) -> None:
        if self.source is None and self.real_cell is not None:
            raise Unsupported(f"writing free variable '{self.name}' of a function the trace cannot locate",
                              kind="unsupported_closure")

    def write(self, tx, value: Value) -> None:
        """``STORE_DEREF``: buffered; the final contents are written back after the graph."""
        self._check_locatable()
        tx.side_effects.mutate(self)
        self.contents = value

    def delete(self, tx) -> None:
        """``DELETE_DEREF``: empty the cell (``NameError`` if already empty)."""
        self._check_locatable()
        if self.contents is UNREAD:
            self.read(tx)
        if self.contents is EMPTY:
            tx.raise_python_exception(NameError(
                f"cannot access free variable '{self.name}' where it is not associated with a value"
                " in enclosing scope"))
        tx.side_effects.mutate(self)
        self.contents = EMPTY

    def get_attr(self, tx, name):
        if name == "cell_contents":
            return self.read(tx)
        return super().get_attr(tx, name)

    def set_attr(self, tx, name, value):
        if name == "cell_contents":
            return self.write(tx, value)
        return super().set_attr(tx, name, value)

    def children(self):
        c = self.contents
        return (c,) if isinstance(c, Value) else ()

    def reconstruct(self, cg):
        if self.source is not None:
            self.source.emit_load(cg)
            return
        if self.real_cell is not None:
            # a pre-existing cell with no source: the very cell (a new one would
            # lose its identity and, unread, its contents)
            cg.load_object(self.real_cell)
            return
        cg.push_callable(types.CellType)
        if isinstance(self.contents, Value) and cg.is_shared(self):
            # the contents may reach this cell again (a recursive nested
            # function's own cell): make it empty, hold it, then fill it
            cg.call(0)
            cg.fill_cell(cg.hold(self), self.contents)
        elif isinstance(self.contents, Value):
            cg.reconstruct(self.contents)
            cg.call(1)
        else:
            cg.call(0)

    def emit_writeback(self, cg) -> None:
        """Write the final contents into the real (pre-existing) cell (C4, C5)."""
        # Emptying: the real cell may be empty already (bound and deleted in
        # the trace, whose store was never replayed; emptied by a callee's
        # ``nonlocal`` del; an ``except ... as e`` name a closure captured), and
        # deleting an empty cell raises.  A store first makes the delete safe.
        if self.is_root_cell:
            if self.contents is EMPTY:
                cg.emit("LOAD_CONST", None)
                cg.emit("STORE_DEREF", self.source.cell_name)
                cg.emit("DELETE_DEREF", self.source.cell_name)
            else:
                cg.reconstruct(self.contents)
                cg.emit("STORE_DEREF", self.source.cell_name)
            return
        if self.contents is EMPTY:
            cg.emit("LOAD_CONST", None)
            cg.load_target(self)
            cg.emit("STORE_ATTR", "cell_contents")
            cg.load_target(self)
            cg.emit("DELETE_ATTR", "cell_contents")
        else:
            cg.reconstruct(self.contents)
            cg.load_target(self)
            cg.emit("STORE_ATTR", "cell_contents")

    def __repr__(self):
        kind = "root" if self.is_root_cell else ("new" if self.is_new else "pre-existing")
        return f"CellValue({self.name}, {kind})"
