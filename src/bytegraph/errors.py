"""Error types a bytegraph user can see, and the record that describes a break.

Taxonomy (DESIGN.md §6):

* ``Unsupported``       -- the tracer met a construct it cannot capture.  Inside
                           bytegraph it is the signal to break/fall back; a user sees
                           it only through ``GraphBreakError`` under ``fullgraph=True``.
* ``GraphBreakError``   -- ``fullgraph=True`` and the frame could not be captured whole.
* ``BackendError``      -- the backend raised, or returned something not callable.
* ``RecompileError``    -- a recompile under ``set_stance("fail_on_recompile")``.
* ``InternalError``     -- a bug in bytegraph; only raised with ``config.raise_on_error``.
* ``InvalidArgument`` / ``InvalidArgumentType`` -- a bad argument to an API function
                           (also ValueError/TypeError, and RuntimeError as torch.compile raises).

Exceptions raised by the *user's* code are never wrapped: they propagate unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class UserLocation:
    """A place in the user's source: ``filename:lineno`` plus the function name."""

    filename: str
    lineno: Optional[int]
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"


@dataclasses.dataclass(frozen=True)
class BreakRecord:
    """Why a frame (or part of one) was not captured.

    ``kind`` is a short stable identifier (``"unsupported_builtin"``,
    ``"data_dependent_branch"``, ...) that tests and tools may match on;
    ``explanation`` and ``hint`` are for people.

    Example::

        >>> r = BreakRecord("print", "call to print()", None, "move print out")
        >>> r.kind
        'print'
    """

    kind: str
    explanation: str
    #: where the construct is (the innermost frame: perhaps a library's line)
    location: Optional[UserLocation]
    hint: str = ""
    #: the stack of inlined frames down to ``location``, formatted as a
    #: traceback's entries, outermost first ("" when unknown)
    stack: str = ""
    #: the innermost frame of the user's own code on that stack (not the
    #: standard library's nor an installed package's), when it differs from ``location``
    user_location: Optional[UserLocation] = None

    def __str__(self) -> str:
        if self.user_location is not None and self.user_location != self.location:
            where = f" at {self.user_location}, inside {self.location}"
        else:
            where = f" at {self.location}" if self.location else ""
        hint = f"\n    hint: {self.hint}" if self.hint else ""
        stack = ""
        if self.stack.count('  File "') > 1:
            stack = "\n    stack (innermost last):\n" + "".join(f"    {line}\n" for line in self.stack.splitlines())
            stack = stack.rstrip("\n")
        return f"[{self.kind}] {self.explanation}{where}{hint}{stack}"


class BytegraphError(Exception):
    """Base class of every error bytegraph itself raises."""


class Unsupported(BytegraphError):
    """The tracer cannot capture a construct.

    Raised by value and opcode handlers; the tracer attaches the user's
    location before the frame breaks or falls back.

    Example::

        >>> raise Unsupported("call to print()", kind="print", hint="remove print")
        Traceback (most recent call last):
        ...
        bytegraph.errors.Unsupported: [print] call to print()
    """

    def __init__(self, explanation: str, *, kind: str = "unsupported", hint: str = ""):
        super().__init__(explanation)
        self.kind = kind
        self.explanation = explanation
        self.hint = hint
        self.location: Optional[UserLocation] = None
        self.stack = ""
        self.user_location: Optional[UserLocation] = None
        #: guards that hold while the construct stays unsupported (a cache miss
        #: that a later call would see as a hit): the entry that breaks here
        #: keeps them, so a later call that could be captured recompiles
        self.recompile_guards: tuple = ()

    def record(self) -> BreakRecord:
        return BreakRecord(self.kind, self.explanation, self.location, self.hint, self.stack, self.user_location)

    def __str__(self) -> str:
        return str(self.record())


class GraphBreakError(BytegraphError):
    """``fullgraph=True`` was requested but the frame could not be captured whole.

    Example::

        >>> import bytegraph, torch
        >>> @bytegraph.compile(fullgraph=True, backend="eager")
        ... def f(x):
        ...     print("hi")
        ...     return x + 1
        >>> f(torch.ones(1))  # doctest: +SKIP
        bytegraph.errors.GraphBreakError: [print] ... at demo.py:3 in f
    """

    def __init__(self, record: BreakRecord):
        super().__init__(str(record))
        self.record = record


class BackendError(BytegraphError):
    """The backend raised while compiling a graph, or returned a non-callable."""

    def __init__(self, backend_name: str, message: str):
        super().__init__(f"backend {backend_name!r} failed: {message}")
        self.backend_name = backend_name


class RecompileError(BytegraphError):
    """Under ``bytegraph.set_stance("fail_on_recompile")``, a compiled function
    met inputs that no cache entry covers.

    Example::

        >>> import bytegraph, torch
        >>> f = bytegraph.compile(lambda x: x + 1, backend="eager")
        >>> _ = f(torch.ones(2))
        >>> with bytegraph.set_stance("fail_on_recompile"):
        ...     f(torch.ones(3))  # doctest: +SKIP
        bytegraph.errors.RecompileError: <lambda> (demo.py:2) would recompile: ...
    """


class InternalError(BytegraphError):
    """A bug inside bytegraph (only surfaced with ``config.raise_on_error``)."""


class InvalidArgument(BytegraphError, ValueError, RuntimeError):
    """An argument of ``bytegraph.compile`` (or ``set_stance``, ...) has a value
    it does not take: an unknown backend, mode, Inductor option or stance,
    ``dynamic="auto"``.  Raised when the call is made, never at the first call
    of the compiled function.  It is also a ``ValueError`` (Python's
    convention) and a ``RuntimeError`` (what ``torch.compile`` raises for the
    same arguments), so code written for either catches it.

    Example::

        >>> import bytegraph
        >>> bytegraph.compile(lambda x: x, backend="no_such_backend")  # doctest: +SKIP
        bytegraph.errors.InvalidArgument: unknown backend 'no_such_backend'; valid backends: ...
    """


class InvalidArgumentType(BytegraphError, TypeError, RuntimeError):
    """An argument of ``bytegraph.compile`` (or another API function) has a
    type it does not take (``fullgraph=1``, ``options=[...]``, a backend that is
    neither a name nor a callable).  Also a ``TypeError`` and a ``RuntimeError``.

    Example::

        >>> import bytegraph
        >>> bytegraph.compile(lambda x: x, fullgraph=1)  # doctest: +SKIP
        bytegraph.errors.InvalidArgumentType: fullgraph must be True or False, not 1
    """


class UserException(Exception):
    """Internal: the traced program raised ``value`` (a symbolic exception).

    Used to unwind symbolic frames until an exception-table handler takes it;
    never escapes bytegraph.
    """

    def __init__(self, value):
        super().__init__(value)
        self.value = value
