"""Where a value came from.

A source names a path from the frame's inputs to an object: an argument, a
global, a closure cell of the compiled function, an attribute or item of
another source.  Each source can

* ``guard_expr(base_expr, bind)`` -- give the Python expression the generated guard
  function uses to reach the object (the guard function has the compiled
  function's own parameters, ``___G`` bound to its globals, ``___B`` to builtins
  and ``___cells`` to its closure tuple);
* ``emit_load(cg)`` -- emit the bytecode that pushes the object inside the
  transformed function.

Cells follow the seed (DESIGN.md C3/C4): the root's own cells are loaded with
``LOAD_CLOSURE`` and their contents with ``LOAD_DEREF``; only cells that are not
the root's own are read through ``.cell_contents``.
"""

from __future__ import annotations

from typing import Optional, Tuple

from .bytecode import emit


class Source:
    """Base class.  Sources are immutable and hashable (used as dict keys)."""

    __slots__ = ("_hash", "_name")
    #: slots that cache what the others determine: a copy on another base
    #: (with_base) must make them again
    CACHE_SLOTS = ("_hash", "_name")

    #: The source this one is derived from (None for roots).
    base: Optional["Source"] = None

    def guard_expr(self, base_expr: Optional[str], bind) -> str:
        raise NotImplementedError

    def emit_load(self, cg) -> None:
        raise NotImplementedError

    def name(self) -> str:
        """Readable form used in guards, logs and ``explain()``."""
        # (made once, as the hash: a deep model's guards and graph inputs ask
        # for the names of long chains over and over)
        try:
            return self._name
        except AttributeError:
            n = self._name = self.guard_expr(self.base.name() if self.base is not None else None, _label)
            return n

    def __repr__(self) -> str:
        return self.name()

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        # sources are immutable, and guard sets and value tables hash long
        # chains of them (``a.b[0].c``) over and over: hashed once
        try:
            return self._hash
        except AttributeError:
            h = self._hash = hash((type(self).__name__, self._key()))
            return h


def with_base(step: Source, base: Source) -> Source:
    """A copy of ``step`` (an attribute, item, type, ... of its base) on ``base``.

    Example::

        >>> with_base(AttrSource(LocalSource("a"), "w"), LocalSource("b")).name()
        'b.w'
    """
    out = object.__new__(type(step))
    for klass in type(step).__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if slot not in Source.CACHE_SLOTS and hasattr(step, slot):
                object.__setattr__(out, slot, getattr(step, slot))
    out.base = base
    return out


class LocalSource(Source):
    """An argument of the root frame, as bound on entry.

    ``is_cell`` marks an argument that the root's prologue turns into a cell
    (it appears in ``co_cellvars``): the transformed code then reads it with
    ``LOAD_DEREF`` while the guard, which sees plain parameters, reads it by name.
    """

    __slots__ = ("local_name", "is_cell")

    def __init__(self, local_name: str, is_cell: bool = False):
        self.local_name = local_name
        self.is_cell = is_cell

    def _key(self):
        return (self.local_name, self.is_cell)

    def guard_expr(self, base_expr, bind):
        return self.local_name

    def emit_load(self, cg):
        cg.emit("LOAD_DEREF" if self.is_cell else "LOAD_FAST", self.local_name)


class GlobalSource(Source):
    """A name in the root function's globals (``LOAD_GLOBAL``)."""

    __slots__ = ("global_name",)

    def __init__(self, global_name: str):
        self.global_name = global_name

    def _key(self):
        return (self.global_name,)

    def guard_expr(self, base_expr, bind):
        return f"___G[{self.global_name!r}]"

    def name(self):
        return f"G[{self.global_name!r}]"

    def emit_load(self, cg):
        cg.emit("LOAD_GLOBAL", self.global_name)


