"""Helpers shared by the bytecode tests (not a test module)."""

from __future__ import annotations

import dis
import importlib
import pkgutil
import types

ROUNDTRIP_MODULES = [
    "json", "json.decoder", "json.encoder", "collections", "dataclasses", "inspect",
    "functools", "typing", "enum", "re._parser", "asyncio.tasks",
]


def torch_nn_module_names():
    import torch.nn.modules as pkg
    return sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))


def iter_code(obj):
    """Every code object reachable from a module/code via co_consts, deduplicated."""
    seen = set()
    stack = []
    if isinstance(obj, types.ModuleType):
        stack.extend(_module_codes(obj))
    else:
        stack.append(obj)
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        yield c
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))


def _module_codes(mod):
    """Module top-level code is gone after import, so recompile the source."""
    import inspect
    try:
        src = inspect.getsource(mod)
        fn = inspect.getsourcefile(mod)
    except (OSError, TypeError):
        return []
    return [compile(src, fn, "exec")]


def module_code(name):
    return list(iter_code(importlib.import_module(name)))


def exn_table_by_index(code):
    """Exception table rows with byte offsets mapped to instruction indices."""
    starts = _instr_starts(code)
    pos = {off: k for k, off in enumerate(starts)}
    out = []
    for e in dis._parse_exception_table(code):
        first = pos[e.start]
        last = max(k for k, off in enumerate(starts) if off < e.end)
        out.append((first, last, pos[e.target], e.depth, e.lasti))
    return out


def _instr_starts(code):
    """Byte offset of each logical instruction (EXTENDED_ARG prefixes included)."""
    starts = []
    prefix = None
    for ins in dis.get_instructions(code):
        if ins.opname == "EXTENDED_ARG":
            if prefix is None:
                prefix = ins.offset
            continue
        starts.append(ins.offset if prefix is None else prefix)
        prefix = None
    return starts


def lines_by_index(code):
    """Line number (from co_lines) of each logical instruction."""
    ranges = list(code.co_lines())
    out = []
    j = 0
    for off in _instr_starts(code):
        while not (ranges[j][0] <= off < ranges[j][1]):
            j += 1
        out.append(ranges[j][2])
    return out


def normalized(instrs):
    index = {id(i): k for k, i in enumerate(instrs)}
    out = []
    for i in instrs:
        tgt = index[id(i.target)] if i.target is not None else None
        argval = i.argval
        if isinstance(argval, types.CodeType):
            argval = ("code", argval.co_name, argval.co_firstlineno)
        gbit = (i.arg & 1) if i.opname == "LOAD_GLOBAL" else None
        out.append((i.opname, _const_repr(argval), tgt, gbit))
    return out


def _const_repr(v):
    # Distinguish 1/True and 0.0/-0.0 when comparing.
    if isinstance(v, (tuple, frozenset)):
        return (type(v).__name__, tuple(_const_repr(x) for x in v))
    if isinstance(v, float):
        return ("float", repr(v))
    if isinstance(v, types.CodeType):
        return ("code", v.co_name, v.co_firstlineno)
    return (type(v).__name__, v) if isinstance(v, (int, str, bytes, bool)) else repr(v)


def deep_reassemble(code):
    """Reassemble ``code`` and, recursively, every code object in its constants."""
    from bytegraph.bytecode import assemble, copy_instrs, decode

    nested = {id(k): deep_reassemble(k) for k in code.co_consts
              if isinstance(k, types.CodeType)}
    instrs = decode(code)
    if nested:
        instrs = copy_instrs(instrs)
        for ins in instrs:
            if ins.opname == "LOAD_CONST" and id(ins.argval) in nested:
                ins.argval = nested[id(ins.argval)]
        prefix = tuple(nested.get(id(k), k) for k in code.co_consts)
        return assemble(instrs, code, co_consts_prefix=prefix)
    return assemble(instrs, code)


def rebuild_function(f):
    """A copy of function ``f`` running deeply reassembled bytecode."""
    g = types.FunctionType(deep_reassemble(f.__code__), f.__globals__, f.__name__,
                           f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__ = f.__qualname__
    return g


def load_reassembled_module(name):
    """Execute a deeply reassembled copy of module ``name``'s source as a new module."""
    import importlib.util
    import inspect
    import sys

    orig = importlib.import_module(name)
    fn = inspect.getsourcefile(orig)
    code = compile(inspect.getsource(orig), fn, "exec")
    mod = types.ModuleType(name)
    mod.__file__ = fn
    mod.__package__ = orig.__package__
    mod.__spec__ = importlib.util.spec_from_file_location(name, fn)
    # Some modules (dataclasses, enum, typing) look themselves up in
    # sys.modules while defining classes; point that at the copy meanwhile.
    saved = sys.modules.get(name)
    sys.modules[name] = mod
    try:
        exec(deep_reassemble(code), mod.__dict__)
    finally:
        sys.modules[name] = saved
    return mod
