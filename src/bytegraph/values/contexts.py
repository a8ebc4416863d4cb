"""Context managers traced whole: ``torch.autocast`` and generators decorated
with ``@contextlib.contextmanager`` (grad-mode contexts are in ``grad_mode.py``).

``torch.autocast(...)``: entering and leaving are recorded in the graph
(``torch.amp.autocast_mode._enter_autocast``/``_exit_autocast``, which
backends trace through) and applied to the tracer's real autocast state, so
fake tensors get the dtypes autocast gives.  A graph that ends inside the
block (a break) leaves it in the graph; the code after re-enters natively.

``with cm(x) as y: body`` for a ``@contextmanager`` function is traced whole: entering runs the generator
function symbolically up to its ``yield`` (the yielded value is ``y``), the
body is traced as usual, and the ``with`` statement's exit resumes the
generator (normally, or by throwing the body's exception into it at the
``yield``), with contextlib's rules for suppression and for generators that do
not stop.

The generator's state lives only in the tracer, so it cannot cross a graph
break.  A break anywhere from the enter to the exit therefore moves to the
``with`` statement itself (``Trace.open_contexts``): the statement runs
natively with a real context manager (``cm(x)`` called again: creating one
runs no user code) and its body is captured in the resume function.
"""

from __future__ import annotations

import contextlib
import inspect
import types
import warnings

import torch

from ..errors import Unsupported, UserException
from ..guards import Guard
from .base import Value
from .constants import NONE, const, is_none
from .objects import ClassValue, WithExitValue

_enter_autocast = torch.amp.autocast_mode._enter_autocast
_exit_autocast = torch.amp.autocast_mode._exit_autocast


def _helper_code() -> types.CodeType:
    @contextlib.contextmanager
    def probe():
        yield
    return probe.__code__


#: the code of the function ``@contextlib.contextmanager`` returns (same for every use)
CONTEXTMANAGER_HELPER_CODE = _helper_code()


class OpenContext:
    """Where a traced generator context was entered: the ``with`` statement a
    graph break inside it moves to."""

    __slots__ = ("frame", "index", "step", "location", "name")

    def __init__(self, frame, name: str):
        self.frame = frame
        self.index = frame.ip - 1
        self.step = frame.step
        self.location = frame.location()
        self.name = name


class GeneratorContextValue(Value):
    """The object ``cm(*args, **kwargs)`` returns for a ``@contextlib.contextmanager``
    function ``cm``, created in the trace (a ``contextlib._GeneratorContextManager``).

    ``decorated`` is the value of ``cm`` itself, ``func`` the generator
    function it wraps.  Reconstructs, before it is entered, by calling ``cm``
    again with the same arguments.
    """

    __slots__ = ("decorated", "func", "args", "kwargs", "generator", "open")

    def __init__(self, decorated: Value, func: Value, args, kwargs):
        super().__init__()
        self.decorated = decorated
        self.func = func
        self.args = list(args)
        self.kwargs = dict(kwargs)
        #: the generator's frame once entered (suspended at its yield)
        self.generator = None
        self.open = None

    def python_type(self):
        return contextlib._GeneratorContextManager

    def children(self):
        return [self.decorated, *self.args, *self.kwargs.values()]

    def enter(self, tx) -> Value:
        """Run the generator up to its ``yield``; return the yielded value."""
        if self.generator is not None:
            raise Unsupported("entering a @contextmanager object twice", kind="unsupported_context")
        self.open = OpenContext(tx, getattr(getattr(self.func, "fn", None), "__qualname__", "contextmanager"))
        tx.trace.open_contexts.append(self.open)
        self.generator = tx.start_generator(self.func, self.args, self.kwargs)
        try:
            self.generator.run()
        except UserException:
            self._close(tx)
            raise
        if not self.generator.suspended:
            self._close(tx)
            tx.raise_python_exception(RuntimeError("generator didn't yield"))
        return self.generator.yielded_value

    def exit(self, tx, exc) -> Value:
        """Finish the generator after the body; ``exc`` is the body's exception value or None.

        Returns True when the exception is suppressed, as ``__exit__`` does."""
        gen = self.generator
        try:
            if exc is None:
                gen.resume()
                if gen.suspended:
                    tx.raise_python_exception(RuntimeError("generator didn't stop"))
                return const(False)
            try:
                gen.throw(exc)
            except UserException as e:
                if e.value is exc:
                    return const(False)  # re-raised: not suppressed
                raise
            if gen.suspended:
                tx.raise_python_exception(RuntimeError("generator didn't stop after throw()"))
            return const(True)
        finally:
            self._close(tx)

    def _close(self, tx) -> None:
        opened = tx.trace.open_contexts
        if opened and opened[-1] is self.open:
            opened.pop()

    def reconstruct(self, cg):
        if self.generator is not None:
            raise Unsupported("a @contextmanager object after it was entered", kind="unreconstructable")
        cg.begin_call()
        cg.reconstruct(self.decorated)
        cg.call_with(self.args, self.kwargs)