class BuiltinSource(Source):
    """A builtin found by a root ``LOAD_GLOBAL`` (not shadowed by a global)."""

    __slots__ = ("builtin_name",)

    def __init__(self, builtin_name: str):
        self.builtin_name = builtin_name

    def _key(self):
        return (self.builtin_name,)

    def guard_expr(self, base_expr, bind):
        return f"___B[{self.builtin_name!r}]"

    def emit_load(self, cg):
        cg.emit("LOAD_GLOBAL", self.builtin_name)


class ObjectSource(Source):
    """A fixed object bytegraph holds by reference (e.g. another module's globals dict).

    Guards bind it as a constant; codegen loads it as a constant.
    """

    __slots__ = ("obj", "label")

    def __init__(self, obj, label: str):
        self.obj = obj
        self.label = label

    def _key(self):
        return (id(self.obj),)

    def guard_expr(self, base_expr, bind):
        return bind(self.obj)

    def name(self):
        return self.label

    def emit_load(self, cg):
        cg.load_object(self.obj)


class RootCellSource(Source):
    """A cell of the root frame itself: a free variable (``__closure__``) or a cell variable.

    The transformed function pushes it with ``LOAD_CLOSURE name`` (DESIGN.md C4).
    Guards reach a free variable's cell through the compiled function's closure.
    """

    __slots__ = ("cell_name", "closure_index")

    def __init__(self, cell_name: str, closure_index: Optional[int]):
        self.cell_name = cell_name
        self.closure_index = closure_index  # None for co_cellvars (no guard needed)

    def _key(self):
        return (self.cell_name,)

    def guard_expr(self, base_expr, bind):
        return f"___cells[{self.closure_index}]"

    def name(self):
        return f"cell {self.cell_name}"

    def emit_load(self, cg):
        cg.instrs.append(emit.load_cell(self.cell_name, positions=cg.positions))


class CellContentsSource(Source):
    """What a pre-existing cell holds (C3): ``LOAD_DEREF`` for root cells, else ``.cell_contents``."""

    __slots__ = ("base",)

    def __init__(self, base: Source):
        self.base = base

    def _key(self):
        return (self.base,)

    def guard_expr(self, base_expr, bind):
        return f"{base_expr}.cell_contents"

    def name(self):
        if isinstance(self.base, RootCellSource):
            return self.base.cell_name
        return f"{self.base.name()}.cell_contents"

    def emit_load(self, cg):
        if isinstance(self.base, RootCellSource):
            cg.emit("LOAD_DEREF", self.base.cell_name)
        else:
            self.base.emit_load(cg)
            cg.emit("LOAD_ATTR", "cell_contents")


class AttrSource(Source):
    """``base.attr``."""

    __slots__ = ("base", "attr")

    def __init__(self, base: Source, attr: str):
        self.base = base
        self.attr = attr

    def _key(self):
        return (self.base, self.attr)

    def guard_expr(self, base_expr, bind):
        return function_part(base_expr, self.attr, bind)

    def emit_load(self, cg):
        self.base.emit_load(cg)
        cg.emit("LOAD_ATTR", self.attr)


class TypeSource(Source):
    """``type(base)``: the class the interpreter looks special methods and
    the generic attribute protocol up on.  Unlike ``base.__class__`` it never
    runs the class's own ``__getattribute__``."""

    __slots__ = ("base",)

    def __init__(self, base: Source):
        self.base = base

    def _key(self):
        return (self.base,)

    def guard_expr(self, base_expr, bind):
        return f"{bind(type)}({base_expr})"

    def name(self):
        return f"type({self.base.name()})"

    def emit_load(self, cg):
        cg.push_callable(type)
        self.base.emit_load(cg)
        cg.call(1)


