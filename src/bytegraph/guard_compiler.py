"""Compiling guards: one generated Python function per cache entry.

:mod:`bytegraph.guards` says *what* a trace assumed (:class:`~bytegraph.guards.Guard`);
this module turns one trace's :class:`~bytegraph.guards.GuardSet` into the
check that runs before every call.  :func:`compile_guards` writes a function
with the compiled function's own signature, so CPython binds the arguments and
the check is straight-line code (DESIGN.md §5); :class:`CompiledGuard` holds
it with the slow paths a recompile message needs (which guard failed, with
what value).  Lines are ordered by :data:`bytegraph.guards._PRIORITY`: type
checks first, then tensor metadata, then globals.

Example::

    >>> import torch
    >>> from bytegraph.guards import Guard, GuardSet
    >>> from bytegraph.sources import LocalSource
    >>> gs = GuardSet()
    >>> gs.add(Guard.tensor(LocalSource("x"), torch.ones(2)))
    >>> fn = compile_guards(gs, lambda x: None, frame_globals={})
    >>> fn.check(torch.zeros(2)), fn.check(torch.zeros(3))
    (True, False)
"""

from __future__ import annotations

import builtins
import inspect
import re
import struct
import sys
import types
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from . import native as _native
from .logs import log
from .guards import (
    _DEFAULT_DEVICE, _NUMERIC_KEY_TYPES, _PRIORITY, _STATE_QUERIES, IDENTITY_KINDS, Guard, GuardSet,
    _Forgotten, _has_numbers, _short, autocast_state, key_types, storages_disjoint, typed,
)
from .sources import CellContentsSource, ItemSource, LocalSource, Source, chain, function_part


