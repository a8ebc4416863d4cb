"""Builtins that read the calling frame or object identity: ``locals()``,
``vars()``, zero-argument ``super()``, ``id()``.

Each is a handler ``(tx, args, kwargs) -> Value`` registered in
:data:`bytegraph.values.builtins_table.BUILTIN_HANDLERS`.
"""

from __future__ import annotations

from ..bytecode import SPEC
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
    """``locals()``: the frame's bound locals and non-empty cells, as a new
    dict in CPython's order (the code's locals, then its cells, then its free
    variables: ``localsplus``), whatever order the trace bound them in.

    A generated frame (a continuation, an outlined loop body) lists the
    user's variables in its base code's order, never bytegraph's own names;
    one whose locals came in a state dict lists the entries it never touched
    too (each guarded present), and guards absent the unbound ones."""
    from .cells import CellValue, EMPTY, UNREAD
    from .base import UnrealizedLocal
    from ..bytecode.versions import localsplus_names
    from ..resume import origin_of
    if tx.namespace is not None:
        # a class body's locals() is its namespace itself, written through
        raise Unsupported("locals() in a class body", kind="class_statement",
                          hint="the class statement runs natively between graphs")
    origin = origin_of(tx.code)
    base = origin.base if origin is not None else tx.code
    order = [n for n in localsplus_names(base.co_varnames, base.co_cellvars, base.co_freevars)
             if not n.startswith("___bg_")]
    order += [n for n in tx.unrealized if n not in order and not n.startswith("___bg_")]
    frame_cells = _frame_cells(tx)
    shared = not SPEC.locals_snapshot
    if shared and tx.locals_dict is not None:
        # Before 3.13 the frame has one locals dict: each call writes the
        # bound variables into it and removes the unbound ones, leaves other
        # keys (an ``exec``'s) alone, and returns that same dict.
        out = tx.locals_dict
        tx.side_effects.mutate(out)
    else:
        out = DictValue()
    for name in order:
        v = tx.locals.get(name)
        if name in frame_cells and isinstance(v, CellValue):
            if v.contents is UNREAD:
                v.read(tx)
            v = None if v.contents is EMPTY else v.contents
        elif v is None:
            if name in tx.unrealized:
                v = UnrealizedLocal(tx, name)
            elif tx.state_source is not None and name not in tx.state_names:
                # unbound here; a later call's state dict may hold it
                tx.guards.add(Guard("DICT_CONTAINS", tx.state_source, (name, False)))
        if v is None:
            out.entries.pop(str_key(name), None)
        else:
            # (an existing key keeps its place, as in the frame's dict)
            out.entries[str_key(name)] = (const(name), v)
    if shared:
        tx.locals_dict = out
    return out


def _frame_cells(tx) -> frozenset:
    """Names of ``tx``'s own cells (its locals map them to CellValues)."""
    return frozenset(tx.code.co_cellvars) | frozenset(tx.code.co_freevars)


def _check_super_args(tx, t, obj) -> None:
    """``super(t, obj)``'s own TypeErrors, worded by the running interpreter's
    ``super`` (3.13 names obj's type and t): asked with ``t`` itself and
    ``obj`` (or a bare instance of its class, made without running its code)."""
    if t.is_constant() and isinstance(t.as_constant(), type):
        cls = t.as_constant()
        if obj.is_constant():
            o = obj.as_constant()
            if isinstance(o, cls) or (isinstance(o, type) and issubclass(o, cls)):
                return
        elif issubclass(obj.python_type(), cls):
            return
    elif not t.is_constant():
        raise Unsupported("super() of a first argument that is not a constant", kind="unsupported_builtin")
    if obj.is_constant():
        real = obj.as_constant()
    else:
        try:
            real = object.__new__(obj.python_type())
        except Exception:  # noqa: BLE001 - no bare instance to ask with
            raise Unsupported("super() with an object of an unrelated type", kind="unsupported_builtin") from None
    try:
        super(t.as_constant(), real)
    except TypeError as e:
        tx.raise_python_exception(TypeError(*e.args))
    raise Unsupported("super() arguments bytegraph's check rejects", kind="unsupported_builtin")


def super_(tx, args, kwargs):
    from .super_calls import SuperValue
    if len(args) == 2:
        _check_super_args(tx, *args)
        return SuperValue(args[0].as_constant(), args[1])
    if args:
        raise Unsupported("super() with one argument", kind="unsupported_builtin")
    cell = tx.locals.get("__class__")
    first = tx.code.co_varnames[0] if tx.code.co_argcount else None
    if cell is None or first is None:
        tx.raise_python_exception(RuntimeError("super(): no arguments"))
    return SuperValue(cell.read(tx).as_constant(), tx.load_local(first))


def id_(tx, args, kwargs):
    from ..layer_reuse import identity_observed
    (v,) = args
    real = v.real_object() if v.source is not None or isinstance(v, ConstantValue) else None
    if real is None or (isinstance(v, ConstantValue) and type(real[0]) in (int, float, str, bytes)):
        raise Unsupported(f"id() of a {v.type_name()}", kind="unsupported_builtin")
    if v.source is not None:
        # the number is baked into the capture: only this very object may reuse it
        tx.guards.add(Guard("ID_MATCH", v.source, real[0]))
        identity_observed(tx, v.source)
    return const(id(real[0]))
