"""Grad-mode context managers (``torch.no_grad()`` and friends) and the bound
``__exit__`` a ``with`` statement keeps on the stack."""

from __future__ import annotations

import types
from typing import Optional

import torch

from .base import Value
from .constants import NONE


class GradModeValue(Value):
    """``torch.no_grad()``, ``torch.enable_grad()``, ``torch.set_grad_enabled(b)``
    used as a context manager (or ``set_grad_enabled`` as a call).

    Entering records ``torch._C._set_grad_enabled`` in the graph and switches
    the tracer's real grad mode so fake tensors get the right
    ``requires_grad``; leaving restores the previous mode.
    """

    __slots__ = ("enabled", "previous")

    def __init__(self, enabled: bool):
        super().__init__()
        self.enabled = enabled
        self.previous: Optional[bool] = None

    def python_type(self):
        return {False: torch.no_grad, True: torch.enable_grad}[self.enabled]

    def enter(self, tx) -> Value:
        self.previous = torch.is_grad_enabled()
        tx.set_grad_mode(self.enabled)
        return NONE

    def exit(self, tx) -> Value:
        tx.set_grad_mode(self.previous)
        return NONE

    def reconstruct(self, cg):
        cg.push_callable(torch.enable_grad if self.enabled else torch.no_grad)
        cg.call(0)


class WithExitValue(Value):
    """The bound ``__exit__`` that ``BEFORE_WITH`` leaves on the stack."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: Value):
        super().__init__()
        self.ctx = ctx

    def python_type(self):
        return types.MethodType

    def children(self):
        return (self.ctx,)

    def call(self, tx, args, kwargs):
        self.ctx.exit(tx)
        return NONE

    def reconstruct(self, cg):
        # Across a graph break the context is re-entered natively; its
        # __exit__ stays on the stack.  A grad-mode context must restore the
        # mode it found when first entered, not the one at re-entry (the
        # frame may itself have started inside the context), so that mode is
        # set first.
        previous = getattr(self.ctx, "previous", None)
        if previous is not None:
            cg.push_callable(torch._C._set_grad_enabled)
            cg.load_object(previous)
            cg.call(1)
            cg.emit("POP_TOP")
        cg.reconstruct(self.ctx)
        cg.emit("BEFORE_WITH")
        cg.emit("POP_TOP")
