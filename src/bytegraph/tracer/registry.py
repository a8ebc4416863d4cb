"""Which Python versions an opcode handler serves.

Handlers are methods of :class:`~bytegraph.tracer.frame.Frame` named after
the (normalized, see ``bytecode.versions``) opcode.  One that exists only on
some versions says so with :func:`serves`; the dispatch table of the running
interpreter leaves the others out, so a newcomer sees at the handler which
versions compile to that opcode.

Example::

    >>> class Ops:
    ...     @serves(since=(3, 13))
    ...     def TO_BOOL(self, ins): ...
    >>> Ops.TO_BOOL.serves_versions
    ((3, 13), None)
"""

from __future__ import annotations

from ..bytecode.versions import SPEC

_RUNNING = SPEC.version


def serves(since=None, until=None):
    """Mark an opcode handler as serving the Python versions ``since``..``until`` (both inclusive)."""
    def mark(fn):
        fn.serves_versions = (since, until)
        return fn
    return mark


def serves_running(fn) -> bool:
    """Whether handler ``fn`` serves the running interpreter."""
    since, until = getattr(fn, "serves_versions", (None, None))
    return (since is None or _RUNNING >= since) and (until is None or _RUNNING <= until)
