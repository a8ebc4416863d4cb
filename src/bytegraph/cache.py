"""Per-function caches of compiled entries, and the call path.

:class:`CompiledFunction` is what ``bytegraph.compile(fn)`` returns.  A call
runs each entry's generated guard with the call's own arguments and, on the
first hit, the entry's transformed function.  On a miss it compiles a new
entry (or, past ``config.cache_size_limit`` or for a frame bytegraph cannot
capture, runs the original function eagerly).
"""

from __future__ import annotations

import builtins
import functools
import sys
import threading
import traceback
import types
import weakref
from typing import Callable, Dict, List, Optional

import torch

from . import config
from .compiler import CacheEntry, compile_frame
from .dynamic import DynamicPolicy
from .guard_compiler import code_signature
from .decorators import STANCE
from .diagnostics import STATS, emit, listening, logger
from .logs import enabled, log
from .errors import (BackendError, BreakRecord, GraphBreakError, InternalError, RecompileError, Unsupported,
                     UserLocation)

#: bound once: checked on every compiled call
_gettrace = sys.gettrace

_ALL: "weakref.WeakSet[FrameCache]" = weakref.WeakSet()

#: held while any frame compiles (see ``FrameCache._miss``)
_COMPILE_LOCK = threading.RLock()

#: backend failures of one frame after which it runs eagerly for good
_STICKY_BACKEND_FAILURES = 3


class _Eager:
    """The outcome "run the original function" of a miss."""


_EAGER = _Eager()


