"""Handlers for locals, cells, globals, attributes and imports.

Cells follow one path in every frame (DESIGN.md C2): ``MAKE_CELL`` and
``COPY_FREE_VARS`` put a :class:`CellValue` in the locals under the variable's
name, ``LOAD_CLOSURE`` pushes it exactly like ``LOAD_FAST``, and the ``*_DEREF``
opcodes read, write and empty its contents through the side-effect table.
"""

from __future__ import annotations

import sys

from ..errors import Unsupported
from ..guards import Guard
from ..sources import (BuiltinSource, GlobalSource, ItemSource, LocalSource, ObjectSource, RootCellSource)
from ..bytecode import SPEC
from ..values.base import NULL, NullValue, Value, check_release, finalizer_reachable, has_finalizer
from ..values.cells import CellValue, EMPTY
from ..values.objects import DELETED, PythonModuleValue
from .registry import serves



class _NamespaceValue(Value):
    """What ``LOAD_LOCALS`` pushes in a class body: the namespace the trace
    keeps, consumed at once by ``LOAD_FROM_DICT_OR_*`` (never rebuilt)."""

    def reconstruct(self, cg):
        raise Unsupported("a class body's namespace on the stack", kind="unreconstructable")


_NAMESPACE = _NamespaceValue()

_PROLOGUE_OPS = frozenset({"MAKE_CELL", "COPY_FREE_VARS", "NOP", "EXTENDED_ARG"})


