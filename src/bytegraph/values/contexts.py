"""Context managers written as generators with ``@contextlib.contextmanager``.

``with cm(x) as y: body`` is traced whole: entering runs the generator
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
import types

from ..errors import Unsupported, UserException
from .base import Value
from .constants import const
from .objects import WithExitValue


def _helper_code() -> types.CodeType:
    @contextlib.contextmanager
    def probe():
        yield
    return probe.__code__


#: the code of the function ``@contextlib.contextmanager`` returns (same for every use)
CONTEXTMANAGER_HELPER_CODE = _helper_code()


def is_contextmanager_function(fn) -> bool:
    """Is ``fn`` the result of decorating a function with ``@contextlib.contextmanager``?"""
    return isinstance(fn, types.FunctionType) and fn.__code__ is CONTEXTMANAGER_HELPER_CODE


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
        cg.emit("PUSH_NULL")
        cg.reconstruct(self.decorated)
        cg.call_with(self.args, self.kwargs)


class GeneratorContextExitValue(WithExitValue):
    """The bound ``__exit__`` of an entered :class:`GeneratorContextValue`, which
    ``BEFORE_WITH`` leaves on the stack.  Never reconstructed: a graph break
    while it is on the stack moves to the ``with`` statement."""

    __slots__ = ()

    def call(self, tx, args, kwargs):
        exc = args[1] if len(args) == 3 and not _is_none(args[1]) else None
        return self.ctx.exit(tx, exc)

    def reconstruct(self, cg):
        raise Unsupported("the exit of a @contextmanager generator paused in the trace", kind="internal")


def _is_none(v) -> bool:
    return v.is_constant() and v.as_constant() is None