class CompiledGuard:
    """The generated check of one cache entry.

    ``check(*args, **kwargs)`` is the generated function itself (called on the
    hot path); ``source`` is its text; ``describe()`` lists the guards;
    ``why_failed(*args, **kwargs)`` names the first failing guard (slow path).
    """

    __slots__ = ("check", "source", "guards", "_namespace", "_lines", "_signature_fn", "_closure_param",
                 "_watchers", "dead", "_on_dead", "_module_watchers", "died_module")

    def __init__(self, check, source, guards, namespace, lines, signature_fn, closure_param=False, watchers=()):
        self._closure_param = closure_param
        #: weak references to identity-guarded objects; when one dies the entry is invalid
        self._watchers = list(watchers)
        #: ``(weak reference, source name)`` for watched modules and their
        #: parameters and buffers: the name of the module that owns each
        self._module_watchers: list = []
        #: the source name of the module whose death invalidated this entry
        self.died_module: Optional[str] = None
        self.dead = False
        self._on_dead: list = []
        self.check = check
        self.source = source
        self.guards = guards
        self._namespace = namespace
        self._lines = lines
        self._signature_fn = signature_fn

    def describe(self) -> List[str]:
        return [g.describe() for g in self.guards]

    def on_dead(self, callback) -> None:
        """Call ``callback`` when an object this guard checks by identity is collected."""
        self._on_dead.append(callback)

    def _died(self, _ref, _finalizing=sys.is_finalizing) -> None:
        # The id of a dead object may be reused: this entry must never match again.
        # (At interpreter exit nothing will call the guard again, and the
        # callbacks' modules may already be torn down.)
        if not self.dead and not _finalizing():
            self.died_module = next((name for ref, name in self._module_watchers if ref is _ref), None)
            self.dead = True
            self.check = _never
            for cb in self._on_dead:
                cb()

    def _env(self, args, kwargs) -> Optional[dict]:
        """The guard's namespace with this call's arguments bound (slow paths only)."""
        try:
            bound = code_signature(self._signature_fn).bind(*args, **kwargs)
            bound.apply_defaults()
        except TypeError:
            return None
        env = dict(self._namespace)
        env.update(bound.arguments)
        if self._closure_param:
            env["___cells"] = self._signature_fn.__closure__ or ()
        return env

    def observed(self, args, kwargs, ints_only: bool = False):
        """Shapes of the guarded tensors and values of the guarded root ints for a call
        (what automatic dynamic compares between calls).  Slow path; ``ints_only``
        reads only the lines the ints need (the shapes come back empty)."""
        shapes, ints = {}, {}
        wanted = [k for k, (_, _, g, _) in enumerate(self._lines) if (g.kind == "TENSOR_MATCH" and not ints_only) or (
            g.kind in ("CONSTANT_MATCH", "TYPE_MATCH") and _argument_source(g.source))]
        if not wanted:
            return shapes, ints  # (no line to read: skip evaluating every guard's setup)
        env = self._env(args, kwargs)
        if env is None:
            return shapes, ints
        for guard, value_var in _read_lines(self._lines[:wanted[-1] + 1], env):
            value = env.get(value_var) if value_var else None
            if guard.kind == "TENSOR_MATCH" and isinstance(value, torch.Tensor):
                shapes[guard.source.name()] = tuple(value.shape)
            elif guard.kind in ("CONSTANT_MATCH", "TYPE_MATCH") and _argument_source(guard.source) \
                    and type(value) is int:
                ints[guard.source.name()] = value
        return shapes, ints

    def moved_iterators(self, args, kwargs) -> List[str]:
        """Sources of the real iterators whose position guard fails for this
        call (a loop resumed at another iteration).  Slow path."""
        from .sources import IteratorPartSource
        env = self._env(args, kwargs)
        out: List[str] = []
        if env is None:
            return out
        for guard, value_var in _read_lines(self._lines, env):
            src = guard.source
            if guard.kind == "CONSTANT_MATCH" and isinstance(src, IteratorPartSource) and src.part == "state" \
                    and env.get(value_var) != guard.expected:
                out.append(src.base.name())
        return out

    def replaced_modules(self, args, kwargs) -> List[str]:
        """Sources where this call passes another ``nn.Module`` of the same
        class than the identity-guarded one (a model rebuilt per call, a
        module made in the frame and handed to a continuation).  Slow path."""
        env = self._env(args, kwargs)
        out: List[str] = []
        if env is None:
            return out
        checks = {id(guard): cond for _, cond, guard, _ in self._lines}
        for guard, value_var in _read_lines(self._lines, env):
            # (the records hold a stand-in for the guarded object, with its class)
            cls = getattr(guard.expected, "cls", None)
            if guard.kind == "ID_MATCH" and value_var and isinstance(cls, type) \
                    and issubclass(cls, torch.nn.Module) and type(env.get(value_var)) is cls:
                try:
                    same = eval(checks[id(guard)], env)
                except Exception:
                    same = False
                if not same:
                    out.append(guard.source.name())
        return out

    def why_failed(self, args, kwargs) -> Optional[str]:
        """Return a description of the first guard that fails for these arguments."""
        env = self._env(args, kwargs)
        if env is None:
            return "the arguments do not bind to the function's signature"
        for setup, cond, guard, value_var in self._lines:
            try:
                for var, expr in setup:
                    env[var] = eval(expr, env)
                if not eval(cond, env):
                    return _user_named(guard.describe(), env) + _actual(guard, env.get(value_var) if value_var else None)
            except Exception as e:  # the guard function treats errors as failure too
                return f"{_user_named(guard.describe(), env)} (raised {type(e).__name__}: {e})"
        return None


#: a resume function's parameter for a value left on the stack at the break,
#: with the inner frames' continuations' arguments read from it
_STACK_SLOT = re.compile(r"^(___bg_s\d+)((?:\.args\[\d+\])*)")


