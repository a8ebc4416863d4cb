"""``bytegraph.show(fn)``: each cache entry of a compiled function as readable
Python-like source: its guard function, its transformed function, and the
resume functions and loop bodies that transformed code calls (each with its
own entries), recursively.

The transformed functions are bytecode bytegraph emitted itself, so they come
in a few known shapes: straight-line calls of the compiled graph, loads of
the values it needs, stores of its results, the replay of side effects, the
instruction a break runs natively, and the call of the continuation through
its runner, a loop over an outlined body, the exception handler of a break
inside ``with``/``try``.  :func:`decompile` turns those shapes back into
statements by running the value stack symbolically, one expression per slot
(see :class:`_Decompiler` for what is and is not shown).  Anything else is
shown as a ``# OPNAME arg`` comment, never guessed.

Example::

    >>> import bytegraph, torch
    >>> f = bytegraph.compile(lambda x: x.sin() + 1, backend="eager")
    >>> _ = f(torch.ones(2))
    >>> "def ___guard(x)" in bytegraph.show(f, print_it=False)
    True
"""

from __future__ import annotations

import dis
import re
import sys
import types
from typing import Any, Dict, List, Optional, Set, Tuple



#: a stand-in frame's function (call_frames.stand_in) shows as this prefix
#: and its keyword names: ``stand_in(f, a, b)`` is the call ``f(a, b)``
_STAND_IN = "\x01"
#: ``codegen._Ref`` (a holder of an object): its ``.obj`` shows as the object
_REF = "\x00"


