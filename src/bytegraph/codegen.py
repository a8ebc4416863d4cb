"""From values to bytecode: the transformed function of one cache entry.

The transformed code keeps the original prologue (``MAKE_CELL``,
``COPY_FREE_VARS``, ``RESUME``), so the root's cells exist as real cells and
are reached with ``LOAD_CLOSURE``/``LOAD_DEREF``/``STORE_DEREF`` (DESIGN.md C4).
Then it

1. calls the compiled graph with the graph inputs loaded from their sources
   and stores each output in a temporary;
2. rebuilds the return value (new objects referenced twice are built once);
3. stages every side effect's new state in temporaries, then applies them in
   order (``side_effects.emit_replay``);
4. returns.

What is rebuilt is exactly what the return value and the pending side effects
reach (:func:`live_values`): the single pruning pass for dead locals, dead new
objects and dead cells (C7).
"""

from __future__ import annotations

import collections

import types
from typing import Dict, List, Tuple

from .bytecode import assemble, decode, emit, instr
from .errors import Unsupported
from .sources import Source, with_base
from .values.base import Value
from .values.cells import CellValue
from .values.constants import ConstantValue
from .values.containers import DictValue, ListValue, SetValue
from .values.real_iterators import ExistingIteratorValue
from .values.symbolic import SymIntValue
from .values.tensors import TensorValue

_SIMPLE_CONSTS = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), types.CodeType)