def _user_named(description: str, env: dict) -> str:
    """``description`` of a guard, its subject named as the user knows it when
    it is a value a resume function got from the break (``___bg_s1.args[1]``: a
    local ``x`` of the inner frame ``helper``), the generated name kept in parentheses."""
    match = _STACK_SLOT.match(description)
    if match is None:
        return description
    value, name, frame = env.get(match.group(1)), None, None
    for index in re.findall(r"\[(\d+)\]", match.group(2)):
        fn = getattr(value, "fn", None)
        args = getattr(value, "args", None)
        code = getattr(fn, "__code__", None)
        if type(value).__name__ != "Continuation" or code is None or not isinstance(args, tuple):
            return description
        k = int(index)
        if k >= len(args) or k >= code.co_argcount:
            return description
        name, frame, value = code.co_varnames[k], code.co_qualname.split(".<resume_at_")[0], args[k]
    if name is None or name.startswith("___"):
        what = "a value on the stack at the break"
    else:
        what = f"{frame}'s {name}"
    return f"{what} ({match.group(0)}){description[match.end():]}"


#: guards that establish what an object is; reads below a failing one are not made
_WHAT_IT_IS = ("TYPE_MATCH", "ID_MATCH", "FUNCTION_MATCH")


def _read_lines(lines, env):
    """Evaluate the setups of guard ``lines`` in ``env`` (slow paths that
    read every line rather than stop at the first failing one), yielding
    ``(guard, value_var)`` for each line read.  Nothing is read below an
    object whose type or identity check failed, nor below a read that
    raised: ``obj.name`` on an object of another class than the trace saw
    may run that class's own ``__getattribute__``, property or ``__getattr__``
    -- the program's code, which a guard must never run."""
    import re
    blocked: set = set()

    def reads_blocked(expr):
        return any(re.search(rf"(?<![\w.]){re.escape(v)}\b", expr) for v in blocked)

    for setup, cond, guard, value_var in lines:
        if blocked and any(reads_blocked(expr) for _, expr in setup):
            blocked.update(var for var, _ in setup)
            continue
        try:
            for var, expr in setup:
                env[var] = eval(expr, env)
        except Exception:
            blocked.update(var for var, _ in setup)
            continue
        if guard.kind in _WHAT_IT_IS and value_var is not None:
            try:
                ok = bool(eval(cond, env))
            except Exception:
                ok = False
            if not ok:
                blocked.add(value_var)
        yield guard, value_var

def _actual(guard: Guard, value) -> str:
    if guard.kind == "BLOCK_MATCH":
        return f" ({guard.expected.why_not(value)})"
    if guard.kind not in ("CONSTANT_MATCH", "TYPE_MATCH", "TENSOR_MATCH", "LEN_MATCH", "ID_MATCH",
                          "FUNCTION_MATCH"):
        return ""
    if guard.kind in IDENTITY_KINDS:
        return f" (got {_short(value)})"
    if guard.kind == "CONSTANT_MATCH":
        return f" ({guard.expected!r} → {value!r})"
    if guard.kind == "TENSOR_MATCH" and isinstance(value, torch.Tensor):
        changed = _tensor_changes(guard.expected, value)
        return f" (changed: {changed})" if changed else (
            f" (got dtype={value.dtype} shape={list(value.shape)} "
            f"stride={list(value.stride())} requires_grad={value.requires_grad})")
    if guard.kind == "TYPE_MATCH":
        return f" (got {type(value).__qualname__})"
    if guard.kind == "LEN_MATCH":
        try:
            return f" (got {len(value)})"
        except TypeError:
            return ""
    return f" (got {value!r})"


