"""What a program tells compilers about its own code: ``disable``,
``allow_in_graph``, ``is_compiling``, ``graph_break``, ``set_stance``.

Each is bytegraph's equivalent of the ``torch.compiler`` function of the same
name, and torch's own markers are honoured inside bytegraph-compiled code:
a function decorated with ``torch.compiler.disable`` runs natively, one passed
to ``torch.compiler.allow_in_graph`` becomes one graph node,
``torch._dynamo.graph_break()`` breaks the graph, and
``torch.compiler.is_compiling()`` is True while tracing.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from typing import Callable, Optional

#: ids of functions ``allow_in_graph`` was given (dropped when the function dies)
_ALLOWED_IDS: set = set()

#: torch.compiler.set_stance's stances that bytegraph implements
STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile", "eager_then_compile",
           "aot_eager_then_compile")


class _Stance:
    """The current stance (see :func:`set_stance`), read on every compiled call:
    ``value`` is torch's (``torch.compiler.set_stance``) while that is not
    ``"default"``, else bytegraph's own."""

    value = "default"
    own = "default"
    torch = "default"


STANCE = _Stance()


def disable(fn: Optional[Callable] = None, recursive: bool = True):
    """Keep ``fn`` out of compilers: it runs as it is, even when called from
    compiled code (a graph break around the call), and ``bytegraph.compile(fn)``
    returns it unchanged.  As ``torch.compiler.disable``; usable as a decorator.

    Example::

        >>> import bytegraph, torch
        >>> @bytegraph.disable
        ... def log_stats(x):
        ...     print(float(x.mean()))
        >>> bytegraph.compile(log_stats) is log_stats
        True
    """
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    if not callable(fn):
        raise TypeError(f"disable() expects a callable, not {type(fn).__name__}")

    @functools.wraps(fn)
    def disabled(*args, **kwargs):
        return fn(*args, **kwargs)

    disabled.__bytegraph_disable__ = True
    return disabled


def is_disabled(fn) -> bool:
    """Was ``fn`` excluded from compilers (``bytegraph.disable``, ``torch.compiler.disable``)?

    Example::

        >>> import bytegraph
        >>> is_disabled(bytegraph.disable(len)), is_disabled(len)
        (True, False)
    """
    try:
        return bool(getattr(fn, "__bytegraph_disable__", False) or getattr(fn, "_torchdynamo_disable", False))
    except Exception:
        return False


def allow_in_graph(fn: Callable) -> Callable:
    """Record calls to ``fn`` as one graph node instead of tracing into it (as
    ``torch.compiler.allow_in_graph``).  ``fn`` must be a tensor function
    without side effects: the backend runs (or retraces) it in the graph.

    Example::

        >>> import bytegraph, torch
        >>> def fused(x):
        ...     return x.sin() * 2
        >>> bytegraph.allow_in_graph(fused) is fused
        True
    """
    if isinstance(fn, (list, tuple)):
        return type(fn)(allow_in_graph(f) for f in fn)
    if not callable(fn):
        raise TypeError(f"allow_in_graph() expects a callable, not {type(fn).__name__}")
    key = id(fn)
    _ALLOWED_IDS.add(key)
    try:
        weakref.finalize(fn, _ALLOWED_IDS.discard, key)
    except TypeError:
        pass  # (not weak-referenceable: lives as long as the process, as builtins do)
    return fn


def is_allowed_in_graph(fn) -> bool:
    """Did ``bytegraph.allow_in_graph`` or ``torch.compiler.allow_in_graph`` get ``fn``?

    torch's registry is read only when the program imported it (it lives in
    torch._dynamo, which bytegraph never imports).

    Example::

        >>> is_allowed_in_graph(print)
        False
    """
    if id(fn) in _ALLOWED_IDS:
        return True
    rules = sys.modules.get("torch._dynamo.trace_rules")
    allowed = getattr(rules, "_allowed_callable_ids", None)
    if allowed is None:
        return False
    try:
        return id(fn) in allowed
    except Exception:
        return False