def _describe_constant(value: Any, names: Dict[int, str]) -> str:
    """A readable name for an object the transformed code holds as a constant."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, tuple) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return repr(value)
    known = names.get(id(value))
    if known:
        return known
    if type(value).__name__ == "_Ref" and hasattr(value, "obj"):
        return _REF + _describe_constant(value.obj, names)
    code = getattr(value, "__code__", None)
    if isinstance(value, types.FunctionType) and code.co_varnames[:1] == ("___bg_fn",):
        return _STAND_IN + ",".join(getattr(value, "__bytegraph_kw_names__", ()))
    owner = getattr(value, "__self__", None)
    if owner is not None and id(owner) in names:   # a graph's bound forward
        return names[id(owner)]
    if owner is not None and type(owner).__name__ == "FrameRunner" and getattr(value, "__name__", "") == "select":
        return "select"
    if type(value).__name__ == "FrameRunner":
        return "<runner>"
    if isinstance(value, types.CodeType):
        return f"<code {value.co_qualname}>"
    if type(owner).__name__ == "GraphModule" or getattr(value, "__name__", "") == "forward":
        return "graph"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if isinstance(name, str):
        module = getattr(value, "__module__", None)
        if isinstance(module, str) and module.startswith("bytegraph."):
            return name   # (bytegraph's own helpers: Continuation, list_iterator_at)
        return f"{module}.{name}" if module and module not in ("builtins",) else name
    return f"<{type(value).__name__}>"


class _Expr:
    """One value-stack slot: its text, and whether computing it called
    something (such a value, once made, must be shown before any later
    statement, or the listing would reorder calls)."""

    __slots__ = ("text", "called")

    def __init__(self, text: str, called: bool = False):
        self.text = text
        self.called = called

    def __repr__(self):  # pragma: no cover - debugging
        return f"_Expr({self.text!r})"


_NULL = "<null>"
_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
             "JUMP", "JUMP_NO_INTERRUPT", "RERAISE", "RAISE_VARARGS"}
_SKIPPED = {"RESUME", "NOP", "PRECALL", "CACHE", "EXTENDED_ARG", "MAKE_CELL", "COPY_FREE_VARS", "NOT_TAKEN",
            "END_FOR", "TO_BOOL"}
#: the operator a binary instruction shows, by opcode
_OPERATORS = {
    "BINARY_OP": lambda ins: ins.argrepr,
    "COMPARE_OP": lambda ins: ins.argrepr.replace("bool(", "").rstrip(")"),   # (3.13: "bool(==)")
    "IS_OP": lambda ins: "is not" if ins.arg else "is",
    "CONTAINS_OP": lambda ins: "not in" if ins.arg else "in",
}
_JUMP_TESTS = {"FALSE": "not {}", "TRUE": "{}", "NONE": "{} is None", "NOT_NONE": "{} is not None"}


class _Decompiler:
    """Transformed code back to statements, by running its value stack
    symbolically (one :class:`_Expr` per slot).

    bytegraph's temporaries (``___bg_*`` locals) are not statements of their
    own when they hold a plain value (a name, an attribute, an item, a
    constant): their uses show the value; their clearing (``= None``,
    ``del``) is not shown.  A user's local is shown as assigned and cleared.
    Jumps show as ``goto``; an exception handler's entry says which
    instructions it covers.  An instruction of no shape bytegraph emits is a
    ``# OPNAME`` comment, never guessed.
    """

    def __init__(self, code: types.CodeType, names: Dict[int, str]):
        self.code = code
        self.names = names
        self.stack: List[_Expr] = []
        self.out: List[str] = []
        #: what a load of a temporary shows (its plain value, or its name once assigned)
        self.shown: Dict[str, str] = {}
        #: temporaries assigned by a statement of the listing
        self.assigned: Dict[str, int] = {}
        self.kw_names: tuple = ()
        #: the tuples of names LOAD_CONST pushed, by their text: on 3.13 CALL_KW
        #: takes its keyword names from the stack
        self.const_tuples: Dict[str, tuple] = {}
        self.results = 0
        #: the stack at a jump, by its target
        self.at_target: Dict[int, List[_Expr]] = {}
        try:
            self.handlers = list(dis.Bytecode(code).exception_entries)
        except Exception:  # pragma: no cover - every supported Python has them
            self.handlers = []
        self.at_try: Dict[int, List[_Expr]] = {}
        #: temporaries given a value at more than one place: shown by name
        #: (a loop's state, for one: inlining its first value would be wrong later)
        self.reassigned = _stored_more_than_once(code)
        self.offset = 0
        self.loads: Dict[str, List[int]] = {}
        self.back_jumps: List[Tuple[int, int]] = []
        for ins in dis.get_instructions(code):
            if ins.opname.startswith("LOAD_FAST") or ins.opname == "LOAD_DEREF":
                for n in (ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)):
                    self.loads.setdefault(n, []).append(ins.offset)
            if "JUMP" in ins.opname and isinstance(ins.argval, int) and ins.argval < ins.offset:
                self.back_jumps.append((ins.offset, ins.argval))

    # -- the stack ---------------------------------------------------------------
    def push(self, text: str, called: bool = False) -> None:
        self.stack.append(_Expr(text, called))

    def pop(self, n: int = 1) -> List[_Expr]:
        if n <= 0:
            return []
        if len(self.stack) < n:
            items = [_Expr("?")] * (n - len(self.stack)) + self.stack
            self.stack = []
            return items
        items, self.stack = self.stack[-n:], self.stack[:-n]
        return items

    def texts(self, n: int) -> List[str]:
        return [e.text for e in self.pop(n)]

    # -- statements ----------------------------------------------------------------
    def emit(self, statement: str) -> None:
        """Show a statement, after every call made before it whose value still waits on the stack."""
        for i, item in enumerate(self.stack):
            if item.called:
                name = f"_r{self.results}"
                self.results += 1
                self.out.append(f"{name} = {item.text}")
                self.stack[i] = _Expr(name)
        self.out.append(statement)

    def keep_values_of(self, name: str) -> None:
        """``name`` is about to change: values on the stack that read it are shown now."""
        pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
        for i, item in enumerate(self.stack):
            if pattern.search(item.text) and item.text != name or item.text == name:
                if item.text == "?":
                    continue
                held = f"_r{self.results}"
                self.results += 1
                self.out.append(f"{held} = {item.text}")
                self.stack[i] = _Expr(held)
        for temp, text in list(self.shown.items()):
            if temp != name and text != temp and pattern.search(text) and self.read_later(temp):
                self.emit(f"{temp} = {text}")   # (a temporary that holds a value read from it)
                self.assigned[temp] = 1
                self.shown[temp] = temp

    def read_later(self, name: str) -> bool:
        """May ``name`` be loaded after the current instruction (straight on, or around a loop)?"""
        return any(o > self.offset or any(src > self.offset and target <= o for src, target in self.back_jumps)
                   for o in self.loads.get(name, ()))

    def assign_temp(self, temp: str, value: _Expr) -> None:
        """A temporary gets ``value``: shown through its uses if plain, else as an assignment."""
        if value.text == "None" and temp in self.shown:
            return   # (cleared: its uses before showed what it held)
        if not value.called and value.text != "?" and temp not in self.reassigned:
            self.shown[temp] = value.text
            return
        if temp in self.assigned:
            self.keep_values_of(temp)   # (values on the stack that it held stay what they were)
        self.assigned[temp] = 1
        self.emit(f"{temp} = {value.text}")
        self.shown[temp] = temp

    def store(self, name: str, value: _Expr) -> None:
        if name.startswith("___bg_"):
            self.assign_temp(name, value)
            return
        self.keep_values_of(name)
        self.emit(f"{name} = {value.text}")

    def load(self, name: str) -> None:
        self.push(self.shown.get(name, name))

    # -- control flow ----------------------------------------------------------------
    def jump_to(self, target: int) -> None:
        self.at_target.setdefault(target, [_Expr(e.text) for e in self.stack])

    def arrive(self, ins, previous_op: Optional[str]) -> None:
        """Entering ``ins``: a label, an exception handler's start, a try region's start."""
        offset = ins.offset
        for h in self.handlers:
            if h.start == offset and offset not in self.at_try:
                self.at_try[offset] = [_Expr(e.text) for e in self.stack]
        handled = [h for h in self.handlers if h.target == offset]
        if handled:
            h = handled[0]
            base = self.at_try.get(h.start, [])[:h.depth]
            covered = ", ".join(f"{x.start}-{x.end}" for x in handled)
            self.out.append(f"# label {offset}: on an exception raised at offsets {covered}:")
            self.stack = [_Expr(e.text) for e in base] + ([_Expr("<lasti>")] if h.lasti else []) \
                + [_Expr("<exception>")]
            return
        if ins.is_jump_target:
            if previous_op not in _TERMINAL:
                self.emit(f"# label {offset}:")   # (control merges: values made before are shown first)
            else:
                self.out.append(f"# label {offset}:")
                self.stack = [_Expr(e.text) for e in self.at_target.get(offset, [])]

    # -- one instruction -----------------------------------------------------------------
    def step(self, ins) -> None:
        op, arg, val = ins.opname, ins.arg, ins.argval
        if op in _SKIPPED:
            return
        handler = getattr(self, "op_" + op, None)
        if handler is not None:
            handler(ins, arg, val)
        elif op in _OPERATORS:
            self.binary(ins)
        elif op.startswith(("POP_JUMP", "JUMP")):
            self.jump(ins, op, val)
        elif op.startswith("LOAD_FAST") and isinstance(val, tuple):      # LOAD_FAST_LOAD_FAST (3.13)
            for name in val:
                self.load(str(name))
        elif op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF", "LOAD_CLOSURE",
                    "LOAD_NAME", "LOAD_FAST_AND_CLEAR"):
            self.load(str(val))
        elif op in ("STORE_FAST", "STORE_DEREF", "STORE_GLOBAL", "STORE_NAME"):
            (value,) = self.pop()
            self.store(str(val), value)
        elif op in ("DELETE_FAST", "DELETE_DEREF", "DELETE_GLOBAL", "DELETE_NAME"):
            if not str(val).startswith("___bg_"):
                self.keep_values_of(str(val))
                self.emit(f"del {val}")
        else:
            self.unknown(ins)

    def unknown(self, ins) -> None:
        self.emit(f"# {ins.opname} {ins.argrepr}".rstrip())
        try:
            effect = dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None)
        except ValueError:
            effect = 0
        if effect < 0:
            self.pop(-effect)
        for _ in range(max(0, effect)):
            self.push("?")

    def jump(self, ins, op: str, target) -> None:
        if op.startswith("POP_JUMP"):
            (cond,) = self.texts(1)
            kind = op.split("_IF_")[-1]
            self.jump_to(target)
            self.emit(f"if {_JUMP_TESTS.get(kind, '{}').format(cond)}: goto {target}")
        else:
            self.jump_to(target)
            self.emit(f"goto {target}")

    def op_PUSH_NULL(self, ins, arg, val):
        self.push(_NULL)

    def op_LOAD_GLOBAL(self, ins, arg, val):
        if arg is not None and arg & 1 and sys.version_info < (3, 13):
            self.push(_NULL)
            self.push(str(val))
        else:
            self.push(str(val))
            if arg is not None and arg & 1:
                self.push(_NULL)

    def op_LOAD_CONST(self, ins, arg, val):
        text = _describe_constant(val, self.names)
        if isinstance(val, tuple) and all(isinstance(v, str) for v in val):
            self.const_tuples[text] = val
        self.push(text)

    op_LOAD_SMALL_INT = op_LOAD_CONST

    def op_RETURN_CONST(self, ins, arg, val):
        self.emit(f"return {_describe_constant(val, self.names)}")

    def op_LOAD_ATTR(self, ins, arg, val):
        (obj,) = self.texts(1)
        if obj.startswith(_REF) and val == "obj":
            self.push(obj[1:])
        else:
            self.push(f"{obj}.{val}")
        if ins.opname == "LOAD_METHOD" or "NULL|self" in ins.argrepr:
            self.push(_NULL)   # (the call's hidden self, or NULL: shows as nothing)

    op_LOAD_METHOD = op_LOAD_ATTR

    def op_STORE_FAST_LOAD_FAST(self, ins, arg, val):
        (value,) = self.pop()
        self.store(str(val[0]), value)
        self.load(str(val[1]))

    def op_STORE_FAST_STORE_FAST(self, ins, arg, val):
        top, below = self.pop(2)[::-1]
        self.store(str(val[0]), top)
        self.store(str(val[1]), below)

    def op_STORE_ATTR(self, ins, arg, val):
        obj, value = self.texts(2)[::-1]
        self.emit(f"{obj}.{val} = {value}")

    def op_DELETE_ATTR(self, ins, arg, val):
        (obj,) = self.texts(1)
        self.emit(f"del {obj}.{val}")

    def op_STORE_SUBSCR(self, ins, arg, val):
        key, obj, value = self.texts(3)[::-1]
        self.emit(f"{obj}[{key}] = {value}")

    def op_DELETE_SUBSCR(self, ins, arg, val):
        obj, key = self.texts(2)
        self.emit(f"del {obj}[{key}]")

    def op_BINARY_SUBSCR(self, ins, arg, val):
        obj, key = self.texts(2)
        self.push(f"{obj}[{key}]")

    def op_BINARY_SLICE(self, ins, arg, val):
        obj, lo, hi = self.texts(3)
        self.push(f"{obj}[{'' if lo == 'None' else lo}:{'' if hi == 'None' else hi}]")

    def op_BUILD_SLICE(self, ins, arg, val):
        parts = ["" if t == "None" else t for t in self.texts(arg)]
        self.push(":".join(parts))

    def binary(self, ins) -> None:
        left, right = self.texts(2)
        operator = _OPERATORS[ins.opname](ins)
        self.push(f"{left}[{right}]" if operator == "[]" else f"{left} {operator} {right}")   # ([]: 3.14's subscript)

    def op_UNARY_NOT(self, ins, arg, val):
        (v,) = self.texts(1)
        self.push(f"not {v}")

    def op_UNARY_NEGATIVE(self, ins, arg, val):
        (v,) = self.texts(1)
        self.push(f"-{v}")

    def op_GET_ITER(self, ins, arg, val):
        (v,) = self.pop()
        self.push(f"iter({v.text})", v.called)

    def op_FOR_ITER(self, ins, arg, val):
        # the next item, or (exhausted) the iterator popped and a jump past the loop
        (it,) = self.stack[-1:] or [_Expr("?")]
        self.at_target.setdefault(val, [_Expr(e.text) for e in self.stack[:-1]])
        name = f"_item{self.results}"
        self.results += 1
        self.emit(f"{name} = next({it.text})   # exhausted: goto {val}")
        self.push(name)

    def op_BUILD_TUPLE(self, ins, arg, val):
        items = self.texts(arg)
        self.push(f"({', '.join(items)}{',' if len(items) == 1 else ''})")

    def op_BUILD_LIST(self, ins, arg, val):
        self.push(f"[{', '.join(self.texts(arg))}]")

    def op_BUILD_SET(self, ins, arg, val):
        items = self.texts(arg)
        self.push("{" + ", ".join(items) + "}" if items else "set()")

    def op_BUILD_MAP(self, ins, arg, val):
        items = self.texts(2 * arg)
        self.push("{" + ", ".join(f"{items[i]}: {items[i + 1]}" for i in range(0, len(items), 2)) + "}")

    def op_BUILD_CONST_KEY_MAP(self, ins, arg, val):
        (keys,) = self.pop()
        values = self.texts(arg)
        names = self.const_tuples.get(keys.text)
        if names is None:
            self.push(f"dict(zip({keys.text}, ({', '.join(values)})))")
        else:
            self.push("{" + ", ".join(f"{k!r}: {v}" for k, v in zip(names, values)) + "}")

    def _extend(self, ins, how: str) -> None:
        (value,) = self.texts(1)
        if self.stack and len(self.stack) >= ins.arg:
            target = self.stack[-ins.arg]
            self.stack[-ins.arg] = _Expr(f"{how}({target.text}, {value})", target.called)

    def op_LIST_EXTEND(self, ins, arg, val):
        self._extend(ins, "extended")

    def op_LIST_APPEND(self, ins, arg, val):
        self._extend(ins, "appended")

    def op_DICT_UPDATE(self, ins, arg, val):
        self._extend(ins, "updated")

    op_DICT_MERGE = op_DICT_UPDATE
    op_SET_UPDATE = op_LIST_EXTEND

    def op_KW_NAMES(self, ins, arg, val):
        self.kw_names = tuple(self.code.co_consts[arg])   # (dis shows no argval for it on 3.11)

    def op_CALL(self, ins, arg, val):
        if ins.opname == "CALL_KW":   # (3.13: the names are on top of the stack)
            (names_text,) = self.texts(1)
            self.kw_names = self.const_tuples.get(names_text, ())
        values = self.texts(arg)
        n_pos = len(values) - len(self.kw_names)
        parts = values[:n_pos] + [f"{k}={v}" for k, v in zip(self.kw_names, values[n_pos:])]
        self.kw_names = ()
        callee = [t for t in self.texts(2) if t != _NULL]
        if callee and callee[0] != "?" and len(callee) == 2:
            parts = [callee[1]] + parts   # (a method's self: an argument of the function below it)
        self.push(self._call(callee[0] if callee else "?", parts), True)

    op_CALL_KW = op_CALL

    def _call(self, fn: str, parts: List[str]) -> str:
        if fn.startswith(_STAND_IN):
            # a stand-in frame runs the call of its first argument (keywords last)
            kw = [k for k in fn[1:].split(",") if k]
            real, rest = (parts[0], parts[1:]) if parts else ("?", [])
            n_pos = len(rest) - len(kw)
            return f"{real}({', '.join(rest[:n_pos] + [f'{k}={v}' for k, v in zip(kw, rest[n_pos:])])})"
        return f"{fn}({', '.join(parts)})"

    def op_CALL_FUNCTION_EX(self, ins, arg, val):
        kwargs = self.texts(1)[0] if (arg or 0) & 1 or sys.version_info >= (3, 14) else None
        (args,) = self.texts(1)
        callee = [t for t in self.texts(2) if t != _NULL]
        parts = [f"*{args}"] + ([f"**{kwargs}"] if kwargs not in (None, _NULL) else [])
        self.push(self._call(callee[0] if callee else "?", parts), True)

    def op_CALL_INTRINSIC_1(self, ins, arg, val):
        (v,) = self.texts(1)
        self.push(f"{ins.argrepr.lower()}({v})", True)

    def op_UNPACK_SEQUENCE(self, ins, arg, val):
        (value,) = self.pop()
        if value.called or not value.text.isidentifier():
            name = f"_out{self.results}"
            self.results += 1
            self.emit(f"{name} = {value.text}")
        else:
            name = value.text
        for i in reversed(range(arg)):
            self.push(f"{name}[{i}]")

    def op_POP_TOP(self, ins, arg, val):
        (value,) = self.pop()
        if value.called:
            self.emit(value.text)

    def op_RETURN_VALUE(self, ins, arg, val):
        (value,) = self.texts(1)
        self.emit(f"return {value}")

    def op_COPY(self, ins, arg, val):
        self.push(self.stack[-arg].text if len(self.stack) >= arg else "?")

    def op_SWAP(self, ins, arg, val):
        if len(self.stack) >= arg:
            self.stack[-1], self.stack[-arg] = self.stack[-arg], self.stack[-1]

    def op_MAKE_FUNCTION(self, ins, arg, val):
        (code_text,) = self.texts(1)
        if sys.version_info < (3, 13):
            # (3.11/3.12: defaults, keyword defaults, annotations, closure below the code, by flag)
            self.pop(bin((arg or 0) & 0xF).count("1"))
        self.push(f"<function {code_text[6:-1]}>" if code_text.startswith("<code ") else f"function({code_text})")

    def op_SET_FUNCTION_ATTRIBUTE(self, ins, arg, val):
        fn, _attribute = self.pop(2)[::-1]
        self.stack.append(fn)

    def named(self, value: _Expr) -> str:
        """``value``'s text, or, for a call used more than once, a name it is assigned to first."""
        if not value.called:
            return value.text
        name = f"_r{self.results}"
        self.results += 1
        self.emit(f"{name} = {value.text}")
        return name

    def op_BEFORE_WITH(self, ins, arg, val):
        ctx = self.named(self.pop()[0])
        self.push(f"{ctx}.__exit__")
        self.push(f"{ctx}.__enter__()", True)

    def op_WITH_EXCEPT_START(self, ins, arg, val):
        exit_fn = self.stack[-4].text if len(self.stack) >= 4 else "?"
        self.push(f"{exit_fn}(<exception>)", True)

    def op_PUSH_EXC_INFO(self, ins, arg, val):
        (exc,) = self.pop()
        self.push("<the exception handled before>")
        self.stack.append(exc)

    def op_POP_EXCEPT(self, ins, arg, val):
        self.pop()

    def op_CHECK_EXC_MATCH(self, ins, arg, val):
        (kind,) = self.texts(1)
        exc = self.stack[-1].text if self.stack else "?"
        self.push(f"isinstance({exc}, {kind})")

    def op_RERAISE(self, ins, arg, val):
        (exc,) = self.texts(1)
        if arg:
            self.pop()
        self.emit(f"raise {exc}")

    def op_RAISE_VARARGS(self, ins, arg, val):
        items = self.texts(arg)
        self.emit("raise" if not items else f"raise {items[0]}" + (f" from {items[1]}" if len(items) > 1 else ""))

    def op_LOAD_ASSERTION_ERROR(self, ins, arg, val):
        self.push("AssertionError")

    def run(self) -> List[str]:
        previous = None
        for ins in dis.get_instructions(self.code):
            self.offset = ins.offset
            self.arrive(ins, previous)
            self.step(ins)
            previous = ins.opname
        return _merge_clears(self.out)