class FrameCache:
    """The entries of one frame kind and what to do on a miss (shared by
    :class:`CompiledFunction` and :class:`FrameRunner`)."""

    closure_param = False

    def __init__(self, backend_name: str, backend: Callable, fullgraph: bool, dynamic=None):
        self._policy = DynamicPolicy(dynamic)
        self._backend_name = backend_name
        self._backend = backend
        self._fullgraph = fullgraph
        self._entries: List[CacheEntry] = []
        self._eager_reason: Optional[BreakRecord] = None
        self._warned_limit = False
        #: the frame compiled to no graph config.max_graphless_variants times:
        #: calls without tensor arguments run it as it is (_pure_python_variant)
        self._graphless = False
        self._backend_failures = 0
        #: compile(recompile_limit=...): this cache's entry limit (None: config.cache_size_limit)
        self._limit: Optional[int] = None
        #: compile(name=...): the label logs use (None: the function's qualified name)
        self._label: Optional[str] = None
        #: set_stance("eager_then_compile"): the first call's argument shapes
        #: and ints (it ran eagerly), learned from when the second one compiles
        self._first_call: Optional[tuple] = None
        _ALL.add(self)

    def _miss(self, fn, args, kwargs):
        """Compile a new entry for this call and run it, or run ``fn`` eagerly.

        Compiling holds one process-wide lock, and the entries are looked up
        again once it is held: threads making the same first call at once
        compile once and share the entry (backends, the fake-tensor machinery
        and the dynamic-shape policy are not thread-safe).  The entry runs
        after the lock is released.
        """
        entry = self._resolve(fn, args, kwargs)
        if entry is None:
            return fn(*args, **kwargs)
        return self._run_entry(entry, fn, args, kwargs)

    def _resolve(self, fn, args, kwargs) -> Optional[CacheEntry]:
        """The entry to run for a call that missed, compiling it if needed;
        None: run ``fn`` itself."""
        try:
            return self._resolve_entry(fn, args, kwargs)
        except (GraphBreakError, RecompileError) as e:
            # an error about the user's code, which names the user's lines
            # itself: its traceback starts here, not deep in the compiler
            raise e.with_traceback(None)

    def _resolve_entry(self, fn, args, kwargs) -> Optional[CacheEntry]:
        STATS.cache_misses += 1
        if self._eager_reason is not None:
            return None
        if self._entries and STANCE.value != "default" and not self._stance_allows_recompile(fn, args, kwargs):
            return None
        if not self._entries and self._first_call is None and STANCE.value.endswith("eager_then_compile"):
            self._first_call = _argument_values(fn, args, kwargs)
            return None   # the first call runs eagerly; what it saw is learned from when the next one compiles
        if self._warned_limit and len(self._entries) >= self._entry_limit():
            return None  # (past the limit every new variant runs as it is: nothing to bind or compile)
        if self._graphless and not _tensor_or_module(args, kwargs):
            return None  # (the same for the variants of a graphless frame, _pure_python_variant)
        try:
            code_signature(fn).bind(*args, **kwargs)
        except (TypeError, RecursionError):
            # a bad call raises as the function would; near the recursion
            # limit bytegraph's own frames would not fit: run it as it is
            return None
        except Exception:
            # binding uses the builtins too (``iter``): with one deleted it
            # fails; the frame runs as it is (see _compile)
            if self._patched(fn):
                return None
            raise
        with _COMPILE_LOCK:
            entry = self._lookup(fn, args, kwargs)
            if entry is None:
                entry = self._compile(fn, args, kwargs)
        return None if isinstance(entry, _Eager) else entry

    def _pure_python_variant(self, fn, args, kwargs) -> bool:
        """Whether this call is one more variant of a frame that has compiled to
        no graph ``config.max_graphless_variants`` times, with no tensor or
        module among its arguments.  It runs as it is: each variant of such a
        frame is a trace (of a whole unrolled loop, say) that gives a backend
        nothing, and one per new constant -- a pure-Python summation called
        with a thousand lists of floats -- would cost seconds.  Not under
        fullgraph, where a recompile past the limit is an error."""
        if self._fullgraph or self._graphless or len(self._entries) < config.max_graphless_variants or \
                any(e.graph_count for e in self._entries):
            return False
        if _tensor_or_module(args, kwargs):
            return False
        self._graphless = True
        logger.info("bytegraph: %s compiled to no graph %d times; from now on calls without tensor arguments "
                    "run it as it is", self._label or fn.__qualname__, len(self._entries))
        # (its entries are the original code transformed, so running the
        # original instead is the same; dropping them spares each call their
        # guards, which such a frame fails call after call)
        self._entries.clear()
        return True

    def _entry_limit(self) -> int:
        return self._limit if self._limit is not None else config.cache_size_limit

    def _stance_allows_recompile(self, fn, args, kwargs) -> bool:
        """Under ``set_stance("eager_on_recompile")`` a call no entry covers runs
        eagerly; under ``"fail_on_recompile"`` it raises (see decorators.set_stance)."""
        if STANCE.value == "fail_on_recompile":
            code = fn.__code__
            reason = self._entries[-1].guard.why_failed(args, kwargs)
            raise RecompileError(f"{fn.__qualname__} ({code.co_filename}:{code.co_firstlineno}) would recompile "
                                 f"under set_stance('fail_on_recompile'): {reason}") from None
        return STANCE.value != "eager_on_recompile"

    def _lookup(self, fn, args, kwargs):
        """An entry whose guard holds for this call (the slow path's second look)."""
        for entry in self._entries:
            if self._check(entry, fn, args, kwargs):
                return entry
        return None

    def _check(self, entry, fn, args, kwargs) -> bool:
        return entry.guard.check(*args, **kwargs)

    def _compile(self, fn, args, kwargs):
        """A new cache entry for this call, or ``_EAGER`` (run ``fn`` as it is)."""
        if self._eager_reason is not None:
            return _EAGER
        if len(self._entries) >= self._entry_limit():
            if self._fullgraph:
                raise RecompileError(f"{fn.__qualname__} reached its recompile limit ({self._entry_limit()} "
                                     f"entries) under fullgraph=True: "
                                     f"{self._entries[-1].guard.why_failed(args, kwargs)}") from None
            if not self._warned_limit:
                self._warned_limit = True
                code = fn.__code__
                limit = (f"its recompile_limit ({self._limit})" if self._limit is not None
                         else f"config.cache_size_limit ({config.cache_size_limit})")
                reasons = "; ".join(dict.fromkeys(e.guard.why_failed(args, kwargs) for e in self._entries[-3:]))
                msg = (f"bytegraph: {self._label or fn.__qualname__} ({code.co_filename}:{code.co_firstlineno}) "
                       f"hit {limit}; further new variants run eagerly. The last entries failed on: {reasons}. "
                       f"Fix: make what changes dynamic (compile(..., dynamic=True), bytegraph.mark_dynamic) or "
                       f"constant across calls, or raise the limit (compile(..., recompile_limit=N))")
                # a log record, not warnings.warn: the program's own warning
                # filters and recorders (-W error, catch_warnings) must not see
                # the compiler's notices
                logger.warning("%s", msg)
            return _EAGER
        if self._patched(fn):
            return _EAGER
        if self._pure_python_variant(fn, args, kwargs):
            return _EAGER
        if not self._entries and self._first_call:
            # (after an eager first call: dims and ints that differ from it are dynamic at once)
            first, self._first_call = self._first_call, ()
            self._policy.learn(*first)
            self._policy.learn(*_argument_values(fn, args, kwargs))
        if self._entries:
            STATS.recompiles += 1
            if listening():
                code = fn.__code__
                emit("recompile", {"function": self._label or code.co_qualname, "file": code.co_filename,
                                   "line": code.co_firstlineno, "entries": len(self._entries),
                                   "reasons": [e.guard.why_failed(args, kwargs) for e in self._entries]})
            last = self._entries[-1]
            if enabled("recompiles"):
                # every entry tried, each with the first guard that failed for this call
                tried = "\n".join(f"    entry {i}: guard failed: {e.guard.why_failed(args, kwargs)}"
                                  for i, e in enumerate(self._entries))
                log("recompiles", "recompiling %s (%s:%s), entry %d of at most %d; no entry's guards hold:\n%s",
                    self._label or fn.__qualname__, fn.__code__.co_filename, fn.__code__.co_firstlineno,
                    len(self._entries), self._entry_limit(), tried)
            shapes, ints = last.guard.observed(args, kwargs)
            # a loop resumed at another iteration: from now on its iterator is
            # left to run natively rather than compiled once per position
            self._policy.moving_iterators.update(last.guard.moved_iterators(args, kwargs))
            # another module of the same class where the entry had one: from
            # now on modules there are guarded by structure (DynamicPolicy)
            self._policy.fresh_modules.update(last.guard.replaced_modules(args, kwargs))
            if self._policy.learn(shapes, ints) and enabled("recompiles"):
                log("recompiles", "%s: now dynamic: dims %s, ints %s", fn.__qualname__,
                    {k: sorted(v) for k, v in self._policy.dims.items()}, sorted(self._policy.ints))
        try:
            entry = compile_frame(fn, args, kwargs, self._backend_name, self._backend, self._fullgraph,
                                  self.closure_param, self._runner_for, self._policy)
        except RecursionError:
            # Compiling needs far more stack than running (deep user
            # recursion, deeply nested data): the frame runs eagerly this time
            # (and may compile when called from shallower); never the user's
            # RecursionError.
            rec = BreakRecord("recursion", "Python's recursion limit reached while compiling", _fn_location(fn),
                              "the frame runs eagerly")
            return self._fall_back(fn, rec, sticky=False)
        except Unsupported as e:
            if e.kind == "recursion":
                return self._fall_back(fn, e.record(), sticky=False)
            if e.kind == "internal" and config.raise_on_error:
                raise InternalError(f"bytegraph failed compiling {fn.__qualname__}: {e}") from e
            record = e.record()
            _forget(e)
            return self._fall_back(fn, record, sticky=True)
        except BackendError as e:
            if self._fullgraph or config.raise_on_error:
                # (a graph the backend rejects may be bytegraph's fault: tests see it)
                raise
            # A backend may fail for a reason that passes (another compile in
            # flight, a full disk): only repeated failures make the frame eager.
            self._backend_failures += 1
            rec = BreakRecord("backend_error", str(e), _fn_location(fn), "the frame runs eagerly")
            return self._fall_back(fn, rec, sticky=self._backend_failures >= _STICKY_BACKEND_FAILURES)
        except Exception as e:
            if config.raise_on_error or self._fullgraph:
                raise InternalError(f"bytegraph failed compiling {fn.__qualname__}: {type(e).__name__}: {e}") from e
            log("errors", "internal error compiling %s:\n%s", fn.__qualname__, traceback.format_exc())
            rec = BreakRecord("internal_error", f"{type(e).__name__}: {e}", _fn_location(fn),
                              "please report this bytegraph bug; the frame runs eagerly")
            return self._fall_back(fn, rec, sticky=True)
        self._entries.append(entry)
        # (``drop`` bound now: at interpreter exit the module's globals are gone
        # before the last guarded objects die)
        entry.guard.on_dead(lambda ref=weakref.ref(self), e=entry, drop=_drop_entry: drop(ref, e))
        if entry.transformed:
            self._policy.learn(entry.observed_shapes, entry.guard.observed(args, kwargs, ints_only=True)[1])
        if entry.raises:
            STATS.eager_fallbacks += 1
            log("graph_breaks", "%s raises for these inputs; the entry runs it natively", fn.__qualname__)
        else:
            STATS.frames_compiled += 1
        emit("entry", entry)
        return entry

    def _run_entry(self, entry, fn, args, kwargs):
        return entry.fn(*args, **kwargs)

    def _patched(self, fn) -> bool:
        """A builtin bytegraph uses is replaced or deleted: ``fn`` runs eagerly
        this time (not sticky: once the builtin is back, it compiles again)."""
        patched = _patched_builtin()
        if patched is None:
            return False
        self._fall_back(fn, BreakRecord("patched_builtin", f"builtins.{patched} is replaced or deleted",
                                        _fn_location(fn), "the frame runs eagerly while it is"), sticky=False)
        return True

    def _runner_for(self, code):
        return runner_for(code, self._backend_name, self._backend)

    def _fall_back(self, fn, record: BreakRecord, sticky: bool):
        if self._fullgraph:
            raise GraphBreakError(record) from None
        STATS.eager_fallbacks += 1
        log("graph_breaks", "running %s eagerly: %s", fn.__qualname__, record)
        emit("fallback", record)
        if sticky:
            self._eager_reason = record
        return _EAGER

    def _reset(self) -> None:
        self._first_call = None
        self._entries.clear()
        self._eager_reason = None
        self._warned_limit = False
        self._graphless = False
        self._backend_failures = 0