def is_compiling() -> bool:
    """True in code bytegraph is tracing, False when it runs eagerly (as ``torch.compiler.is_compiling``).

    Example::

        >>> import bytegraph
        >>> bytegraph.is_compiling()
        False
    """
    return False


def graph_break() -> None:
    """Mark a point where bytegraph must stop the graph (runs as a no-op eagerly).

    Example::

        >>> import bytegraph
        >>> bytegraph.graph_break()
    """


class set_stance(contextlib.ContextDecorator):
    """Change how compiled functions behave, for the whole process, in a
    ``with`` block, or for a decorated function (as ``torch.compiler.set_stance``,
    whose stances bytegraph follows too):

    * ``"default"``: compile on a miss, run cached entries;
    * ``"force_eager"``: run every compiled function as its original code;
    * ``"eager_on_recompile"``: run cached entries, but run eagerly where a
      new compile would be needed;
    * ``"fail_on_recompile"``: raise :class:`bytegraph.RecompileError` where a
      function that has entries would compile again;
    * ``"eager_then_compile"``: a function's first call runs eagerly, later
      calls compile; what changed between the first two calls (a dimension, an
      int) is compiled dynamic at once;
    * ``"aot_eager_then_compile"``: as ``"eager_then_compile"`` (the first call
      runs eagerly, not through AOTAutograd: the same results).

    ``skip_guard_eval_unsafe`` is accepted and has no effect: bytegraph always
    checks every guard (never a wrong result).  ``force_backend`` is not
    supported (compile again with ``backend=`` instead).

    Example::

        >>> import bytegraph
        >>> with bytegraph.set_stance("force_eager"):
        ...     pass
        >>> _ = bytegraph.set_stance("default")
    """

    def __init__(self, stance: str = "default", *, skip_guard_eval_unsafe: bool = False, force_backend=None):
        from .errors import InvalidArgument, InvalidArgumentType
        if stance not in STANCES:
            raise InvalidArgument(f"unknown stance {stance!r}; valid stances: {', '.join(STANCES)}")
        if not isinstance(skip_guard_eval_unsafe, bool):
            raise InvalidArgumentType(f"skip_guard_eval_unsafe must be True or False, not {skip_guard_eval_unsafe!r}")
        if force_backend is not None:
            raise InvalidArgument("set_stance(force_backend=...) is not supported by bytegraph; compile the "
                                  "function again with bytegraph.compile(fn, backend=...)")
        self.stance = stance
        self._restore: list = []
        # a plain call sets the stance for the process; ``with`` and a
        # decorator restore what was there before
        self._before_init: Optional[str] = STANCE.own
        _apply(stance)

    def __enter__(self):
        before, self._before_init = self._before_init, None
        self._restore.append(before if before is not None else STANCE.own)
        _apply(self.stance)
        return self

    def __exit__(self, *exc):
        _apply(self._restore.pop())
        return False

    def __call__(self, fn):
        # as a decorator the stance holds only while fn runs
        if self._before_init is not None:
            _apply(self._before_init)
            self._before_init = None
        return super().__call__(fn)


def _apply(stance: str) -> None:
    """Set bytegraph's own stance."""
    STANCE.own = stance
    _update()


def follow_torch_stance(stance: str) -> None:
    """torch's stance changed (``torch.compiler.set_stance``; see torch_switches.py)."""
    if stance not in STANCES:
        from .logs import log
        log("recompiles", "torch's stance %r has no bytegraph meaning; bytegraph-compiled code runs as by default",
            stance)
        stance = "default"
    STANCE.torch = stance
    _update()


def _update() -> None:
    STANCE.value = STANCE.torch if STANCE.torch != "default" else STANCE.own
    from . import native
    m = native.load()
    if m is not None:
        m.set_force_eager(STANCE.value == "force_eager")