def _stored_more_than_once(code: types.CodeType) -> Set[str]:
    """Locals that more than one instruction stores a value (not a clearing None) to."""
    counts: Dict[str, int] = {}
    previous = None
    for ins in dis.get_instructions(code):
        if ins.opname.startswith("STORE_FAST") or ins.opname == "STORE_DEREF":
            clearing = previous is not None and previous.opname == "LOAD_CONST" and previous.argval is None
            for name in (ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)):
                if not clearing:
                    counts[name] = counts.get(name, 0) + 1
        previous = ins
    return {name for name, n in counts.items() if n > 1}


def _merge_clears(lines: List[str]) -> List[str]:
    """``x = None`` for consecutive locals (the frame letting them go) as one line."""
    merged: List[str] = []
    run: List[str] = []
    for line in lines + [""]:
        name, sep, value = line.partition(" = ")
        if sep and value == "None" and name.isidentifier():
            run.append(name)
            continue
        if run:
            merged.append(" = ".join(run) + " = None")
            run = []
        if line:
            merged.append(line)
    return merged


def decompile(code: types.CodeType, names: Optional[Dict[int, str]] = None) -> List[str]:
    """The statements of transformed ``code`` (bytegraph's own emitted shapes).

    ``names`` maps ``id(constant)`` to the name to show it by (graph 0, ...).

    Example::

        >>> def f(x):
        ...     y = x + 1
        ...     return y
        >>> decompile(f.__code__)
        ['y = x + 1', 'return y']
    """
    return _Decompiler(code, names or {}).run()