def _tensor_changes(expected, value: torch.Tensor) -> str:
    """What differs between a TENSOR_MATCH's recorded metadata and ``value``,
    as ``what old → new`` items (empty: nothing it can name)."""
    typ, dtype, device, shape, stride, rg = expected
    out = []
    if type(value) is not typ:
        out.append(f"type {typ.__name__} → {type(value).__name__}")
    if value.dtype != dtype:
        out.append(f"dtype {dtype} → {value.dtype}")
    if value.device != device:
        out.append(f"device {device} → {value.device}")
    if len(shape) != value.dim():
        out.append(f"rank {len(shape)} → {value.dim()} (shape {list(shape)} → {list(value.shape)})")
    else:
        for i, (old, new) in enumerate(zip(shape, value.shape)):
            if old is not None and old != new:
                out.append(f"size of dim {i} {old} → {new}")
        if not out and stride is not None and tuple(stride) != tuple(value.stride()):
            out.append(f"stride {list(stride)} → {list(value.stride())}")
    if value.requires_grad != rg:
        out.append(f"requires_grad {rg} → {value.requires_grad}")
    return ", ".join(out)


def _argument_source(source) -> bool:
    """An argument of the call: a parameter, or an item of ``*args`` (ints there may become symbolic)."""
    while isinstance(source, ItemSource):
        source = source.base
    return isinstance(source, LocalSource)

def cell_is_empty(cell) -> bool:
    """Whether ``cell`` holds nothing (a deleted or never-bound variable).

    Example::

        >>> import types
        >>> cell_is_empty(types.CellType()), cell_is_empty(types.CellType(1))
        (True, False)
    """
    try:
        cell.cell_contents
    except ValueError:
        return True
    return False