class GenericAttrSource(Source):
    """``object.__getattribute__(base, attr)``: the attribute as the generic
    protocol finds it (data descriptor of the class, instance dict, class
    attribute), without the class's own ``__getattribute__`` or
    ``__getattr__``.  It is the source of what a trace read through that
    generic path on an object whose class has such hooks: ``base.attr`` would
    run the program's hook in every guard check and every reload."""

    __slots__ = ("base", "attr")

    def __init__(self, base: Source, attr: str):
        self.base = base
        self.attr = attr

    def _key(self):
        return (self.base, self.attr)

    def guard_expr(self, base_expr, bind):
        return f"{bind(object.__getattribute__)}({base_expr}, {self.attr!r})"

    def name(self):
        return f"object.__getattribute__({self.base.name()}, {self.attr!r})"

    def emit_load(self, cg):
        cg.push_callable(object.__getattribute__)
        self.base.emit_load(cg)
        cg.load_object(self.attr)
        cg.call(2)


class ItemSource(Source):
    """``base[key]`` for a constant key (int, str, ...)."""

    __slots__ = ("base", "key")

    def __init__(self, base: Source, key):
        self.base = base
        self.key = key

    def _key(self):
        if type(self.key) in _LITERAL_KEYS:
            return (self.base, type(self.key), self.key)
        return (self.base, "id", id(self.key))  # a class/function/enum key: by identity

    def guard_expr(self, base_expr, bind):
        if type(self.key) in _LITERAL_KEYS:
            return f"{base_expr}[{self.key!r}]"
        return f"{base_expr}[{bind(self.key)}]"

    def emit_load(self, cg):
        self.base.emit_load(cg)
        cg.load_object(self.key)
        cg.emit("BINARY_SUBSCR")


class IteratorPartSource(Source):
    """What a real iterator ``base`` holds that Python exposes only through
    helpers: ``part`` is ``"container"`` (the list, tuple, range or dict it
    walks; None once exhausted) or ``"state"`` (where it is, see
    ``values.real_iterators.iterator_state``)."""

    __slots__ = ("base", "part")

    def __init__(self, base: Source, part: str):
        self.base = base
        self.part = part

    def _key(self):
        return (self.base, self.part)

    def _helper(self):
        from .values import real_iterators
        return real_iterators.iterator_container if self.part == "container" else real_iterators.iterator_state

    def guard_expr(self, base_expr, bind):
        return f"{bind(self._helper())}({base_expr})"

    def name(self):
        return f"{self.part} of iterator {self.base.name()}"

    def emit_load(self, cg):
        cg.push_callable(self._helper())
        self.base.emit_load(cg)
        cg.call(1)


#: keys an ItemSource spells as literals (others are bound objects)
_LITERAL_KEYS = (int, str, bool, float, bytes, type(None), tuple)


#: the native accessor of each function attribute whose attribute read raises
#: the "object.__getattr__" audit event (see native/tensor_guard.cpp)
_FUNCTION_PARTS = {"__code__": "code_of", "__defaults__": "defaults_of", "__kwdefaults__": "kwdefaults_of"}


def function_part(base_expr: str, attr: str, bind) -> str:
    """Guard text reading ``base_expr.attr``; for ``__code__``, ``__defaults__``
    and ``__kwdefaults__`` through the native module when it is loaded, so a
    check does not call every audit hook of the process on each read.

    Example::

        >>> function_part("f", "__name__", str)
        'f.__name__'
    """
    part = _FUNCTION_PARTS.get(attr)
    if part is not None:
        from . import native
        module = native.load()
        if module is not None and hasattr(module, part):
            return f"{bind(getattr(module, part))}({base_expr})"
    return f"{base_expr}.{attr}"


def closure_cell_source(fn_source: Source, index: int) -> Source:
    """Source of ``fn.__closure__[index]`` for a pre-existing function."""
    return ItemSource(AttrSource(fn_source, "__closure__"), index)


def chain(source: Source) -> Tuple[Source, ...]:
    """The source and its bases, root first."""
    out = []
    while source is not None:
        out.append(source)
        source = source.base
    return tuple(reversed(out))


def _label(obj) -> str:
    return f"<{type(obj).__name__} at {id(obj):#x}>"