def _continuations(code: types.CodeType) -> List[Any]:
    """The runners whose ``select`` the transformed ``code`` calls (its continuations)."""
    found = []
    for const in code.co_consts:
        owner = getattr(const, "__self__", None)
        if owner is not None and type(owner).__name__ == "FrameRunner" and owner not in found:
            found.append(owner)
    return found


def _entry_text(entry, title: str, depth: int, seen: Set[int]) -> List[str]:
    pad = "    " * depth
    lines = [f"{pad}=== {title} ==="]
    source = getattr(entry.guard, "source", None) or "(no guard source)"
    lines += [f"{pad}# guard"] + [pad + line for line in source.rstrip().splitlines()]
    if entry.code is None:
        lines.append(f"{pad}# runs the original function" + (" (it raises for these inputs)" if entry.raises else ""))
        return lines
    names: Dict[int, str] = {}
    for i, gm in enumerate(entry.graphs):
        names[id(gm)] = f"graph_{i}"
    lines.append(f"{pad}# transformed {entry.code.co_qualname}")
    lines += [f"{pad}def {entry.code.co_name}({', '.join(entry.code.co_varnames[:entry.code.co_argcount])}):"]
    try:
        statements = decompile(entry.code, names)
    except Exception as e:   # (showing must never fail; the bytecode is in the trace)
        statements = [f"# (could not be decompiled: {type(e).__name__}: {e})"]
    lines += [f"{pad}    {stmt}" for stmt in statements]
    for i, gm in enumerate(entry.graphs):
        lines.append(f"{pad}# graph_{i}")
        lines += [pad + line for line in gm.code.strip().splitlines()]
    for runner in _continuations(entry.code):
        if id(runner) in seen:
            continue
        seen.add(id(runner))
        for k, sub in enumerate(list(runner._entries)):
            name = sub.function[0] if hasattr(sub, "function") else "continuation"
            lines += _entry_text(sub, f"{name}, entry {k}", depth + 1, seen)
    return lines


def show(fn, print_it: bool = True) -> str:
    """Each entry of compiled ``fn`` (a function, method or module
    ``bytegraph.compile`` returned): guard, transformed function as Python-like
    source, graphs, and its continuations' entries.  Printed unless
    ``print_it=False``; returned either way.

    Example::

        >>> import bytegraph, torch
        >>> f = bytegraph.compile(lambda x: x * 2, backend="eager")
        >>> _ = f(torch.ones(1))
        >>> text = bytegraph.show(f, print_it=False)
        >>> "graph_0(x)" in text
        True
    """
    from .api import _cache_of
    cache = _cache_of(fn)
    if cache is None:
        raise TypeError(f"show() expects what bytegraph.compile returned, not {type(fn).__name__}")
    lines: List[str] = []
    if not cache._entries:
        lines.append(f"{cache._fn.__qualname__}: no entries yet (call it first)")
    seen: Set[int] = set()
    for i, entry in enumerate(cache._entries):
        lines += _entry_text(entry, f"{cache._fn.__qualname__}, entry {i}", 0, seen)
    text = "\n".join(lines)
    if print_it:
        print(text)
    return text