class GeneratorContextExitValue(WithExitValue):
    """The bound ``__exit__`` of an entered :class:`GeneratorContextValue`, which
    ``BEFORE_WITH`` leaves on the stack.  Never reconstructed: a graph break
    while it is on the stack moves to the ``with`` statement."""

    __slots__ = ()

    def call(self, tx, args, kwargs):
        exc = args[1] if len(args) == 3 and not is_none(args[1]) else None
        return self.ctx.exit(tx, exc)

    def reconstruct(self, cg):
        raise Unsupported("the exit of a @contextmanager generator paused in the trace", kind="internal")


class AutocastClassValue(ClassValue):
    """The class ``torch.autocast`` (``torch.amp.autocast``); calling it with
    constant arguments makes an :class:`AutocastValue`."""

    __slots__ = ()

    def call(self, tx, args, kwargs):
        if not all(a.is_constant() for a in [*args, *kwargs.values()]):
            raise Unsupported("torch.autocast with non-constant arguments", kind="unsupported_context")
        values = [a.as_constant() for a in args]
        kw = {k: v.as_constant() for k, v in kwargs.items()}
        # The real constructor validates and resolves defaults exactly as an
        # eager call would; if it warns or raises, the call runs natively so
        # the user sees that.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                real = self.cls(*values, **kw)
            except Exception as e:
                raise Unsupported(f"torch.autocast(...) raises {type(e).__name__}: {e}", kind="unsupported_context",
                                  hint="the call runs natively so the error is raised as in Python") from None
        if caught:
            raise Unsupported(f"torch.autocast(...) warns: {caught[0].message}", kind="unsupported_context",
                              hint="the call runs natively so the warning is shown")
        given = inspect.signature(self.cls.__init__).bind(None, *values, **kw).arguments
        if given.get("dtype") is None or given.get("cache_enabled") is None:
            # defaults read from process-wide autocast settings
            tx.guards.add(Guard("AUTOCAST_DEFAULTS", None, (real.device, torch.get_autocast_dtype(real.device),
                                                            torch.is_autocast_cache_enabled())))
        return AutocastValue(real.device, real.fast_dtype, real._enabled, real._cache_enabled)


class AutocastValue(Value):
    """A ``torch.autocast(device_type, dtype, enabled, cache_enabled)`` object
    created in the trace (arguments resolved).  Reconstructs as a new
    ``torch.autocast`` with the same resolved arguments."""

    __slots__ = ("args", "node", "mode")

    def __init__(self, device: str, dtype, enabled: bool, cache_enabled: bool):
        super().__init__()
        self.args = (device, dtype, enabled, cache_enabled)
        self.node = None
        self.mode = None

    def python_type(self):
        return torch.autocast

    def enter(self, tx) -> Value:
        if self.node is not None:
            raise Unsupported("entering a torch.autocast object twice", kind="unsupported_context")
        self.node = tx.graph.create_node("call_function", _enter_autocast, self.args, {}, None, where=tx)
        self.mode = _enter_autocast(*self.args)
        tx.trace.open_autocasts.append(self)
        return self

    def exit(self, tx) -> Value:
        self.close(tx.trace)
        return NONE

    def close(self, trace) -> None:
        """Leave the block, in the graph and in the tracer's real state."""
        trace.graph.create_node("call_function", _exit_autocast, (self.node,), {}, None)
        _exit_autocast(self.mode)
        trace.open_autocasts.remove(self)

    def reconstruct(self, cg):
        cg.push_callable(torch.autocast)
        for a in self.args:
            cg.load_object(a)
        cg.call(len(self.args))
