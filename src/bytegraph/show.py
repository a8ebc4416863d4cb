"""``bytegraph.show(fn)``: each cache entry of a compiled function as readable
Python-like source: its guard function, its transformed function, and the
resume functions and loop bodies that transformed code calls (each with its
own entries), recursively.

The transformed functions are bytecode bytegraph emitted itself, so they come
in a few known shapes: straight-line calls of the compiled graph, loads of
the values it needs, stores of its results, the replay of side effects, the
instruction a break runs natively, and the call of the continuation through
its runner.  :func:`decompile` turns those shapes back into statements by
running the value stack symbolically, one expression string per slot.
Anything else is shown as a ``# OPNAME arg`` comment, never guessed.

Example::

    >>> import bytegraph, torch
    >>> f = bytegraph.compile(lambda x: x.sin() + 1, backend="eager")
    >>> _ = f(torch.ones(2))
    >>> "def ___guard(x)" in bytegraph.show(f, print_it=False)
    True
"""

from __future__ import annotations

import dis
import types
from typing import Any, Dict, List, Optional, Set



def _describe_constant(value: Any, names: Dict[int, str]) -> str:
    """A readable name for an object the transformed code holds as a constant."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, tuple) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return repr(value)
    known = names.get(id(value))
    if known:
        return known
    if type(value).__name__ == "_Ref" and hasattr(value, "obj"):   # (codegen's holder of an object: ``.obj``)
        return "\x00" + _describe_constant(value.obj, names)
    owner = getattr(value, "__self__", None)
    if owner is not None and id(owner) in names:   # a graph's bound forward
        return names[id(owner)]
    if owner is not None and type(owner).__name__ == "FrameRunner" and getattr(value, "__name__", "") == "select":
        return "select"
    if isinstance(value, types.CodeType):
        return f"<code {value.co_qualname}>"
    if type(owner).__name__ == "GraphModule" or getattr(value, "__name__", "") == "forward":
        return "graph"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if isinstance(name, str):
        module = getattr(value, "__module__", None)
        return f"{module}.{name}" if module and module not in ("builtins",) else name
    return f"<{type(value).__name__}>"


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
    names = names or {}
    stack: List[str] = []
    out: List[str] = []
    #: the expression each local was last set to: a value still on the stack
    #: when its local is overwritten or deleted is shown as that expression
    assigned: Dict[str, str] = {}

    def detach(name: str) -> None:
        # A value still on the stack when its local changes: shown as the
        # expression it was set to, or, for a call (which would read as made
        # twice), as the name in parentheses: "what the local held then".
        value = assigned.get(name, name)
        for i, item in enumerate(stack):
            if item == name:
                stack[i] = value if "(" not in value else f"({name})"
    kw_names: tuple = ()
    #: the tuples of names LOAD_CONST pushed, by the text shown for them: on
    #: 3.13 CALL_KW takes its keyword names from the stack (which may have been
    #: stored and reloaded, or other constants loaded since)
    const_tuples: Dict[str, tuple] = {}
    temps = 0

    def pop(n: int = 1) -> List[str]:
        nonlocal stack
        if n == 0:
            return []
        if len(stack) < n:
            missing = ["?"] * (n - len(stack))
            items, stack = missing + stack, []
            return items
        items, stack = stack[-n:], stack[:-n]
        return items

    labels = {ins.offset for ins in dis.get_instructions(code) if ins.is_jump_target}
    for ins in dis.get_instructions(code):
        op, arg, val = ins.opname, ins.arg, ins.argval
        if ins.offset in labels:
            out.append(f"# label {ins.offset}:")
        if op in ("RESUME", "NOP", "PRECALL", "CACHE", "EXTENDED_ARG", "MAKE_CELL", "COPY_FREE_VARS", "TO_BOOL",
                  "NOT_TAKEN", "POP_EXCEPT"):
            continue
        if op == "PUSH_NULL":
            stack.append("<null>")
        elif op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_NAME"):
            stack.append(str(val))
        elif op in ("LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"):
            stack.extend(str(v) for v in val)
        elif op == "LOAD_GLOBAL":
            if arg is not None and arg & 1:
                stack.append("<null>")
            stack.append(str(val).replace("NULL + ", "").replace(" + NULL", ""))
        elif op == "LOAD_CONST" or op == "RETURN_CONST":
            text = _describe_constant(val, names)
            if isinstance(val, tuple) and all(isinstance(v, str) for v in val):
                const_tuples[text] = val
            if op == "RETURN_CONST":
                out.append(f"return {text}")
            else:
                stack.append(text)
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            (obj,) = pop()
            stack.append(obj[1:] if obj.startswith("\x00") and val == "obj" else f"{obj}.{val}")
            if op == "LOAD_METHOD" or "NULL|self" in ins.argrepr:
                # a method load: the call's hidden self (or NULL) shows as nothing
                stack.append("<null>")
        elif op == "STORE_FAST" or op == "STORE_DEREF" or op == "STORE_GLOBAL" or op == "STORE_NAME":
            (value,) = pop()
            detach(str(val))
            assigned[str(val)] = value
            out.append(f"{val} = {value}")
        elif op == "STORE_FAST_LOAD_FAST":
            (value,) = pop()
            detach(str(val[0]))
            assigned[str(val[0])] = value
            out.append(f"{val[0]} = {value}")
            stack.append(str(val[1]))
        elif op == "STORE_FAST_STORE_FAST":
            first, second = pop(2)[::-1]
            out.append(f"{val[0]} = {first}")
            out.append(f"{val[1]} = {second}")
        elif op in ("DELETE_FAST", "DELETE_DEREF", "DELETE_GLOBAL"):
            detach(str(val))
            if out and out[-1] == f"{val} = None":
                out.pop()    # (``x = None; del x``: the local is cleared)
            out.append(f"del {val}")
        elif op == "STORE_ATTR":
            obj, value = pop(2)[::-1]
            out.append(f"{obj}.{val} = {value}")
        elif op == "DELETE_ATTR":
            (obj,) = pop()
            out.append(f"del {obj}.{val}")
        elif op == "STORE_SUBSCR":
            key, obj, value = pop(3)[::-1]
            out.append(f"{obj}[{key}] = {value}")
        elif op == "DELETE_SUBSCR":
            obj, key = pop(2)
            out.append(f"del {obj}[{key}]")
        elif op == "BINARY_SUBSCR":
            obj, key = pop(2)
            stack.append(f"{obj}[{key}]")
        elif op == "BINARY_OP":
            left, right = pop(2)
            stack.append(f"{left} {ins.argrepr} {right}")
        elif op in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET"):
            items = pop(arg)
            if op == "BUILD_TUPLE":
                stack.append(f"({', '.join(items)}{',' if len(items) == 1 else ''})")
            else:
                stack.append(("[{}]" if op == "BUILD_LIST" else "{{{}}}").format(", ".join(items)))
        elif op == "BUILD_MAP":
            items = pop(2 * arg)
            stack.append("{" + ", ".join(f"{items[i]}: {items[i + 1]}" for i in range(0, len(items), 2)) + "}")
        elif op == "KW_NAMES":
            kw_names = tuple(code.co_consts[arg])   # (dis shows no argval for it on 3.11)
        elif op in ("CALL", "CALL_KW", "CALL_FUNCTION_EX"):
            if op == "CALL_KW":   # (3.13: the names are on top of the stack)
                (names_text,) = pop()
                kw_names = const_tuples.get(names_text, ())
            if op == "CALL_FUNCTION_EX":
                kwargs = pop()[0] if arg & 1 else None
                (args,) = pop()
                parts = [f"*{args}"] + ([f"**{kwargs}"] if kwargs else [])
                n_callee = 2
            else:
                values = pop(arg)
                n_pos = len(values) - len(kw_names)
                parts = values[:n_pos] + [f"{k}={v}" for k, v in zip(kw_names, values[n_pos:])]
                kw_names = ()
                n_callee = 2
            callee = [x for x in pop(n_callee) if x != "<null>"]
            fn = callee[0] if callee else "?"
            stack.append(f"{fn}({', '.join(parts)})")
        elif op == "UNPACK_SEQUENCE":
            (value,) = pop()
            temp = f"_out{temps}"
            temps += 1
            out.append(f"{temp} = {value}")
            stack.extend(f"{temp}[{i}]" for i in reversed(range(arg)))
        elif op == "POP_TOP":
            (value,) = pop()
            if value not in ("<null>", "None") and not value.isidentifier():
                out.append(value)
        elif op == "RETURN_VALUE":
            (value,) = pop()
            out.append(f"return {value}")
        elif op == "COPY":
            stack.append(stack[-arg] if len(stack) >= arg else "?")
        elif op == "SWAP":
            if len(stack) >= arg:
                stack[-1], stack[-arg] = stack[-arg], stack[-1]
        elif op == "MAKE_FUNCTION":
            (code_text,) = pop()
            stack.append(f"function({code_text})")
        elif op == "SET_FUNCTION_ATTRIBUTE":
            fn, _attr = pop(2)[::-1]
            stack.append(fn)
        elif op.startswith(("POP_JUMP", "JUMP")):
            if op.startswith("POP_JUMP"):
                (cond,) = pop()
                test = {"POP_JUMP_IF_FALSE": f"not {cond}", "POP_JUMP_FORWARD_IF_FALSE": f"not {cond}",
                        "POP_JUMP_IF_NONE": f"{cond} is None", "POP_JUMP_FORWARD_IF_NONE": f"{cond} is None",
                        "POP_JUMP_IF_NOT_NONE": f"{cond} is not None",
                        "POP_JUMP_FORWARD_IF_NOT_NONE": f"{cond} is not None"}.get(op, cond)
                out.append(f"if {test}: goto {val}")
            else:
                out.append(f"goto {val}")
        else:
            out.append(f"# {op} {ins.argrepr}".rstrip())
    return out


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
    lines += [f"{pad}    {stmt}" for stmt in decompile(entry.code, names)]
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
