"""The continuation of an inner frame, passed to its caller's continuation
after a graph break in inlined calls (:class:`bytegraph.resume.Continuation`)."""

from __future__ import annotations

from typing import List

from .base import Value


class ContinuationValue(Value):
    """A pre-existing :class:`~bytegraph.resume.Continuation`: the rest of an
    inner frame that the traced frame's call instruction runs.  Calling it
    inlines the inner frame's resume function with the values it carries (its
    ``fn`` and ``args``, read through the object's source and guarded there);
    the call's own arguments are placeholders and are ignored, as at run time.

    The inlined frame is not a direct call (the value is not a user
    function), so a break inside it splits the traced frame at this call,
    which then runs natively.  Nothing rebuilds it: the object is consumed.
    """

    __slots__ = ("fn", "args")

    def __init__(self, fn: Value, args: List[Value], source):
        super().__init__(source)
        self.fn, self.args = fn, args

    def python_type(self):
        from ..resume import Continuation
        return Continuation

    def call(self, tx, args, kwargs):
        from ..resume import Continuation
        # Run natively, the continuation empties itself; inlined, the graph's
        # code must do so too, or the inner frame's values would live on in
        # it until this frame returns.
        tx.side_effects.defer_call(Continuation.release, [self])
        return self.fn.call(tx, list(self.args), {})