def _float_bits(x: float) -> int:
    """The IEEE bits of ``x`` (NaN and signed zeros told apart)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _never(*args, **kwargs) -> bool:
    return False

def code_signature(fn: types.FunctionType) -> inspect.Signature:
    """The signature CPython binds a call of ``fn`` with: its code's parameters and its defaults.

    ``inspect.signature(fn)`` is not that: it follows ``__wrapped__`` (a
    ``functools.wraps`` wrapper would bind as the function it wraps) and
    honours ``__signature__``, both of which the interpreter ignores.
    """
    plain = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    plain.__kwdefaults__ = fn.__kwdefaults__
    return inspect.signature(plain)


def _signature_text(code: types.CodeType) -> str:
    """The parameter list of ``code`` without defaults (defaults are attached afterwards)."""
    names = code.co_varnames
    n_pos = code.co_argcount
    n_kw = code.co_kwonlyargcount
    parts = list(names[:n_pos])
    if code.co_posonlyargcount:
        parts.insert(code.co_posonlyargcount, "/")
    idx = n_pos + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + names[idx])
        idx += 1
    elif n_kw:
        parts.append("*")
    parts.extend(names[n_pos:n_pos + n_kw])
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[idx])
    return ", ".join(parts)


def compile_guards(guards: GuardSet, fn: Callable, frame_globals: dict, closure_param: bool = False) -> CompiledGuard:
    """Generate the check function for one cache entry of ``fn``.

    ``fn`` supplies the signature (and defaults) the check is called with and
    the closure the ``RootCellSource`` guards read.  With ``closure_param``
    the closure is the check's first argument instead (generated functions
    such as resume functions get fresh cells on every call).
    """
    code = fn.__code__
    ns: Dict[str, Any] = {
        "___G": frame_globals,
        "___B": builtins.__dict__,
        "___fn": fn,
        "___any_autocast": torch._C._is_any_autocast_enabled,
        "___autocast_state": autocast_state,
        "___autocast_dtype": torch.get_autocast_dtype,
        "___autocast_cache": torch.is_autocast_cache_enabled,
    }
    if not closure_param:
        ns["___cells"] = fn.__closure__ or ()
    bound_ids: Dict[int, str] = {}

    def bind(obj) -> str:
        name = bound_ids.get(id(obj))
        if name is None:
            name = f"___k{len(bound_ids)}"
            bound_ids[id(obj)] = name
            ns[name] = obj
        return name

    var_of: Dict[Source, str] = {}
    watched: list = []   # (weak reference, owning module's source name or None)
    ref_names: Dict[int, Tuple[str, Any]] = {}
    entry: list = []     # the CompiledGuard, once made

    def on_death(ref) -> None:
        if entry:
            entry[0]._died(ref)

    def weak(obj, source=None) -> str:
        """An expression that is ``obj`` while it lives: a weak reference,
        called.  Its death kills the entry (the check never runs against what
        the reference then returns).  Not ``id(x) == N``: ``id()`` raises an
        audit event, and with any audit hook installed (``filelock``, which
        ``transformers`` imports, adds one on 3.12+) each call costs ~200 ns;
        calling a weak reference costs less than ``id()`` even without one.
        An object that takes no weak reference is bound strongly."""
        hit = ref_names.get(id(obj))
        if hit is None:
            try:
                ref = weakref.ref(obj, on_death)
            except TypeError:
                return bind(obj)
            hit = (f"___r{len(ref_names)}()", ref)
            ref_names[id(obj)] = hit
            ns[hit[0][:-2]] = ref
        watched.append((hit[1], _owning_module(obj, source)))
        return hit[0]

    def expr_of(source: Source, setup: list) -> str:
        """Name of a local holding ``source``; appends the assignments it needs."""
        for s in chain(source):
            if s in var_of:
                continue
            base = var_of[s.base] if s.base is not None else None
            text = s.guard_expr(base, bind)
            if s.base is None and text.isidentifier() and not text.startswith("___"):
                var_of[s] = text  # a parameter: no assignment needed
                continue
            var = f"___v{len(var_of)}"
            setup.append((var, text))
            var_of[s] = var
        return var_of[source]

    shape_guards = [g for g in guards if g.kind == "SHAPE_ENV"]
    # "the cell is bound" is implied by any check of its contents: reading an
    # empty cell's ``cell_contents`` raises, and the guard answers False
    contents_read = {g.source.base for g in guards if isinstance(g.source, CellContentsSource)}
    ordered = sorted((g for g in guards if g.kind != "SHAPE_ENV"
                      and not (g.kind == "CELL_EMPTY" and not g.expected and g.source in contents_read)),
                     key=lambda g: (_PRIORITY[g.kind], len(chain(g.source)) if g.source else 0))
    lines: List[Tuple[list, str, Guard, Optional[str]]] = []
    native = _native.load()
    for g in ordered:
        setup: list = []
        cond = _condition(g, expr_of, setup, bind, weak, native)
        lines.append((setup, cond, g, var_of.get(g.source) if g.source is not None else None))

    for g in shape_guards:
        lines.extend(_shape_env_lines(g, expr_of))
    body = _guard_body(lines, native, bind)
    params = _signature_text(code)
    if closure_param:
        params = "___cells, " + params if params else "___cells"
    src = (
        f"def ___guard({params}):\n"
        "    try:\n" + "\n".join(body) + "\n"
        "    except Exception:\n"
        "        return False\n"
    )
    exec(compile(src, f"<bytegraph guard {code.co_name}>", "exec"), ns)
    check = ns["___guard"]
    check.__defaults__ = fn.__defaults__
    check.__kwdefaults__ = fn.__kwdefaults__
    log("guards", "guards for %s:\n%s", code.co_name, src)
    lines = [(s, c, _forget(guard), v) for s, c, guard, v in lines]
    compiled = CompiledGuard(check, src, [line[2] for line in lines], ns, lines, fn, closure_param)
    entry.append(compiled)
    compiled._watchers.extend(ref for _name, ref in ref_names.values())
    compiled._module_watchers.extend((ref, module) for ref, module in watched if module is not None)
    return compiled


def _owning_module(obj, source) -> Optional[str]:
    """The source name of the ``nn.Module`` that ``obj`` is or belongs to
    (a parameter or buffer read from its dicts), else None.  When it dies,
    the frame's later compiles guard a module at that place by its structure
    (``DynamicPolicy.fresh_modules``): it is made anew on each call."""
    if source is None:
        return None
    # (by type alone: ``isinstance`` could run a class's own __getattribute__)
    if issubclass(type(obj), torch.nn.Module):
        return source.name()
    base = getattr(source, "base", None)
    if issubclass(type(obj), torch.Tensor) and getattr(base, "attr", None) in ("_parameters", "_buffers"):
        return base.base.name()
    return None


def _guard_body(lines, native, bind) -> List[str]:
    """The statements of the guard function: each line's setup, then its check,
    with what the check means as a comment (the check itself reads objects it
    holds, ``___k3``, which say nothing to a reader of ``bytegraph.show`` or
    the ``guards`` log).

    With the native module, the (consecutive) tensor checks become one call
    that checks every guarded tensor in C++; ``lines`` keep the per-tensor
    Python conditions for ``why_failed``.
    """
    body: List[str] = []

    def emit_setup(setup):
        body.extend(f"        {var} = {text}" for var, text in setup)

    i = 0
    while i < len(lines):
        setup, cond, guard, value_var = lines[i]
        if native is not None and guard.kind == "TENSOR_MATCH":
            group = []
            while i < len(lines) and lines[i][2].kind == "TENSOR_MATCH":
                group.append(lines[i])
                i += 1
            for line in group:
                emit_setup(line[0])
            check = bind(native.TensorCheck([_native_spec(line[2].expected) for line in group]).check)
            body.extend(f"        # {_comment(line[2])}" for line in group)
            body.append(f"        if not {check}({', '.join(line[3] for line in group)}): return False")
            continue
        emit_setup(setup)
        body.append(f"        if not ({cond}): return False  # {_comment(guard)}")
        i += 1
    body.append("        return True")
    return body


def _comment(guard: Guard) -> str:
    """A guard's description, on one line (it ends a line of generated source)."""
    try:
        text = " ".join(guard.describe().split())
    except Exception:   # (a description must never fail a compile)
        return guard.kind
    return text if len(text) <= 160 else text[:157] + "..."