class CompiledFunction(FrameCache):
    """A function compiled by bytegraph.  Call it like the original.

    Example::

        >>> import bytegraph, torch
        >>> f = bytegraph.compile(lambda x: x.sin() + 1, backend="eager")
        >>> f(torch.zeros(2))
        tensor([1., 1.])
    """

    def __new__(cls, *args, **kwargs):
        # With the native module, an instance of a subclass whose call path is
        # C (native.Dispatch); its __call__ does what the Python one below does.
        if cls is CompiledFunction:
            native_cls = _native_variant(CompiledFunction, "Dispatch")
            if native_cls is not None:
                return native_cls.__new__(native_cls)
        return super().__new__(cls)

    def __init__(self, fn: types.FunctionType, backend_name: str, backend: Callable, fullgraph: bool,
                 dynamic=None):
        super().__init__(backend_name, backend, fullgraph, dynamic)
        self._fn = fn
        functools.update_wrapper(self, fn)

    def _native_miss(self, args, kwargs):
        """What the native call path runs for a call no entry's guard holds for
        (see ``native.Dispatch``): a new entry's function, or the original."""
        entry = self._resolve(self._fn, args, kwargs)
        return self._fn if entry is None else entry.fn

    def __call__(self, /, *args, **kwargs):
        if _gettrace() is not None or STANCE.value == "force_eager":
            # a line tracer (debugger, coverage, sys.settrace) is watching:
            # compiled code would hide the lines and frames it must see
            return self._fn(*args, **kwargs)
        for entry in self._entries:
            try:
                hit = entry.guard.check(*args, **kwargs)
            except TypeError:  # the arguments do not bind: the original function raises the right error
                break
            if hit:
                STATS.cache_hits += 1
                # outside the try: a TypeError of the user's code must propagate, not re-run the frame
                return entry.fn(*args, **kwargs)
        return self._miss(self._fn, args, kwargs)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return types.MethodType(self, obj)


