"""Collectives and process-group queries inside traced code.

* **Functional collectives** (``torch.distributed._functional_collectives``:
  ``all_reduce``, ``all_gather_tensor``, ``reduce_scatter_tensor``,
  ``broadcast``, ``all_to_all_single``, their ``_autograd`` forms,
  ``wait_tensor``) become graph nodes.  The group argument (a process group,
  a device mesh, ``(mesh, dim)``, a list of ranks or a group name) is resolved
  while tracing to the group's name, which the node takes; the entry guards
  the group (:data:`GUARD_DIST_GROUP`).  A collective node is never pruned,
  even when its result is unused: every rank must take part in it.
* **In-place c10d collectives** (``dist.all_reduce(t)``, ``dist.broadcast``,
  ``dist.all_gather_into_tensor``, ``dist.reduce_scatter_tensor``,
  ``dist.all_gather(list, t)``) with ``async_op=False`` are traced as their
  functional form followed by a copy into the output tensor(s), the same
  values eager computes.  ``async_op=True`` (a ``Work`` handle the program
  waits on) is a graph break of kind :data:`BREAK_ASYNC_COLLECTIVE`: the call
  runs natively.  Every other function of ``torch.distributed.distributed_c10d``
  (``barrier``, object collectives, point-to-point) runs natively, a break of
  kind :data:`BREAK_C10D`.
* **Queries**: ``dist.get_rank(group)``, ``dist.get_world_size(group)`` and
  ``dist.is_initialized()`` are constants of the trace, guarded by the
  group's (name, rank, size), so a program that re-initializes its process
  group, or passes another group, recompiles.

Example::

    >>> group_signature(None) if not __import__("torch").distributed.is_initialized() else ()
    ()
"""

from __future__ import annotations

import inspect
import sys
import types
import warnings
from typing import Callable, Dict, Optional

import torch

from ..errors import Unsupported
from ..guards import Guard

#: the break kind of a c10d collective with ``async_op=True``
BREAK_ASYNC_COLLECTIVE = "async_collective"
#: the break kind of any other c10d function (barrier, object collectives, send/recv)
BREAK_C10D = "c10d_call"
#: the guard kind over a process group: its (name, rank, size)
GUARD_DIST_GROUP = "DIST_GROUP"

_C10D = "torch.distributed.distributed_c10d"
_FUNCOL = "torch.distributed._functional_collectives"


def group_signature(group) -> tuple:
    """``(name, rank, size)`` of ``group`` (None: the default group), ``()``
    when there is no default group: what a trace that used the group depends on."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return ()
    if group is None:
        group = dist.group.WORLD
    if not isinstance(group, dist.ProcessGroup):
        return ("?", id(group))
    return (group.group_name, dist.get_rank(group), dist.get_world_size(group))


def _real(tx, value, what: str):
    """The Python object a traced argument stands for (a constant, or a known real object)."""
    from ..values.builder import python_constant
    real = value.real_object()
    if real is not None:
        return real[0]
    try:
        return python_constant(value, tx)
    except Unsupported:
        raise Unsupported(f"{what} that is not known while tracing", kind=BREAK_C10D,
                          hint="pass a process group, device mesh, list of ranks or group name the trace can see")


def _guard_group(tx, value, group) -> None:
    """Guard the process group ``group`` read from ``value`` (None: the default group)."""
    dist = torch.distributed
    source = None if value is None else value.source
    if group is None or isinstance(group, dist.ProcessGroup):
        if value is not None and source is None and group is not None:
            raise Unsupported("a process group made in the trace", kind=BREAK_C10D)
        tx.guards.add(Guard(GUARD_DIST_GROUP, source, group_signature(group)))
        return
    # a mesh, a list of ranks, a name: resolved to a group whose name the graph
    # holds; the default group must stay the one the names were resolved in
    tx.guards.add(Guard(GUARD_DIST_GROUP, None, group_signature(None)))
    if source is not None and not value.is_constant():
        tx.guards.add(Guard("ID_MATCH", source, group))   # (a device mesh: another one is another group)


def _group_name(tx, value, tag: str = "") -> str:
    """The name of the group a collective's ``group`` argument means (guarded)."""
    from ..values.constants import is_none
    funcol = sys.modules[_FUNCOL] if _FUNCOL in sys.modules else __import__(_FUNCOL, fromlist=["_"])
    group = None if value is None or is_none(value) else _real(tx, value, "a process group")
    if group is None:
        group = torch.distributed.group.WORLD
        _guard_group(tx, None, None)
    else:
        _guard_group(tx, value, group)
    return str(funcol._resolve_group_name(group, tag))


def _bind(tx, fn, args, kwargs) -> inspect.BoundArguments:
    """``fn``'s parameters bound to the traced arguments; a wrong call raises
    the TypeError Python would, in the program."""
    try:
        return inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        tx.raise_python_exception(e)