class LocalOps:
    # -- fast locals ---------------------------------------------------------
    def load_local(self, name: str):
        value = self.locals.get(name)
        if value is None:
            if name in self.unrealized:
                obj, source = self.unrealized.pop(name)
                value = self.wrap(obj, source)
                self.locals[name] = value
            else:
                if self.state_source is not None and name not in self.state_names:
                    self.guards.add(Guard("DICT_CONTAINS", self.state_source, (name, False)))
                self.raise_python_exception(UnboundLocalError(
                    f"cannot access local variable '{name}' where it is not associated with a value"))
        return value

    def LOAD_FAST(self, ins):
        self.stack.append(self.load_local(ins.argval))

    def STORE_FAST(self, ins):
        if isinstance(self.stack[-1], NullValue):
            # 3.12+ inlined comprehension restoring a variable that was unbound
            # before it (see LOAD_FAST_AND_CLEAR)
            self.stack.pop()
            self.locals.pop(ins.argval, None)
            return
        self._dropping_local(ins.argval, replacement=self.stack[-1])
        self.unrealized.pop(ins.argval, None)
        self.locals[ins.argval] = self.stack.pop()

    @serves(since=(3, 12))
    def LOAD_FAST_AND_CLEAR(self, ins):
        # an inlined comprehension saving the outer binding of its variable
        # (NULL if unbound) and unbinding it; STORE_FAST puts it back after
        name = ins.argval
        if name in self.unrealized:
            self.load_local(name)
        value = self.locals.pop(name, None)
        self.stack.append(NULL if value is None else value)

    def DELETE_FAST(self, ins):
        self._dropping_local(ins.argval)
        self.load_local(ins.argval)
        del self.locals[ins.argval]

    def _held_elsewhere(self, name: str, old) -> bool:
        """Whether a local other than ``name`` holds ``old`` itself or as an
        item of a list, tuple, dict or set: dropping ``name``'s reference then
        frees nothing.  Only containers count, whose items are references they
        keep: an exhausted iterator, say, still lists its sequence among its
        children, but CPython's has dropped it."""
        from ..values.containers import BaseListValue, DictValue, SetValue
        for other, v in self.locals.items():
            if other == name or v is None:
                continue
            if v is old:
                return True
            if isinstance(v, (BaseListValue, DictValue, SetValue)):
                items = v.children()
                items = items if isinstance(items, (list, tuple)) else tuple(items)
                # (a long container is not searched: this runs at every store)
                if len(items) <= 64 and any(c is old for c in items):
                    return True
        return False

    def _dropping_local(self, name: str, replacement=None) -> None:
        """Rebinding a local that holds an object with a finalizer may run it
        at once in eager: the frame breaks right after this instruction, where
        the continuation drops the old object natively (see
        ``BreakEmitter.release_rebound_arguments``)."""
        if name.startswith("___bg_"):
            return  # a generated prologue moving an argument onto the stack drops nothing
        old = self.locals.get(name)
        if old is not None and replacement is not None and (
                old is replacement or any(c is old for c in replacement.children())):
            return  # the new value holds the old one (``node = Node(node)``): nothing is freed
        if old is not None and not old.is_constant() and self._held_elsewhere(name, old):
            # (another local holds it: ``prev = d`` once ``d[1] = prev``; the
            # walk below would cost the whole chain at every step, quadratic)
            return
        obj = finalizer_reachable(old) if old is not None else None
        if obj is None and old is None and name in self.unrealized \
                and has_finalizer(self.unrealized[name][0]):
            obj = self.unrealized[name][0]
        if obj is not None:
            self.break_next = Unsupported(
                f"dropping a reference to a {type(obj).__qualname__} object, which has a finalizer",
                kind="finalizer", hint="the code after it runs natively, where the finalizer runs on time")

    # -- cells -----------------------------------------------------------------
    def MAKE_CELL(self, ins):
        name = ins.argval
        initial = EMPTY
        if name in self.locals or name in self.unrealized:
            if self.is_root and name in self.unrealized:
                initial = self.wrap(self.unrealized.pop(name)[0], LocalSource(name, is_cell=True))
            else:
                initial = self.locals[name]
        # Only the prologue's cells are the real frame's (reachable with
        # LOAD_CLOSURE).  A 3.12+ inlined comprehension whose variable is a
        # cell makes its own after LOAD_FAST_AND_CLEAR saved the frame's one:
        # that cell is new, and writes to it must not reach the frame's cell.
        source = RootCellSource(name, None) if self.is_root and self._in_prologue() else None
        self.locals[name] = CellValue(name, source, contents=initial)

    def _in_prologue(self) -> bool:
        """The current instruction belongs to the code's leading prologue
        (``MAKE_CELL``/``COPY_FREE_VARS`` before the body's first instruction)."""
        return all(i.opname in _PROLOGUE_OPS for i in self.instrs[:self.ip - 1])

    def COPY_FREE_VARS(self, ins):
        names = self.code.co_freevars
        if self.is_root:
            real = self.trace.fn.__closure__
            for i, name in enumerate(names):
                self.locals[name] = self.side_effects.cell_for(real[i], name, RootCellSource(name, i))
        else:
            for name, cell in zip(names, self.closure):
                self.locals[name] = cell

    @serves(until=(3, 12))
    def LOAD_CLOSURE(self, ins):
        self.stack.append(self.locals[ins.argval])

    def _check_own_cell(self, name: str) -> None:
        """Reading or deleting an empty cell of the frame's own variables is
        an UnboundLocalError (a free variable's is a NameError, see CellValue.read)."""
        if name in self.code.co_cellvars and self.locals[name].contents is EMPTY:
            self.raise_python_exception(UnboundLocalError(
                f"cannot access local variable '{name}' where it is not associated with a value"))

    def LOAD_DEREF(self, ins):
        self._check_own_cell(ins.argval)
        self.stack.append(self.locals[ins.argval].read(self))

    def STORE_DEREF(self, ins):
        self.locals[ins.argval].write(self, self.stack.pop())

    def DELETE_DEREF(self, ins):
        self._check_own_cell(ins.argval)
        self.locals[ins.argval].delete(self)

    # -- globals ---------------------------------------------------------------
    def load_global(self, name: str):
        f_globals = self.f_globals
        if self.side_effects.dict_view_conflict(f_globals, writing=False):
            # changed through ``module.__dict__`` in this trace (see PythonModuleValue)
            raise Unsupported(f"global {name!r} after its module's __dict__ changed", kind="unsupported_attribute")
        pending = self.side_effects.pending_global(f_globals, name)
        if pending is not None:
            if pending is DELETED:
                self.raise_python_exception(NameError(f"name '{name}' is not defined"))
            return pending
        cache = self.trace.global_cache
        key = (id(f_globals), name)
        hit = cache.get(key)
        if hit is not None:
            return hit
        root = f_globals is self.trace.fn.__globals__
        if name in f_globals:
            source = GlobalSource(name) if root else ItemSource(self.trace.globals_source(f_globals), name)
            value = self.wrap(f_globals[name], source)
        elif name in self.f_builtins:
            if root:
                self.guards.add(Guard("NOT_IN_GLOBALS", None, name))
                source = BuiltinSource(name)
            else:
                source = ItemSource(ObjectSource(self.f_builtins, "builtins"), name)
            value = self.wrap(self.f_builtins[name], source)
        else:
            self.raise_python_exception(NameError(f"name '{name}' is not defined"))
        cache[key] = value
        return value

    # -- a class body's namespace (see values/class_build.py) -------------------------
    def _namespace(self, ins) -> dict:
        if self.namespace is None:
            raise Unsupported(f"{ins.opname} outside a class body", kind="unsupported_opcode")
        return self.namespace

    def LOAD_NAME(self, ins):
        ns = self._namespace(ins)
        value = ns.get(ins.argval)
        self.stack.append(value if value is not None else self.load_global(ins.argval))

    def STORE_NAME(self, ins):
        ns = self._namespace(ins)
        old = ns.get(ins.argval)
        ns[ins.argval] = self.stack.pop()
        if old is not None:
            check_release(old)

    def DELETE_NAME(self, ins):
        ns = self._namespace(ins)
        if ins.argval not in ns:
            self.raise_python_exception(NameError(f"name '{ins.argval}' is not defined"))
        check_release(ns.pop(ins.argval))

    def SETUP_ANNOTATIONS(self, ins):
        ns = self._namespace(ins)
        if "__annotations__" not in ns:
            from ..values.containers import DictValue
            ns["__annotations__"] = DictValue()

    @serves(until=(3, 11))
    def LOAD_CLASSDEREF(self, ins):
        self._class_deref(ins)

    @serves(since=(3, 12))
    def LOAD_LOCALS(self, ins):
        # a class body's namespace, for LOAD_FROM_DICT_OR_* below
        self._namespace(ins)
        self.stack.append(_NAMESPACE)

    @serves(since=(3, 12))
    def LOAD_FROM_DICT_OR_DEREF(self, ins):
        self._pop_namespace(ins)
        self._class_deref(ins)

    def _pop_namespace(self, ins) -> None:
        """The mapping a ``LOAD_FROM_DICT_OR_*`` reads first: only the class body's own (LOAD_LOCALS)."""
        if self.stack.pop() is not _NAMESPACE:
            raise Unsupported(f"{ins.opname} on another mapping", kind="unsupported_opcode")

    def _class_deref(self, ins):
        # a free variable read in a class body: the namespace first, then the cell
        value = self._namespace(ins).get(ins.argval)
        if value is None:
            value = self.locals[ins.argval].read(self)
        self.stack.append(value)

    @serves(since=(3, 12))
    def LOAD_FROM_DICT_OR_GLOBALS(self, ins):
        self._pop_namespace(ins)
        self.LOAD_NAME(ins)

    def LOAD_BUILD_CLASS(self, ins):
        # ``__build_class__`` from the frame's builtins (never its globals); the
        # call of it then runs natively (a class body is not traced), in one break
        builtins = self.f_builtins
        if "__build_class__" not in builtins:
            self.raise_python_exception(NameError("__build_class__ not found"))
        source = ItemSource(ObjectSource(builtins, "builtins"), "__build_class__")
        self.stack.append(self.wrap(builtins["__build_class__"], source))

    def LOAD_GLOBAL(self, ins):
        value = self.load_global(ins.argval)
        if ins.arg is not None and ins.arg & 1:
            self.push_callable(value)
        else:
            self.stack.append(value)

    def push_callable(self, fn) -> None:
        """Push ``fn`` with a call's NULL beside it (below it up to 3.12, above from 3.13)."""
        if SPEC.null_after_callable:
            self.stack.append(fn)
            self.stack.append(NULL)
        else:
            self.stack.append(NULL)
            self.stack.append(fn)

    def STORE_GLOBAL(self, ins):
        if self.side_effects.dict_view_conflict(self.f_globals, writing=True):
            raise Unsupported(f"global {ins.argval!r} of a module whose __dict__ the trace holds",
                              kind="unsupported_attribute")
        self.side_effects.store_global(self.f_globals, ins.argval, self.stack.pop())

    def DELETE_GLOBAL(self, ins):
        if self.side_effects.dict_view_conflict(self.f_globals, writing=True):
            raise Unsupported(f"global {ins.argval!r} of a module whose __dict__ the trace holds",
                              kind="unsupported_attribute")
        self.load_global(ins.argval)
        self.side_effects.delete_global(self.f_globals, ins.argval)

    # -- attributes --------------------------------------------------------------
    def LOAD_ATTR(self, ins):
        obj = self.stack.pop()
        self.stack.append(obj.get_attr(self, ins.argval))

    def LOAD_METHOD(self, ins):
        # (always the bound attribute with a NULL: the call is the same)
        obj = self.stack.pop()
        self.push_callable(obj.get_attr(self, ins.argval))

    @serves(since=(3, 12))
    def LOAD_SUPER_ATTR(self, ins):
        # ``super().name`` (low bit of the oparg: for a call), ``super(C, self).name``
        # (bit 2: the two arguments are passed): the super object, then its attribute
        obj_self = self.stack.pop()
        cls = self.stack.pop()
        global_super = self.stack.pop()
        args = [cls, obj_self] if ins.arg & 2 else []
        sup = global_super.call(self, args, {})
        attr = sup.get_attr(self, ins.argval)
        if ins.arg & 1:
            self.push_callable(attr)
        else:
            self.stack.append(attr)

    def STORE_ATTR(self, ins):
        obj = self.stack.pop()
        value = self.stack.pop()
        obj.set_attr(self, ins.argval, value)

    def DELETE_ATTR(self, ins):
        self.stack.pop().del_attr(self, ins.argval)

    # -- imports -------------------------------------------------------------------
    def IMPORT_NAME(self, ins):
        fromlist = self.stack.pop().as_constant()
        level = self.stack.pop().as_constant()
        name = ins.argval
        if level != 0:
            raise Unsupported("relative import inside a compiled function", kind="unsupported_import")
        top = name.partition(".")[0]
        if name not in sys.modules:
            raise Unsupported(f"import of not-yet-imported module {name}", kind="unsupported_import",
                              hint="import it at module level")
        module = sys.modules[name] if fromlist else sys.modules[top]
        self.stack.append(PythonModuleValue(module, ObjectSource(module, module.__name__)))

    def IMPORT_FROM(self, ins):
        module = self.stack[-1]
        self.stack.append(module.get_attr(self, ins.argval))