#: (native module, {Python class: its subclass on the native call path})
_NATIVE_CLASSES: list = [None, {}]


def _native_variant(cls: type, base_name: str) -> Optional[type]:
    """``cls`` with the native module's ``base_name`` type first in its bases,
    so the C ``__call__``/``select`` of that type are the ones used (each does
    what ``cls``'s Python method does); None without the native module."""
    from . import native
    m = native.load()
    if m is None:
        return None
    if _NATIVE_CLASSES[0] is not m:
        m.set_stats(STATS)
        m.set_force_eager(STANCE.value == "force_eager")
        _NATIVE_CLASSES[:] = [m, {}]
    variants = _NATIVE_CLASSES[1]
    if cls not in variants:
        variants[cls] = type(cls.__name__, (getattr(m, base_name), cls),
                             {"__slots__": (), "__doc__": cls.__doc__, "__module__": __name__})
    return variants[cls]


class FrameRunner(FrameCache):
    """Runs generated functions (resume functions, outlined loop bodies) of one
    code object through their own cache, so each is compiled like any frame.

    The transformed code calls ``runner(fn, *args)`` where ``fn`` was just
    made with the live cells as its closure; guards read that closure.
    """

    closure_param = True
    _warned_depth = False

    def __call__(self, fn, /, *args):
        return self.select(fn, *args)(*args)

    def select(self, fn, /, *args):
        """The function to call with ``args`` for generated function ``fn``
        (compiling an entry on a miss), without calling it.

        Transformed code calls ``select(fn, *args)(*args)`` rather than
        ``runner(fn, *args)``: a Python-level wrapper would hold the argument
        tuple for the whole call, keeping alive objects the callee frees
        (``del x`` or an exhausted iterator in eager frees them at once).
        """
        if _gettrace() is not None:
            return fn   # a line tracer is watching (see CompiledFunction.__call__)
        if _deeper_than(sys.getrecursionlimit() // 3):
            # Continuations nest: each graph break calls the next one from the
            # frame before, so a loop that cannot be outlined (inside a
            # try/with block) and breaks every iteration grows the stack by
            # frames per iteration, where eager runs one frame.  Deep down, the
            # generated function runs as it is: natively, the rest of its loop
            # stays in this one frame.
            if not self._warned_depth:
                self._warned_depth = True
                STATS.eager_fallbacks += 1
                code = fn.__code__
                rec = BreakRecord("recursion", "continuations nested too deep",
                                  UserLocation(code.co_filename, code.co_firstlineno, code.co_qualname),
                                  "the generated function runs natively")
                log("graph_breaks", "running %s natively: %s", code.co_qualname, rec)
                emit("fallback", rec)
            return fn
        cells = fn.__closure__
        for entry in self._entries:
            try:
                hit = entry.guard.check(cells, *args)
            except TypeError:
                break
            if hit:
                STATS.cache_hits += 1
                return entry.function_for(fn)
        return self._select_miss(fn, *args)

    # the native base's select (native.Selector) hands these the calls it does not finish
    _select_slow = select

    def _select_miss(self, fn, /, *args):
        if self._graphless and not _tensor_or_module(args, None):
            return fn  # (see FrameCache._pure_python_variant; the shortest way there)
        entry = self._resolve(fn, args, {})
        return fn if entry is None else entry.function_for(fn)

    def _run_entry(self, entry, fn, args, kwargs):
        return entry.call_with_closure(fn, args)

    def _check(self, entry, fn, args, kwargs) -> bool:
        return entry.guard.check(fn.__closure__, *args)


def _tensor_or_module(args, kwargs) -> bool:
    """Whether a tensor or module is among the arguments themselves."""
    for a in args:
        if isinstance(a, _TENSOR_OR_MODULE):
            return True
    return bool(kwargs) and any(isinstance(a, _TENSOR_OR_MODULE) for a in kwargs.values())


_TENSOR_OR_MODULE = (torch.Tensor, torch.nn.Module)


_RUNNERS: Dict[tuple, FrameRunner] = {}


def _deeper_than(n: int) -> bool:
    """More than ``n`` Python frames are active (a walk of at most ``n`` frames, in C)."""
    try:
        sys._getframe(n)
    except ValueError:
        return False
    return True


def runner_for(code: types.CodeType, backend_name: str, backend: Callable) -> FrameRunner:
    """The shared runner of a generated code object for one backend."""
    key = (code, backend_name, id(backend))
    runner = _RUNNERS.get(key)
    if runner is None:
        cls = _native_variant(FrameRunner, "Selector") or FrameRunner
        runner = _RUNNERS[key] = cls(backend_name, backend, fullgraph=False)
        runner._backend_keepalive = backend
    return runner


def _forget(exc: BaseException) -> None:
    """Drop what a handled compile-time exception refers to.  Its traceback
    holds bytegraph's frames (with the call's arguments in their locals) and
    often sits in a reference cycle, so without this the program's objects
    would live until the cycle collector runs instead of when eager drops them."""
    tb = exc.__traceback__
    exc.__traceback__ = None
    if tb is not None:
        traceback.clear_frames(tb)
    if hasattr(exc, "frame"):
        exc.frame = None


def _drop_entry(cache_ref, entry) -> None:
    cache = cache_ref()
    if cache is not None and entry in cache._entries:
        cache._entries.remove(entry)
        if entry.guard.died_module is not None:
            # a module the entry was specialized to died: the next one at
            # that place is likely new too (built in the frame and handed to a
            # continuation, a model rebuilt per call)
            cache._policy.fresh_modules.add(entry.guard.died_module)


#: builtins bytegraph itself calls while compiling, as they were at import
_OWN_BUILTINS = {name: getattr(builtins, name) for name in (
    "iter", "next", "int", "float", "str", "bool", "bytes", "tuple", "list", "dict", "set", "frozenset", "type",
    "object", "isinstance", "issubclass", "len", "getattr", "hasattr", "setattr", "range", "reversed", "zip",
    "map", "filter", "enumerate", "id", "hash", "repr", "min", "max", "sum", "any", "all", "sorted", "super",
    "callable", "slice", "abs", "round", "print", "vars", "divmod", "format", "chr", "ord")}


def _patched_builtin() -> Optional[str]:
    """The name of a builtin bytegraph itself uses that the program replaced
    or deleted (``patch("builtins.int")``), else None.  While one is, frames
    run eagerly: compiling could fail halfway (and leave the program's own
    cleanup unrun).  The entries are read by iterating the dict, so no
    key's ``__eq__`` runs."""
    seen = {}
    for k, v in builtins.__dict__.items():
        if type(k) is str and k in _OWN_BUILTINS:
            seen[k] = v
    for name, real in _OWN_BUILTINS.items():
        if seen.get(name) is not real:
            return name
    return None


def _argument_values(fn, args, kwargs) -> tuple:
    """``(shapes, ints)`` of a call's tensor and int arguments, by the names
    the guards give them (``x``, ``args[0]``): what ``DynamicPolicy.learn`` compares."""
    shapes: Dict[str, tuple] = {}
    ints: Dict[str, int] = {}
    try:
        bound = code_signature(fn).bind(*args, **kwargs).arguments
    except Exception:
        return shapes, ints
    items = []
    for name, value in bound.items():
        if type(value) is tuple and fn.__code__.co_flags & 0x04 and name == _varargs_name(fn.__code__):
            items += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items.append((name, value))
    for name, value in items:
        if isinstance(value, torch.Tensor):
            shapes[name] = tuple(value.shape)
        elif type(value) is int:
            ints[name] = value
    return shapes, ints


def _varargs_name(code) -> str:
    return code.co_varnames[code.co_argcount + code.co_kwonlyargcount]


def _fn_location(fn) -> UserLocation:
    code = fn.__code__
    return UserLocation(code.co_filename, code.co_firstlineno, code.co_qualname)


def reset_all() -> None:
    for cf in list(_ALL):
        cf._reset()