class _Ref:
    """Holds an unhashable object so it can sit in ``co_consts`` (code objects hash their constants)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


def live_values(roots: List[Value]) -> Tuple[Dict[int, int], List[TensorValue]]:
    """Walk what ``roots`` reach.

    Returns reference counts by ``id(value)`` (to build shared new objects
    once) and the computed tensors reached, in first-reached order (the
    graph's outputs).  Pre-existing values (with a source) are leaves: they
    are loaded, not rebuilt.
    """
    counts: Dict[int, int] = {}
    tensors: List[TensorValue] = []
    seen_nodes = set()
    path: List[Value] = []         # the values being walked, outermost first
    on_path: Dict[int, int] = {}   # id -> index in path

    def visit(v: Value):
        key = id(v)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] > 1:
            if key in on_path and not any(_new_cell(c) or _is_frame_local_cell(c)
                                          for c in path[on_path[key]:]):
                # (a cycle through a cell, such as a recursive nested function's
                # own, is fine: the frame's cell is loaded as it is and written
                # back; one made in the trace is made empty, then filled)
                raise Unsupported("a cyclic data structure escapes the compiled function",
                                  kind="unreconstructable")
            return
        if isinstance(v, (TensorValue, SymIntValue)):
            if v.source is None and v.node not in seen_nodes:
                seen_nodes.add(v.node)
                tensors.append(v)
            return
        if v.source is not None and not _is_frame_local_cell(v):
            return
        on_path[key] = len(path)
        path.append(v)
        for child in v.children():
            visit(child)
        path.pop()
        del on_path[key]

    try:
        for r in roots:
            visit(r)
    except RecursionError:
        raise Unsupported("a data structure too deeply nested to rebuild", kind="unreconstructable") from None
    return counts, tensors


def _new_cell(v: Value) -> bool:
    return isinstance(v, CellValue) and v.source is None and v.real_cell is None


def _is_frame_local_cell(v: Value) -> bool:
    # The root's own cell variables are made afresh by every call's prologue:
    # like cells created in the trace, they matter only if something live
    # reaches them (an escaping closure, a hook, a resume function).
    return isinstance(v, CellValue) and v.is_root_cell and v.source.closure_index is None


def is_live(cg: "Codegen", value: Value) -> bool:
    return id(value) in cg._counts


class Codegen:
    """An instruction list under construction, plus where values already live."""

    def __init__(self, root_code: types.CodeType, root_globals: dict, counts: Dict[int, int]):
        self.root_code = root_code
        self.root_globals = root_globals
        #: True while emitting the frame's own continuation after a graph break
        #: (values handed to resume functions, not to the caller or to other objects)
        self.continuation = False
        #: the side effects have been replayed (``SideEffects.emit_replay``):
        #: the real objects are in their final state
        self.replayed = False
        self.instrs: list = []
        self._counts = counts
        self._temps: Dict[int, str] = {}
        self._tensor_temps: Dict[object, str] = {}
        self._n_temps = 0
        self._keepalive: List[object] = []
        #: where the NULL of each call begun (begin_call) and not yet made sits
        self._calls: List[int] = []
        #: values whose reconstruction is under way, and the cells to fill with them once built
        self._building: set = set()
        self._cell_fixups: Dict[int, List[str]] = {}
        #: id(template class) -> its TemplateClassValue (see load_object)
        self.templates: Dict[int, Value] = {}
        first = next((i for i in decode(root_code) if i.positions is not None and i.positions.lineno is not None),
                     None)
        self.positions = first.positions if first is not None else None

    # -- primitives ------------------------------------------------------------
    def emit(self, opname: str, argval=None, *, arg=None, target=None):
        ins = instr(opname, argval, arg=arg, target=target, positions=self.positions)
        self.instrs.append(ins)
        return ins

    def load_object(self, obj) -> None:
        """Push ``obj`` itself (as a code constant)."""
        template = self.templates.get(id(obj)) if self.templates else None
        if template is not None and template.cls is obj:
            # a class made by a class statement in the trace: this call's own
            # class, built once (see values/class_build.py)
            temp = self._temps.get(id(template))
            if temp is not None:
                self.emit("LOAD_FAST", temp)
                return
            self.reconstruct(template)
            if id(template) not in self._temps:
                self.hold(template)
            return
        if type(obj) in (str, bytes) and len(obj) > 1:
            # equal constants share one slot of co_consts, and the code object
            # constructor interns name-like strings: an equal string that is
            # another object in the program would become the same object
            ref = _Ref(obj)
            self._keepalive.append(ref)
            self.emit("LOAD_CONST", ref)
            self.emit("LOAD_ATTR", "obj")
            return
        if type(obj) in _SIMPLE_CONSTS or _hashable(obj):
            self.emit("LOAD_CONST", obj)
        else:
            ref = _Ref(obj)
            self._keepalive.append(ref)
            self.emit("LOAD_CONST", ref)
            self.emit("LOAD_ATTR", "obj")

    def begin_call(self) -> None:
        """Start a call whose callable is pushed next: push its NULL, which
        :meth:`call` moves where the running version wants it (see
        :func:`bytegraph.bytecode.emit.place_null`).

        Example: ``cg.begin_call(); cg.load_object(print); cg.load_object(1); cg.call(1)``.
        """
        self._calls.append(len(self.instrs))
        self.emit("PUSH_NULL")

    def push_callable(self, obj) -> None:
        """Push ``obj`` ready to be called by :meth:`call`, with its NULL."""
        self.begin_call()
        self.load_object(obj)

    def call(self, argc: int, kw_names: tuple = (), positions=None) -> None:
        """Call the callable (with its NULL, or a method with its self) and
        the ``argc`` values on the stack, the last ``len(kw_names)`` by keyword."""
        calls = self._calls
        if calls and emit.place_null(self.instrs, calls[-1], argc):
            calls.pop()
        self.instrs.extend(emit.call(argc, kw_names, positions=positions or self.positions))

    def make_function(self, flags: int) -> None:
        """MAKE_FUNCTION of the code object on top of the stack, taking the
        values ``flags`` names from below it (see :func:`bytegraph.bytecode.emit.make_function`)."""
        self.instrs.extend(emit.make_function(flags, positions=self.positions))

    def call_with(self, args, kwargs: dict, leading: int = 0) -> None:
        """Push the values ``args`` and ``kwargs`` and call; ``leading`` arguments are already pushed."""
        for a in args:
            self.reconstruct(a)
        names = tuple(kwargs)
        for k in names:
            self.reconstruct(kwargs[k])
        self.call(leading + len(args) + len(names), kw_names=names)

    def call_method(self, name: str, argc_fn) -> None:
        """Call ``TOS.name(...)``; ``argc_fn`` pushes the arguments and returns their count."""
        self.emit("LOAD_METHOD", name)
        self.call(argc_fn())

    def load_sources(self, sources) -> None:
        """Push what each of ``sources`` reads, one after another, reading a
        part that several of them share once.

        A deep model's graph takes each layer's parameters, and their sources
        share the path to the layer (``self._modules['h']._modules['3']...``):
        12,000 instructions for a 48-layer GPT-2, read again on every call.
        Nothing runs between these reads, so a prefix read once is what each
        read would see.  (The temporaries are dropped after their last use,
        see clear_dead_temps.)

        Example: ``cg.load_sources([inp.source for inp in graph.inputs])``
        """
        # a prefix is held where the paths branch: read by two different
        # longer sources, or read itself and by a longer one (a root is one
        # instruction: nothing to save)
        ways: Dict[object, set] = {}
        for source in sources:
            ways.setdefault(source, set()).add(None)
            child = source
            while child.base is not None:
                ways.setdefault(child.base, set()).add(child)
                child = child.base
        shared = {b for b, w in ways.items() if len(w) > 1 and b.base is not None}
        held: Dict[object, str] = {}
        for source in sources:
            self._load_sharing(source, shared, held)

    def _load_sharing(self, source, shared, held) -> None:
        """Push ``source``, starting from its longest prefix held in a
        temporary, and hold each shared prefix it passes (see load_sources).

        The chain is read piece by piece, each piece rebased on the
        temporary below it, so no Python recursion is deeper than one piece
        (a linked list walked to its end is one long chain)."""
        links = []
        below = source
        while below is not None and below not in held:
            links.append(below)
            below = below.base
        base = _HeldSource(held[below]) if below is not None else None
        piece = []
        for link in reversed(links):        # from the root's end
            piece.append(link)
            if link not in shared and link is not source:
                continue
            if base is None:
                link.emit_load(self)          # the piece reaches the root
            else:
                rebased = base
                for step in piece:
                    rebased = with_base(step, rebased)
                rebased.emit_load(self)
            piece = []
            if link in shared:
                temp = held[link] = self.new_temp()
                if link is source:
                    self.emit("COPY", arg=1)  # (pushed, and held for later reads)
                self.emit("STORE_FAST", temp)
                base = _HeldSource(temp)
        if not links:
            base.emit_load(self)            # read whole before, as a prefix of another

    def new_temp(self) -> str:
        name = f"___bg_tmp{self._n_temps}"
        self._n_temps += 1
        return name

    def temp_mark(self) -> int:
        """A mark for :meth:`release_temps_since`."""
        return self._n_temps

    def release_temps_since(self, mark: int) -> None:
        """Clear the temporaries made since ``mark`` and forget what they held:
        a temporary left bound would keep its object alive while the rest of
        the frame (a native call, the continuation) runs."""
        names = {f"___bg_tmp{i}" for i in range(mark, self._n_temps)}
        if not names:
            return
        for name in sorted(names):
            self.emit("LOAD_CONST", None)
            self.emit("STORE_FAST", name)
        self._temps = {k: t for k, t in self._temps.items() if t not in names}
        self._tensor_temps = {k: t for k, t in self._tensor_temps.items() if t not in names}

    def store_tensor_output(self, value: TensorValue, temp: str) -> None:
        self._tensor_temps[value.node] = temp

    # -- values ----------------------------------------------------------------
    def reconstruct(self, value: Value) -> None:
        """Push the real object ``value`` stands for."""
        temp = self._temps.get(id(value))
        if temp is not None:
            self.emit("LOAD_FAST", temp)
            return
        if isinstance(value, (TensorValue, SymIntValue)):
            self.reconstruct_tensor(value)
            return
        if value.source is not None and (not isinstance(value, ConstantValue) or value.is_unguarded):
            value.source.emit_load(self)
            return
        self._building.add(id(value))
        value.reconstruct(self)
        self._building.discard(id(value))
        if self._counts.get(id(value), 0) > 1 and not isinstance(value, ConstantValue):
            temp = self.new_temp()
            self.emit("COPY", arg=1)
            self.emit("STORE_FAST", temp)
            self._temps[id(value)] = temp
            self._keepalive.append(value)
        for cell_temp in self._cell_fixups.pop(id(value), ()):
            # a cell made while ``value`` was being built, which holds it
            self.emit("COPY", arg=1)
            self.emit("LOAD_FAST", cell_temp)
            self.emit("STORE_ATTR", "cell_contents")

    def hold(self, value: Value) -> str:
        """Keep the object on top of the stack (left there) in a temporary as
        ``value``'s: later reconstructions of ``value`` load it."""
        temp = self.new_temp()
        self.emit("COPY", arg=1)
        self.emit("STORE_FAST", temp)
        self._temps[id(value)] = temp
        self._keepalive.append(value)
        return temp

    def fill_cell(self, cell_temp: str, contents: Value) -> None:
        """Set the cell held in ``cell_temp`` to ``contents``: now, or, when
        ``contents`` is being built (the cell is part of it, as a recursive
        function's closure), as soon as it is."""
        if id(contents) in self._building:
            self._cell_fixups.setdefault(id(contents), []).append(cell_temp)
            return
        self.reconstruct(contents)
        self.emit("LOAD_FAST", cell_temp)
        self.emit("STORE_ATTR", "cell_contents")

    def is_shared(self, value: Value) -> bool:
        """Reached more than once (or through a cycle) from what the code rebuilds."""
        return self._counts.get(id(value), 0) > 1

    def reconstruct_tensor(self, value: TensorValue) -> None:
        temp = self._tensor_temps.get(value.node)
        if temp is not None:
            self.emit("LOAD_FAST", temp)
        elif value.source is not None:
            value.source.emit_load(self)
        else:
            raise Unsupported("a tensor the graph does not output", kind="internal")

    def store_in_temp(self, value: Value) -> None:
        """Pop TOS into a new temporary that from now on stands for ``value``."""
        temp = self.new_temp()
        self.emit("STORE_FAST", temp)
        self._temps[id(value)] = temp
        self._keepalive.append(value)

    def stage_value(self, value: Value) -> None:
        """Evaluate ``value`` into a temporary now (before any side effect is applied)."""
        if id(value) in self._temps or isinstance(value, ConstantValue) and not value.is_unguarded:
            return
        if getattr(type(value), "read_late", False):
            return  # (written by the native instruction: read after it, see break_locals.NativeSlotValue)
        if getattr(value, "needs_replayed_container", lambda: False)():
            return  # an iterator over a container the replay changes: built after it
        if isinstance(value, CellValue) and value.is_root_cell:
            return  # LOAD_CLOSURE reads the frame's own cell: nothing to evaluate early
        if isinstance(value, (TensorValue, SymIntValue)) and value.node in self._tensor_temps:
            return
        self.reconstruct(value)
        if id(value) in self._temps:  # reconstruct already kept it (shared object)
            self.emit("POP_TOP")
            return
        self.store_in_temp(value)

    def stage_target(self, target: Value) -> None:
        """Pin a pre-existing object that a side effect writes to, before any is applied.

        Its source may pass through something an earlier write changes (``lst[2]``
        after the list is reordered, ``G`` after the global is rebound, ``h.inner``
        after the attribute is replaced); the write must reach the object the
        trace saw there, so it is loaded while the source still leads to it."""
        from .sources import LocalSource, ObjectSource, BuiltinSource
        if target.source is None or isinstance(target.source, (LocalSource, ObjectSource, BuiltinSource)):
            return
        if isinstance(target, CellValue) and target.is_root_cell:
            return
        if id(target) in self._temps:
            return
        target.source.emit_load(self)
        self.store_in_temp(target)

    def load_target(self, target: Value) -> None:
        """Push a pre-existing object a side effect writes to (staged or by its source)."""
        temp = self._temps.get(id(target))
        if temp is not None:
            self.emit("LOAD_FAST", temp)
        else:
            target.source.emit_load(self)

    def stage_new_state(self, target: Value) -> str:
        """Build the new contents of a mutated pre-existing container into a temporary."""
        if isinstance(target, ListValue):
            for item in target.items:
                self.reconstruct(item)
            self.emit("BUILD_LIST", arg=len(target.items))
        elif isinstance(target, DictValue):
            from .values.user_keys import refuse_rehashing
            refuse_rehashing(target)
            for op in target.key_log:
                if len(op) > 1:
                    self.stage_value(op[1])
            for k, v in target.entries.values():
                self.reconstruct(k)
                self.reconstruct(v)
            self.emit("BUILD_MAP", arg=len(target.entries))
        elif hasattr(target, "staged_items"):
            # a value whose new items are built first, then written in by apply_staged
            for item in target.staged_items():
                self.reconstruct(item)
            self.emit("BUILD_LIST", arg=len(target.staged_items()))
        elif hasattr(target, "apply_new_state"):
            return None  # a value that writes its own state into the real object
        elif isinstance(target, SetValue):
            # its operations are replayed one by one (apply_new_state): only
            # what they add must be evaluated before other effects
            for step in target.recipe:
                for part in step[1:]:
                    for v in (part if isinstance(part, list) else [part]):
                        if isinstance(v, Value):
                            self.stage_value(v)
            return None
        elif isinstance(target, ExistingIteratorValue):
            return None  # advanced in place (apply_new_state)
        else:
            raise Unsupported(f"replaying mutation of a {target.type_name()}", kind="internal")
        temp = self.new_temp()
        self.emit("STORE_FAST", temp)
        return temp

    def apply_new_state(self, target: Value, temp: str) -> None:
        """Write a staged new state into the real container, in place."""
        if isinstance(target, ExistingIteratorValue):
            target.emit_replay(self)
            return
        if isinstance(target, SetValue):
            # the same operations as eager, so the real table (and with it the
            # iteration order) ends up the same
            target.replay_ops(self)
            return
        if hasattr(target, "apply_staged"):
            target.apply_staged(self, temp)
            return
        if hasattr(target, "apply_new_state"):
            target.apply_new_state(self)
            return
        if isinstance(target, ListValue):
            self.emit("LOAD_FAST", temp)
            self.load_target(target)
            self.emit("LOAD_CONST", None)
            self.emit("LOAD_CONST", None)
            self.emit("BUILD_SLICE", arg=2)
            self.emit("STORE_SUBSCR")
            return
        if isinstance(target, DictValue):
            self._replay_key_ops(target)
            if target.cls is collections.Counter:
                # (Counter.update adds counts: dict's own update writes them)
                self.push_callable(dict.update)
                self.load_target(target)
                self.emit("LOAD_FAST", temp)
                self.call(2)
                self.emit("POP_TOP")
                return
        else:
            self.load_target(target)
            self.call_method("clear", lambda: 0)
            self.emit("POP_TOP")
        self.load_target(target)

        def push_temp():
            self.emit("LOAD_FAST", temp)
            return 1
        self.call_method("update", push_temp)
        self.emit("POP_TOP")

    def _replay_key_ops(self, target: DictValue) -> None:
        """The trace's insertions and deletions of keys, one by one as eager
        made them: the dict's table, holes included, ends up as eager's, so
        an iterator walking it (one the program holds, made before the
        trace) continues as it would have.  The values come after, by one
        ``update`` with the final contents, which moves no key."""
        for op in target.key_log:
            if op[0] == "clear":
                self.load_target(target)
                self.call_method("clear", lambda: 0)
                self.emit("POP_TOP")
            elif op[0] == "ins":
                self.emit("LOAD_CONST", None)
                self.load_target(target)
                self.reconstruct(op[1])
                self.emit("STORE_SUBSCR")
            elif op[0] == "move":
                self.load_target(target)
                key, last = op[1], op[2]

                def push_key_and_end(key=key, last=last):
                    self.reconstruct(key)
                    self.load_object(last)
                    return 2
                self.call_method("move_to_end", push_key_and_end)
                self.emit("POP_TOP")
            else:
                self.load_target(target)
                self.reconstruct(op[1])
                self.emit("DELETE_SUBSCR")

    # -- whole function ------------------------------------------------------------
    def prologue(self) -> None:
        """Copy the original cell prologue up to and including ``RESUME``."""
        for ins in decode(self.root_code):
            self.instrs.append(instr(ins.opname, ins.argval, arg=ins.arg, positions=ins.positions))
            if ins.opname == "RESUME":
                break

    def assemble(self) -> types.CodeType:
        return assemble(clear_dead_temps(self.instrs), self.root_code)


TEMP_PREFIX = "___bg_tmp"


class _HeldSource(Source):
    """A prefix of a source chain that load_sources holds in a temporary
    (only while it emits; never guarded)."""

    __slots__ = ("temp",)

    def __init__(self, temp: str):
        self.temp = temp

    def guard_expr(self, base_expr, bind) -> str:
        return self.temp

    def emit_load(self, cg) -> None:
        cg.emit("LOAD_FAST", self.temp)

    def _key(self) -> tuple:
        return (self.temp,)


def clear_dead_temps(instrs: list) -> list:
    """``instrs`` with a ``DELETE_FAST`` after each last read of a temporary.

    Temporaries hold rebuilt objects (new objects, cells, results) for the
    whole frame otherwise: a break's native call and its resume functions
    would run with objects alive that Python had freed already (an object
    made and dropped inside an inlined call).  (The user's own locals are
    left alone: a native ``exec`` or ``locals()`` may read the frame.)
    """
    from .bytecode import live_locals
    live = live_locals(instrs, TEMP_PREFIX)
    n = len(instrs)
    index = {id(ins): k for k, ins in enumerate(instrs)}
    out = []
    for k, ins in enumerate(instrs):
        out.append(ins)
        if ins.opname != "LOAD_FAST" or not ins.argval.startswith(TEMP_PREFIX):
            continue
        # (not after a dead STORE_FAST: a NULL stack slot saved that way leaves
        # the temporary unbound)
        # LOAD_FAST neither jumps nor ends a block: its only successor is k + 1
        after = live[k + 1] if k + 1 < n else frozenset()
        if ins.exn is not None:
            after = after | live[index[id(ins.exn.target)]]
        if ins.argval not in after:
            out.append(instr("DELETE_FAST", ins.argval, positions=ins.positions, exn=ins.exn))
    return out


def _hashable(obj) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True
