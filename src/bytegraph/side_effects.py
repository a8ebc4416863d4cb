"""The side-effect table: identity of mutable objects and buffered mutations.

Nothing the traced program mutates is changed while tracing.  Instead:

* every pre-existing mutable object the trace touches is registered here by
  the identity of the real object, so one object is one value however it was
  reached (``track_existing`` / ``existing``; cells through ``cell_for``);
* mutations mark the value (``mutate``) or record a pending write (attributes
  via ``store_attr``, globals via ``store_global``);
* after the graph runs, codegen replays the final state of each mutated
  pre-existing object exactly once, in first-mutation order (``emit_replay``).

Objects created during the trace need no table entry: they are values with no
source, rebuilt by codegen only if something live reaches them (the single
pruning mechanism, DESIGN.md C7; see ``codegen.live_values``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .sources import Source
from .values.base import Value
from .values.cells import CellValue, UNREAD


class SideEffects:
    def __init__(self, guards=None):
        #: the trace's guards (aliasing of cells reached two ways is guarded here)
        self.guards = guards
        self._existing: Dict[int, Value] = {}
        #: ids of pre-existing values tracked without a source (see _check_replayable)
        self._sourceless: set = set()
        self._keepalive: List[object] = []
        #: pre-existing values whose state changed, in first-mutation order
        self.mutated: Dict[Value, None] = {}
        #: pending attribute writes: value -> {name: new value or DELETED}
        self.attr_writes: Dict[Value, Dict[str, Value]] = {}
        #: (id(obj), name) of attribute writes replayed through object.__setattr__/__delattr__
        self.generic_attrs: set = set()
        #: (id(obj), name) of attributes deleted in the trace (an object's dict order changed)
        self.deleted_attrs: set = set()
        #: pending global writes: (id(globals dict), name) -> (globals dict, name, value)
        self.global_writes: Dict[Tuple[int, str], Tuple[dict, str, Value]] = {}
        #: deleted globals that this call had set first (see ``delete_global``)
        self.globals_made_absent: set = set()
        #: order of all pending effects (keys into the tables above)
        self.order: Dict[object, None] = {}
        #: hooks registered on pre-existing tensors: (tensor, hook fn, handle value)
        self.tensor_hooks: List[Tuple[Value, Value, Value]] = []
        #: library calls whose only effect is on objects no traced code reads, run in order after the graph
        self.deferred_calls: List[Tuple[object, List[Value]]] = []
        #: id(class) -> names the trace assigned or deleted on that pre-existing class
        self.class_dirty: Dict[int, set] = {}
        #: id(class) -> the one ClassValue class-attribute writes are kept on
        self._class_values: Dict[int, Value] = {}
        #: id(template class) -> its TemplateClassValue: classes made by class statements in the trace
        self.templates: Dict[int, Value] = {}
        #: weak references to those template classes (to check they were freed)
        self.template_refs: list = []
        #: warnings.warn calls captured (see values/warnings_calls.py): what their guard checks
        self.warn_guards: List[tuple] = []
        #: counts every effect recorded (see :meth:`_effect`): a repeated block
        #: is reused only while no effect happened since it was recorded
        self.version = 0
        #: while code is traced only to check it (an autograd Function's
        #: forward), every value it mutates or sets an attribute on, with a
        #: source or not (see autograd_function._Sandbox)
        self.watch: Optional[List[Value]] = None

    # -- identity ------------------------------------------------------------
    def existing(self, obj) -> Optional[Value]:
        return self._existing.get(id(obj))

    def existing_values(self) -> List[Value]:
        """Every pre-existing object the trace met (lists, dicts, sets, objects, cells, modules)."""
        return list(self._existing.values())

    def track_existing(self, obj, value: Value) -> None:
        self._existing[id(obj)] = value
        self._keepalive.append(obj)
        if value.source is None:
            self._sourceless.add(id(value))

    def alias_new(self, obj, value: Value) -> None:
        """``obj`` is a stand-in the trace made for ``value``, an object made
        in the trace (a class statement's template, see values/class_build.py):
        meeting ``obj`` is meeting ``value``, whose changes codegen rebuilds."""
        self._existing[id(obj)] = value
        self._keepalive.append(obj)

    def _check_replayable(self, value: Value) -> None:
        """A pre-existing object met without a source cannot be reached by
        the replay: changing it in the trace would be lost."""
        if id(value) in self._sourceless and value.source is None:
            from .errors import Unsupported
            raise Unsupported(f"changing a pre-existing {value.type_name()} reached without a source",
                              kind="unsupported_mutation")

    def cell_for(self, real_cell, name: str, source: Optional[Source]) -> CellValue:
        """The one :class:`CellValue` for a pre-existing cell object (C1)."""
        known = self._existing.get(id(real_cell))
        if known is not None:
            # e.g. the root's free variable reached again through a helper's
            # closure: later calls must share the cell the same way
            if self.guards is not None and source is not None and known.source is not None \
                    and source != known.source:
                from .guards import Guard
                self.guards.add(Guard("ALIAS", source, others=(known.source,)))
            return known
        cell = CellValue(name, source, contents=UNREAD, real_cell=real_cell)
        self.track_existing(real_cell, cell)
        return cell

    # -- mutations -------------------------------------------------------------
    def mutate(self, value: Value) -> None:
        """Note that ``value``'s state changes; only pre-existing objects need replay."""
        if value.source is not None:
            self.version += 1
        if self.watch is not None:
            self.watch.append(value)
        self._check_replayable(value)
        if value.source is not None and value not in self.mutated:
            self.mutated[value] = None
            self.order[("state", id(value))] = None

    def store_attr(self, obj: Value, name: str, value: Value, generic: bool = False) -> None:
        """``generic``: the write is ``object.__setattr__``'s (or
        ``__delattr__``'s) under a class hook the trace already ran; it is
        replayed as that call, so the hook does not run twice."""
        self.version += 1
        if self.watch is not None:
            self.watch.append(obj)
        self._check_replayable(obj)
        self.attr_writes.setdefault(obj, {})[name] = value
        self.order[("attr", id(obj), name)] = None
        from .values.objects import DELETED
        if value is DELETED:
            self.deleted_attrs.add((id(obj), name))
        if generic:
            self.generic_attrs.add((id(obj), name))
        else:
            self.generic_attrs.discard((id(obj), name))

    def forget_attr(self, obj: Value, name: str) -> None:
        """Drop a pending write whose net effect is none (set, then deleted,
        an attribute the object did not have)."""
        self.version += 1
        writes = self.attr_writes.get(obj)
        if writes is not None and name in writes:
            del writes[name]
            self.order.pop(("attr", id(obj), name), None)
            if not writes:
                del self.attr_writes[obj]

    # -- class attributes (see values/class_attrs.py) ----------------------------
    def _class_value(self, cls) -> Value:
        known = self._class_values.get(id(cls))
        if known is None:
            from .sources import ObjectSource
            from .values.objects import ClassValue
            known = self._class_values[id(cls)] = ClassValue(cls, ObjectSource(cls, cls.__qualname__))
            self._keepalive.append(cls)
        return known

    def store_class_attr(self, cls, name: str, value: Value) -> None:
        """``cls.name = value`` (or ``DELETED``), replayed as a ``STORE_ATTR``/``DELETE_ATTR`` on the class."""
        self.version += 1
        self.class_dirty.setdefault(id(cls), set()).add(name)
        self.store_attr(self._class_value(cls), name, value)

    def pending_class_attr(self, cls, name: str) -> Optional[Value]:
        known = self._class_values.get(id(cls))
        return self.pending_attr(known, name) if known is not None else None

    def forget_class_attr(self, cls, name: str) -> None:
        """Set in this call, then deleted, a name the class did not have: the
        class is as it was (its real dict is right again for every reader)."""
        self.version += 1
        known = self._class_values.get(id(cls))
        if known is not None:
            self.forget_attr(known, name)
        self.class_dirty.get(id(cls), set()).discard(name)

    def pending_attr(self, obj: Value, name: str) -> Optional[Value]:
        writes = self.attr_writes.get(obj)
        return writes.get(name) if writes else None

    def dict_view_conflict(self, real_dict: dict, writing: bool) -> bool:
        """Whether an access by name to the namespace ``real_dict`` (an
        object's instance dict, a module's globals) would miss changes made
        through the dict value the trace holds for that same dict: a write
        (it would not show in the dict value), or a read after the dict
        value changed.  The two models of one state are not merged."""
        value = self._existing.get(id(real_dict))
        return value is not None and (writing or value in self.mutated)

    def has_pending_globals(self, f_globals: dict) -> bool:
        return any(key[0] == id(f_globals) for key in self.global_writes)

    def store_global(self, f_globals: dict, name: str, value: Value) -> None:
        self.version += 1
        self.global_writes[(id(f_globals), name)] = (f_globals, name, value)
        self.order[("global", id(f_globals), name)] = None
        self.globals_made_absent.discard((id(f_globals), name))

    def delete_global(self, f_globals: dict, name: str) -> None:
        """``del`` of a global the trace found bound (``load_global`` raised otherwise).

        One this call set first may not have existed before it: the net
        effect is "absent whatever it was", replayed as ``pop(name, None)``,
        not as a ``del`` that raises where Python did not."""
        self.version += 1
        from .values.objects import DELETED
        set_here = self.pending_global(f_globals, name) is not None
        self.store_global(f_globals, name, DELETED)
        if set_here:
            self.globals_made_absent.add((id(f_globals), name))

    def pending_global(self, f_globals: dict, name: str) -> Optional[Value]:
        hit = self.global_writes.get((id(f_globals), name))
        return hit[2] if hit else None

    def register_tensor_hook(self, tensor: Value, hook: Value) -> Value:
        """``tensor.register_hook(hook)``: registered for real right after the graph runs.

        The hook function is live (C8): it and the cells it closes over are
        rebuilt even if nothing else reaches them.
        """
        self.version += 1
        from .values.objects import HookHandleValue
        handle = HookHandleValue()
        self.tensor_hooks.append((tensor, hook, handle))
        return handle

    def emit_hook_registrations(self, cg) -> None:
        for tensor, hook, handle in self.tensor_hooks:
            cg.reconstruct(tensor)

            def push_hook(hook=hook):
                cg.reconstruct(hook)
                return 1
            cg.call_method("register_hook", push_hook)
            cg.store_in_temp(handle)

    def defer_call(self, fn, args: List[Value]) -> None:
        """Call ``fn(*args)`` after the graph, in order with the other effects.

        Only for calls whose effect nothing in the trace can observe (e.g.
        ``traceback.clear_frames`` of a traceback from native code: it clears
        the locals of frames that have finished)."""
        self.version += 1
        self.order[("call", len(self.deferred_calls))] = None
        self.deferred_calls.append((fn, list(args)))

    def has_pending(self) -> bool:
        return bool(self.mutated or self.attr_writes or self.global_writes or self.tensor_hooks
                    or self.deferred_calls)

    # -- replay ----------------------------------------------------------------
    def _effects(self):
        """Pending effects in first-mutation order: (kind, target, payload)."""
        by_id = {id(v): v for v in self.mutated}
        attr_by = {id(v): (v, w) for v, w in self.attr_writes.items()}
        for key in self.order:
            kind = key[0]
            if kind == "state":
                yield "state", by_id[key[1]], None
            elif kind == "attr":
                obj, writes = attr_by[key[1]]
                yield "attr", obj, (key[2], writes[key[2]])
            elif kind == "call":
                fn, args = self.deferred_calls[key[1]]
                yield "call", fn, args
            else:
                f_globals, name, value = self.global_writes[(key[1], key[2])]
                yield "global", f_globals, (name, value)

    def replay_roots(self) -> List[Value]:
        """Values the replay needs (their reachable new objects stay alive)."""
        from .values.objects import DELETED
        roots: List[Value] = []
        for tensor, hook, _ in self.tensor_hooks:
            roots.extend((tensor, hook))
        for kind, target, payload in self._effects():
            if kind == "state" and _is_frame_local(target):
                continue  # live only if reached (see codegen.live_values)
            if kind == "state":
                roots.extend(target.children())
                # keys a dict's replay inserts or deletes on the way (see Codegen._replay_key_ops)
                roots.extend(op[1] for op in getattr(target, "key_log", ()) if len(op) > 1)
            elif kind == "call":
                roots.extend(payload)
            else:
                value = payload[1]
                if value is not DELETED:
                    roots.append(value)
        return roots

    def emit_replay(self, cg) -> None:
        """Emit the writes: first evaluate every new state into temporaries
        (so no write can change what a later one reads), then apply them in order."""
        from .values.objects import DELETED
        from .codegen import is_live
        effects = [e for e in self._effects()
                   if not (e[0] == "state" and _is_frame_local(e[1]) and not is_live(cg, e[1]))]
        staged = []
        for kind, target, payload in effects:
            if kind in ("state", "attr"):
                cg.stage_target(target)
            if kind == "state" and not isinstance(target, CellValue):
                staged.append(cg.stage_new_state(target))
            elif kind == "call":
                for value in payload:
                    cg.stage_value(value)
                staged.append(None)
            else:
                value = target.contents if kind == "state" else payload[1]
                if isinstance(value, Value) and value is not DELETED:
                    cg.stage_value(value)
                staged.append(None)
        cg.replayed = False
        for (kind, target, payload), temp in zip(effects, staged):
            if kind == "state":
                if isinstance(target, CellValue):
                    target.emit_writeback(cg)
                else:
                    cg.apply_new_state(target, temp)
            elif kind == "call":
                cg.push_callable(target)
                for value in payload:
                    cg.reconstruct(value)
                cg.call(len(payload))
                cg.emit("POP_TOP")
            elif kind == "attr":
                name, value = payload
                if (id(target), name) in self.generic_attrs:
                    cg.push_callable(object.__delattr__ if value is DELETED else object.__setattr__)
                    cg.reconstruct(target)
                    cg.load_object(name)
                    if value is not DELETED:
                        cg.reconstruct(value)
                    cg.call(2 if value is DELETED else 3)
                    cg.emit("POP_TOP")
                elif value is DELETED:
                    cg.reconstruct(target)
                    cg.emit("DELETE_ATTR", name)
                else:
                    cg.reconstruct(value)
                    cg.reconstruct(target)
                    cg.emit("STORE_ATTR", name)
            else:
                name, value = payload
                if value is DELETED and (id(target), name) in self.globals_made_absent:
                    cg.load_object(target)

                    def key_and_default(name=name):
                        cg.load_object(name)
                        cg.load_object(None)
                        return 2
                    cg.call_method("pop", key_and_default)
                    cg.emit("POP_TOP")
                elif target is cg.root_globals:
                    if value is DELETED:
                        cg.emit("DELETE_GLOBAL", name)
                    else:
                        cg.reconstruct(value)
                        cg.emit("STORE_GLOBAL", name)
                else:
                    if value is DELETED:
                        cg.load_object(target)
                        cg.load_object(name)
                        cg.emit("DELETE_SUBSCR")
                    else:
                        cg.reconstruct(value)
                        cg.load_object(target)
                        cg.load_object(name)
                        cg.emit("STORE_SUBSCR")
        cg.replayed = True


def _is_frame_local(value: Value) -> bool:
    return isinstance(value, CellValue) and value.is_root_cell and value.source.closure_index is None

