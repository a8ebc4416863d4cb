"""Stand-in frames for a call the break's glue code runs for an inlined frame.

When a graph break stops a chain of inlined calls at a call that cannot see
its caller (``BreakEmitter._runs_call_first``), the compiled frame's glue
code runs that call itself.  In eager the call ran in the innermost inlined
frame, called from each frame of the chain in turn: a traceback of what it
raises lists each of them, with the line of its call in progress.  Run from
the glue alone, the traceback would list the compiled frame only -- at the
innermost frame's line number, which in the compiled frame's file is some
unrelated line.

So the glue calls through one small function per inlined frame, each made
from that frame's code object (its file, name and first line) and doing
nothing but the next call, at the position of that frame's call: the
traceback shows the frames and lines eager shows.  Their parameters are
moved onto the stack before the call: the call's operands are held by the
call alone, as on the eager frame's stack.
"""

from __future__ import annotations

import builtins
import types
from typing import Dict, Optional, Tuple

from .bytecode import assemble, emit, instr

_CO_OPTIMIZED, _CO_NEWLOCALS = 0x1, 0x2

_CACHE: Dict[tuple, types.FunctionType] = {}


def stand_in(base: types.CodeType, positions, n_args: int, kw_names: Tuple[str, ...] = (),
             f_globals: Optional[dict] = None):
    """A function of ``base``'s file and name that calls its first argument
    with the ``n_args`` others (the last ``len(kw_names)`` by keyword), the
    call at ``positions``, in the namespace ``f_globals`` (the inlined
    frame's: a C callee that asks for its caller's globals or builtins --
    ``pickle`` importing a class's module, ``__import__`` -- finds them).

    Example::

        >>> def user(): pass
        >>> fn = stand_in(user.__code__, None, 3, ("sep",))
        >>> fn(print, "a", "b", "-") is None
        a-b
        True
        >>> fn.__code__.co_name, fn.__code__.co_filename == user.__code__.co_filename
        ('user', True)
    """
    if f_globals is None:
        f_globals = {"__builtins__": builtins}
    # (the function holds ``f_globals``: its id is not reused while cached)
    key = (base, positions, n_args, tuple(kw_names), id(f_globals))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    params = ["___bg_fn"] + [f"___bg_a{i}" for i in range(n_args)]
    pos = positions
    # (moved onto the stack: only the call holds them, as in eager)
    moves = [[instr("LOAD_FAST", p, positions=pos), instr("DELETE_FAST", p, positions=pos)] for p in params]
    body = [instr("RESUME", arg=0, positions=pos)]
    body += emit.with_null(moves[0], positions=pos)
    for m in moves[1:]:
        body += m
    body += emit.call(n_args, kw_names, positions=pos)
    body.append(instr("RETURN_VALUE", positions=pos))
    code = assemble(body, base, co_varnames=tuple(params), co_cellvars=(), co_freevars=(),
                    co_argcount=len(params), co_posonlyargcount=0, co_kwonlyargcount=0,
                    co_flags=_CO_OPTIMIZED | _CO_NEWLOCALS, co_consts=(None,), co_names=(),
                    co_name=base.co_name, co_qualname=base.co_qualname)
    fn = _CACHE[key] = types.FunctionType(code, f_globals)
    fn.__bytegraph_kw_names__ = tuple(kw_names)   # (bytegraph.show shows the call it stands in for)
    return fn