def _collective(tx, fn, args, kwargs):
    """Record a functional collective ``fn(*args)`` as a graph node that is never pruned."""
    from ..values.tensors import graph_call
    with warnings.catch_warnings():
        # (funcol's deprecation warnings fire when torch.compile is not
        # compiling: at run time they are eager's, here they would be extra)
        warnings.simplefilter("ignore")
        out = graph_call(tx, "call_function", fn, args, kwargs)
    node = getattr(out, "node", None)
    if node is not None:
        node.meta["impure"] = True
    else:
        for item in getattr(out, "items", ()):
            if getattr(item, "node", None) is not None:
                item.node.meta["impure"] = True
    return out


def _functional(fn, group_param: str = "group"):
    """Handler of funcol's ``fn``: its group argument resolved to a name constant."""
    def handler(tx, args, kwargs):
        from ..values.constants import const
        bound = _bind(tx, fn, args, kwargs)
        tag = bound.arguments.get("tag")
        tag = tag.as_constant() if tag is not None else ""
        if group_param in bound.arguments:
            bound.arguments[group_param] = const(_group_name(tx, bound.arguments[group_param], tag))
        return _collective(tx, fn, list(bound.args), dict(bound.kwargs))
    return handler


def _reduce_op(tx, value) -> str:
    from ..values.constants import is_none
    dist = torch.distributed
    op = dist.ReduceOp.SUM if value is None or is_none(value) else _real(tx, value, "a reduce op")
    if value is not None and value.source is not None and not is_none(value):
        tx.guards.add(Guard("CONSTANT_MATCH", value.source, op))   # the graph holds this op's name
    for known, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"), (dist.ReduceOp.PRODUCT, "product"),
                        (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max"), (dist.ReduceOp.BAND, "band"),
                        (dist.ReduceOp.BOR, "bor"), (dist.ReduceOp.BXOR, "bxor")):
        if op == known:
            return name
    raise Unsupported(f"reduce op {op!r} in a traced collective", kind=BREAK_C10D,
                      hint="it runs natively between graphs")


def _in_place(fn, make: Callable):
    """Handler of c10d's in-place ``fn``: ``make(tx, bound)`` records the
    functional form and the copies, for ``async_op=False``."""
    def handler(tx, args, kwargs):
        from ..values.constants import NONE, is_none
        bound = _bind(tx, fn, args, kwargs)
        async_op = bound.arguments.get("async_op")
        if async_op is not None and not (async_op.is_constant() and async_op.as_constant() is False):
            raise Unsupported(f"dist.{fn.__name__}(..., async_op=True) returns a Work handle",
                              kind=BREAK_ASYNC_COLLECTIVE, hint="the collective runs natively between graphs")
        group = bound.arguments.get("group")
        bound.arguments["group"] = None if group is None or is_none(group) else group
        make(tx, bound.arguments)
        return NONE
    return handler


def _tensor(tx, value, what):
    from ..values.tensors import TensorValue
    if not isinstance(value, TensorValue):
        raise Unsupported(f"{what} that is not a tensor of the trace", kind=BREAK_C10D)
    return value


def _make_all_reduce(tx, a):
    from ..values.constants import const
    funcol = sys.modules[_FUNCOL]
    t = _tensor(tx, a["tensor"], "dist.all_reduce of something")
    out = _collective(tx, funcol.all_reduce, [t, const(_reduce_op(tx, a.get("op"))),
                                              const(_group_name(tx, a["group"]))], {})
    t.call_method(tx, "copy_", [out], {})


def _make_broadcast(tx, a):
    from ..values.constants import const, is_none
    funcol = sys.modules[_FUNCOL]
    t = _tensor(tx, a["tensor"], "dist.broadcast of something")
    name = _group_name(tx, a["group"])
    src, group_src = a.get("src"), a.get("group_src")
    if group_src is not None and not is_none(group_src):
        rank = _real(tx, group_src, "a source rank")
    else:
        if src is None or is_none(src):
            raise Unsupported("dist.broadcast without a source rank", kind=BREAK_C10D)
        group = None if a["group"] is None else _real(tx, a["group"], "a process group")
        rank = _real(tx, src, "a source rank")
        if group is not None:
            rank = torch.distributed.get_group_rank(group, rank)
    out = _collective(tx, funcol.broadcast, [t, const(rank), const(name)], {})
    t.call_method(tx, "copy_", [out], {})


def _make_all_gather_into_tensor(tx, a):
    from ..values.constants import const
    funcol = sys.modules[_FUNCOL]
    out_t = _tensor(tx, a["output_tensor"], "the output of dist.all_gather_into_tensor")
    inp = _tensor(tx, a["input_tensor"], "the input of dist.all_gather_into_tensor")
    out = _collective(tx, funcol.all_gather_tensor, [inp, const(0), const(_group_name(tx, a["group"]))], {})
    out_t.call_method(tx, "copy_", [out.call_method(tx, "view_as", [out_t], {})], {})


def _make_reduce_scatter_tensor(tx, a):
    from ..values.constants import const
    funcol = sys.modules[_FUNCOL]
    out_t = _tensor(tx, a["output"], "the output of dist.reduce_scatter_tensor")
    inp = _tensor(tx, a["input"], "the input of dist.reduce_scatter_tensor")
    out = _collective(tx, funcol.reduce_scatter_tensor, [inp, const(_reduce_op(tx, a.get("op"))), const(0),
                                                         const(_group_name(tx, a["group"]))], {})
    out_t.call_method(tx, "copy_", [out], {})