def _native_spec(expected) -> tuple:
    """A TENSOR_MATCH guard's metadata in the form ``native.TensorCheck`` takes."""
    typ, dtype, device, shape, stride, rg = expected
    if stride is None:
        layout = None
    elif stride == _contiguous_strides(shape):
        layout = "contiguous"
    else:
        layout = tuple(stride)
    return (typ, dtype, device, tuple(shape), layout, rg)


def _forget(guard: Guard) -> Guard:
    if guard.kind in IDENTITY_KINDS or (guard.kind == "TYPE_MATCH" and _may_die(guard.expected)):
        return Guard(guard.kind, guard.source, _Forgotten(guard.expected))
    return guard


def _contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def _may_die(cls) -> bool:
    """Whether class ``cls`` can be freed while the cache lives: a class made
    by a class statement that is not reachable as its module's attribute (one
    defined in a function, or one a later statement of the module replaced).

    Such a class is held weakly by the guards; a static type or a module-level
    class is bound directly (``type(x) is K`` is the cheapest check).
    """
    if not isinstance(cls, type) or not cls.__flags__ & _HEAPTYPE:
        return False
    obj = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is not cls


def _shape_env_lines(g: Guard, expr_of):
    """The shape environment's guards over the symbolic inputs, as guard lines."""
    from .dynamic import SymbolSource
    shape_env, inputs = g.expected
    setup: list = []
    exprs = [expr_of(source, setup) for _, source in inputs]
    # ignore_static=False: a symbolic dim the trace pinned to a constant (a
    # branch on ``x.shape[0] == 5``, an unrolled loop over ``x``) is guarded
    # here; the entry's TENSOR_MATCH left that dim unchecked.
    codes = shape_env.produce_guards([fake for fake, _ in inputs], [SymbolSource(x) for x in exprs],
                                     ignore_static=False)
    out = []
    for i, code in enumerate(codes):
        out.append((setup if i == 0 else [], code, Guard("SHAPE_ENV_EXPR", None, code), None))
    if not codes and setup:
        out.append((setup, "True", Guard("SHAPE_ENV_EXPR", None, "True"), None))
    return out


