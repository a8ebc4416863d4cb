"""Builtins that read the calling frame or object identity: ``locals()``,
``vars()``, zero-argument ``super()``, ``id()``.

Each is a handler ``(tx, args, kwargs) -> Value`` registered in
:data:`bytegraph.values.builtins_table.BUILTIN_HANDLERS`.
"""

from __future__ import annotations

from ..errors import Unsupported
from ..guards import Guard
from .constants import ConstantValue, const
from .containers import DictValue, str_key


def dir_(tx, args, kwargs):
    """``dir()``: the sorted names of the frame's locals (``dir(obj)`` is not modelled)."""
    if args or kwargs or tx.state_source is not None:
        # dir(obj) is not modelled; a loop body's untouched locals are in its state dict
        raise Unsupported("dir() of an object, or in an outlined loop body", kind="unsupported_builtin")
    from .containers import ListValue
    names = sorted(k.as_constant() for k, _ in locals_(tx, args, kwargs).entries.values())
    return ListValue([const(n) for n in names])


def vars_(tx, args, kwargs):
    if kwargs:
        tx.raise_python_exception(TypeError("vars() takes no keyword arguments"))
    if not args and not kwargs:
        return locals_(tx, args, kwargs)  # vars() is locals()
    if len(args) == 1 and not kwargs:
        from ..errors import UserException
        try:
            return args[0].get_attr(tx, "__dict__")
        except UserException as e:
            if not issubclass(e.value.python_type(), AttributeError):
                raise
        tx.raise_python_exception(TypeError("vars() argument must have __dict__ attribute"))
    tx.raise_python_exception(TypeError(f"vars expected at most 1 argument, got {len(args)}"))


def locals_(tx, args, kwargs):
    """``locals()``: the frame's bound locals and non-empty cells, as a new dict."""
    from .cells import EMPTY, UNREAD
    from .base import UnrealizedLocal
    if tx.namespace is not None:
        # a class body's locals() is its namespace itself, written through
        raise Unsupported("locals() in a class body", kind="class_statement",
                          hint="the class statement runs natively between graphs")
    if tx.state_source is not None:
        return StateLocalsValue(tx)
    out = DictValue()
    for name in tx.code.co_varnames:
        if name in tx.unrealized:
            out.entries[str_key(name)] = (const(name), UnrealizedLocal(tx, name))
    frame_cells = _frame_cells(tx)
    for name, v in tx.locals.items():
        if name in frame_cells:
            if v.contents is UNREAD:
                v.read(tx)
            if v.contents is EMPTY:
                continue
            v = v.contents
        out.entries[str_key(name)] = (const(name), v)
    return out


def _frame_cells(tx) -> frozenset:
    """Names of ``tx``'s own cells (its locals map them to CellValues)."""
    return frozenset(tx.code.co_cellvars) | frozenset(tx.code.co_freevars)


class StateLocalsValue(DictValue):
    """``locals()`` of a generated frame whose locals arrived as a state dict.

    Rebuilt as a copy of the incoming dict updated with what this frame
    bound or deleted, so entries it never touched need no guard.
    """

    __slots__ = ("deleted", "state_source")

    def __init__(self, tx):
        super().__init__()
        self.state_source = tx.state_source
        frame_cells = _frame_cells(tx)
        for name, v in tx.locals.items():
            if name not in frame_cells:  # (a plain local may hold a cell object)
                self.entries[str_key(name)] = (const(name), v)
        self.deleted = [n for n in tx.state_names if n not in tx.unrealized and n not in tx.locals]

    def reconstruct(self, cg):
        self.state_source.emit_load(cg)
        cg.call_method("copy", lambda: 0)
        for k, v in self.entries.values():
            cg.emit("COPY", arg=1)
            cg.reconstruct(v)
            cg.emit("SWAP", arg=2)
            cg.reconstruct(k)
            cg.emit("STORE_SUBSCR")
        for name in self.deleted:
            cg.emit("COPY", arg=1)
            cg.load_object(name)
            cg.emit("DELETE_SUBSCR")


def super_(tx, args, kwargs):
    from .super_calls import SuperValue
    if len(args) == 2:
        if not args[0].is_constant():
            raise Unsupported("super() of a class the trace does not know", kind="unsupported_builtin")
        cls = args[0].as_constant()
        if not isinstance(cls, type):
            try:
                super(cls)   # CPython's own TypeError (the message is the interpreter's)
            except TypeError as e:
                tx.raise_python_exception(e)
        return SuperValue(cls, args[1])
    if args:
        raise Unsupported("super() with one argument", kind="unsupported_builtin")
    cell = tx.locals.get("__class__")
    first = tx.code.co_varnames[0] if tx.code.co_argcount else None
    if cell is None or first is None:
        tx.raise_python_exception(RuntimeError("super(): no arguments"))
    return SuperValue(cell.read(tx).as_constant(), tx.load_local(first))


def id_(tx, args, kwargs):
    (v,) = args
    real = v.real_object() if v.source is not None or isinstance(v, ConstantValue) else None
    if real is None or (isinstance(v, ConstantValue) and type(real[0]) in (int, float, str, bytes)):
        raise Unsupported(f"id() of a {v.type_name()}", kind="unsupported_builtin")
    if v.source is not None:
        # the number is baked into the capture: only this very object may reuse it
        tx.guards.add(Guard("ID_MATCH", v.source, real[0]))
    return const(id(real[0]))