def _make_all_gather(tx, a):
    from ..values.constants import const
    from ..values.containers import ListValue
    funcol = sys.modules[_FUNCOL]
    outs = a["tensor_list"]
    if not isinstance(outs, ListValue):
        raise Unsupported("dist.all_gather into something that is not a list", kind=BREAK_C10D)
    inp = _tensor(tx, a["tensor"], "the input of dist.all_gather")
    targets = [_tensor(tx, o, "an output of dist.all_gather") for o in outs.items]
    gathered = _collective(tx, funcol.all_gather_tensor, [inp, const(0), const(_group_name(tx, a["group"]))], {})
    pieces = gathered.call_method(tx, "chunk", [const(len(targets))], {}).unpack(tx)
    for target, piece in zip(targets, pieces):
        target.call_method(tx, "copy_", [piece], {})


def _query(fn, kind: str):
    """Handler of ``dist.get_rank``/``get_world_size``: a guarded constant."""
    def handler(tx, args, kwargs):
        from ..values.constants import const, is_none
        bound = _bind(tx, fn, args, kwargs)
        value = bound.arguments.get("group")
        group = None if value is None or is_none(value) else _real(tx, value, "a process group")
        if not torch.distributed.is_initialized():
            raise Unsupported(f"dist.{fn.__name__}() without a process group", kind=BREAK_C10D,
                              hint="it runs natively (and raises, as in eager)")
        _guard_group(tx, value if group is not None else None, group)
        return const(fn(group) if group is not None else fn())
    return handler


def _is_initialized(tx, args, kwargs):
    from ..values.constants import const
    tx.guards.add(Guard(GUARD_DIST_GROUP, None, group_signature(None)))
    return const(torch.distributed.is_initialized())


_TABLE: Dict[object, Callable] = {}
_LOADED: set = set()


def _load() -> None:
    c10d = sys.modules.get(_C10D)
    if c10d is not None and _C10D not in _LOADED:
        _LOADED.add(_C10D)
        _TABLE[c10d.get_rank] = _query(c10d.get_rank, "rank")
        _TABLE[c10d.get_world_size] = _query(c10d.get_world_size, "size")
        _TABLE[c10d.is_initialized] = _is_initialized
        for name, make in (("all_reduce", _make_all_reduce), ("broadcast", _make_broadcast),
                           ("all_gather_into_tensor", _make_all_gather_into_tensor),
                           ("reduce_scatter_tensor", _make_reduce_scatter_tensor), ("all_gather", _make_all_gather)):
            fn = getattr(c10d, name)
            _TABLE[fn] = _with_funcol(_in_place(fn, make))
    funcol = sys.modules.get(_FUNCOL)
    if funcol is not None and _FUNCOL not in _LOADED:
        _LOADED.add(_FUNCOL)
        for name in ("all_reduce", "all_gather_tensor", "all_gather_single", "reduce_scatter_tensor",
                     "reduce_scatter_single", "broadcast", "all_to_all_single", "all_gather_tensor_autograd",
                     "reduce_scatter_tensor_autograd", "all_to_all_single_autograd", "all_reduce_coalesced"):
            fn = getattr(funcol, name, None)
            if fn is not None:
                _TABLE[fn] = _functional(fn)
        _TABLE[funcol.wait_tensor] = lambda tx, args, kwargs: _collective(tx, funcol.wait_tensor, args, kwargs)


def _with_funcol(handler):
    def ensure(tx, args, kwargs):
        if _FUNCOL not in sys.modules:
            __import__(_FUNCOL)
        return handler(tx, args, kwargs)
    return ensure


def handler_for(obj) -> Optional[Callable]:
    """The trace's handler for a torch.distributed function ``obj``, or None.

    Example::

        >>> handler_for(torch.distributed.get_rank) is not None, handler_for(len)
        (True, None)
    """
    if type(obj) is types.BuiltinMethodType:
        owner = getattr(obj, "__self__", None)
        if type(owner).__module__ == "torch._C._distributed_c10d" and not isinstance(owner, type):
            return _native_method   # Work.wait(), ProcessGroup.rank(), ...: C++ objects of c10d
        return None
    if type(obj) is not types.FunctionType:
        return None
    mod = obj.__module__
    if mod is None or not mod.startswith("torch.distributed"):
        return None
    _load()
    return _TABLE.get(obj)


def _native_method(tx, args, kwargs):
    raise Unsupported("a method of a torch.distributed object (a Work handle, a process group)", kind=BREAK_C10D,
                      hint="it runs natively between graphs")


def native_c10d(fn) -> Optional[tuple]:
    """``(break kind, hint)`` when ``fn`` is a c10d function the trace does not
    model (it runs natively), else None.

    Example::

        >>> native_c10d(torch.distributed.barrier)[0], native_c10d(len)
        ('c10d_call', None)
    """
    if getattr(fn, "__module__", None) == _C10D:
        return (BREAK_C10D, "torch.distributed calls without a traced form run natively between graphs")
    return None