def _condition(g: Guard, expr_of, setup, bind, weak=None, native=None) -> str:
    k = g.kind
    if k in _STATE_QUERIES:
        e = g.expected
        if isinstance(e, bool):
            return f"{bind(_STATE_QUERIES[k][1])}() is {e}"
        if isinstance(e, torch.dtype):  # singletons
            return f"{bind(_STATE_QUERIES[k][1])}() is {bind(e)}"
        return f"{bind(_STATE_QUERIES[k][1])}() == {bind(e)}"
    if k == "DEFAULT_DEVICE":
        return f"{bind(_DEFAULT_DEVICE[1])}() == {bind(g.expected)}"
    if k == "AUTOCAST":
        return "not ___any_autocast()" if g.expected is None else f"___autocast_state() == {bind(g.expected)}"
    if k == "FN_DEFAULTS":
        # the check itself binds arguments with the defaults it was made with
        defaults, kwdefaults = g.expected
        return (f"{function_part('___fn', '__defaults__', bind)} is {bind(defaults)} and "
                f"{function_part('___fn', '__kwdefaults__', bind)} is {bind(kwdefaults)}")
    if k == "FN_CODE":
        return f"{function_part('___fn', '__code__', bind)} is {bind(g.expected)}"
    if k == "AUTOCAST_DEFAULTS":
        device, dtype, cache = g.expected
        return f"___autocast_dtype({device!r}) is {bind(dtype)} and ___autocast_cache() is {cache}"
    if k == "NOT_IN_GLOBALS":
        return f"{g.expected!r} not in ___G"
    if k == "SUBCLASS_META":
        from .distributed.subclasses import flatten_context
        return f"{bind(flatten_context)}({expr_of(g.source, setup)}) == {bind(g.expected)}"
    if k == "DIST_GROUP":
        from .distributed.collectives import group_signature
        target = "None" if g.source is None else expr_of(g.source, setup)
        return f"{bind(group_signature)}({target}) == {bind(g.expected)}"
    if k == "WARN_OK":
        from .values.warnings_calls import warn_ok
        lists = "".join(f", {expr_of(s, setup)}" for s in g.others)
        return f"{bind(warn_ok)}({bind(g.expected)}{lists})"
    e = expr_of(g.source, setup)
    if k == "TYPE_MATCH":
        if weak is not None and _may_die(g.expected):
            # a class made at run time (a class statement in a function): the
            # entry must not keep it -- and its closures' cells -- alive
            return f"type({e}) is {weak(g.expected)}"
        return f"type({e}) is {bind(g.expected)}"
    if k == "ID_MATCH":
        if weak is None:
            return f"{e} is {bind(g.expected)}"
        return f"{e} is {weak(g.expected, g.source)}"
    if k == "FUNCTION_MATCH":
        fn = g.expected
        return f"{e} is {weak(fn)} and {function_part(e, '__code__', bind)} is {bind(fn.__code__)}"
    if k == "CONSTANT_MATCH":
        v = g.expected
        if v is None or v is True or v is False or v is Ellipsis:
            return f"{e} is {v!r}"
        if type(v) is float and (v != v or v == 0.0):
            # NaN equals nothing, and 0.0 == -0.0 although 1/x tells them apart:
            # compare these two floats by their bits
            return f"type({e}) is float and {bind(_float_bits)}({e}) == {_float_bits(v)}"
        if type(v).__module__ == "numpy":
            # a NumPy scalar: its exact bits (NaN, -0.0), by type
            return f"type({e}) is {bind(type(v))} and {e}.tobytes() == {v.tobytes()!r}"
        if type(v) in (tuple, frozenset) and _has_numbers(v):
            # (1,) == (True,): the items' types too
            return f"type({e}) is {bind(type(v))} and {e} == {bind(v)} and {bind(typed)}({e}) == {bind(typed(v))}"
        return f"type({e}) is {bind(type(v))} and {e} == {bind(v)}"
    if k == "LEN_MATCH":
        return f"len({e}) == {g.expected}"
    if k == "CELL_EMPTY":
        return f"{bind(cell_is_empty)}({e}) is {g.expected}"
    if k == "SET_MATCH":
        if _has_numbers(g.expected):
            # {1} == {True}: the elements' types too
            return f"{e} == {bind(g.expected)} and {bind(typed)}({e}) == {bind(typed(g.expected))}"
        return f"{e} == {bind(g.expected)}"
    if k == "DICT_CONTAINS":
        key, present = g.expected
        if type(key) in (str, int):
            return f"({key!r} in {e}) is {present}"
        # (a class key, e.g. of copyreg.dispatch_table: looked up by identity hash)
        return f"({bind(key)} in {e}) is {present}"
    if k == "DICT_KEYS":
        keys = tuple(g.expected)
        if any(type(key) in _NUMERIC_KEY_TYPES for key in keys):
            # equal keys of other types (1, 1.0, True) would pass ==, but the
            # trace holds the key objects it saw
            return (f"tuple({e}) == {bind(keys)} and "
                    f"{bind(key_types)}({e}) == {bind(key_types(keys))}")
        return f"tuple({e}) == {bind(keys)}"
    if k == "ODICT_KEYS":
        # the order of the dict's own table (an OrderedDict's is its linked list)
        return f"tuple({bind(dict.keys)}({e})) == {bind(tuple(g.expected))}"
    if k == "TENSOR_MATCH":
        typ, dtype, device, shape, stride, rg = g.expected
        head = f"type({e}) is {bind(typ)} and {e}.dtype is {bind(dtype)}"
        # NOTE: cheapest sufficient forms (measured): is_cpu instead of building a
        # device, is_contiguous() instead of building the stride tuple when the
        # expected strides are the contiguous ones.
        on_device = f"{e}.is_cpu" if device.type == "cpu" else f"{e}.device == {bind(device)}"
        tail = f"and {e}.requires_grad is {rg} and {on_device}"
        if stride is not None:
            layout = f"{e}.is_contiguous()" if stride == _contiguous_strides(shape) else f"{e}.stride() == {stride!r}"
            return f"{head} and {e}.shape == {shape!r} and {layout} {tail}"
        dims = " and ".join(f"{e}.shape[{i}] == {s}" for i, s in enumerate(shape) if s is not None)
        return f"{head} and {e}.dim() == {len(shape)} {'and ' + dims if dims else ''} {tail}"
    if k == "ALIAS":
        return f"{e} is {expr_of(g.others[0], setup)}"
    if k == "BLOCK_MATCH":
        # a repeated block (layer_reuse.py): its recorded conditions, compiled once for every layer
        return f"{bind(g.expected.matches)}({e})"
    if k == "LRU_CACHED":
        from .values.lru_cache import lru_guard_holds
        pos, kw, result = g.expected
        return f"{bind(lru_guard_holds)}({e}, {bind(pos)}, {bind(kw)}, {bind(result)})"
    if k == "LRU_UNCACHED":
        from .values.lru_cache import lru_still_missing
        pos, kw = g.expected
        return f"{bind(lru_still_missing)}({e}, {bind(pos)}, {bind(kw)})"
    if k == "NO_STORAGE_OVERLAP":
        exprs = [e] + [expr_of(s, setup) for s in g.others]
        return f"{bind(storages_disjoint)}({', '.join(exprs)})"
    if k == "NO_ALIASING":
        exprs = [e] + [expr_of(s, setup) for s in g.others]
        if native is not None:
            return f"{bind(native.distinct)}({', '.join(exprs)})"
        return f"len({{{', '.join('id(%s)' % x for x in exprs)}}}) == {len(exprs)}"
    raise AssertionError(f"unknown guard kind {k}")
