"""torch's own compiler switches, followed by bytegraph.

A torch.compile user changes how compiled code behaves with torch's functions,
and expects them to mean the same for bytegraph-compiled code:

* ``torch.compiler.set_stance(...)`` (and ``torch._dynamo.set_stance``), as a
  call, a ``with`` block or a decorator: while torch's stance is not
  ``"default"`` it is bytegraph's stance too (``decorators.set_stance``);
* ``torch.compiler.reset()`` and ``torch._dynamo.reset()`` ("clear all compile
  caches") also drop bytegraph's entries and counters (``bytegraph.reset()``).

bytegraph never imports ``torch._dynamo``.  ``torch.compiler``'s two
functions are wrapped when bytegraph is imported (torch loads that module
itself); the internals they reach in ``torch._dynamo`` (its ``reset`` and the
one function every stance change goes through, ``_set_stance``) are wrapped
as soon as ``torch._dynamo`` is loaded -- at once if it already is, else by
an import hook that lets its import run and then wraps them.

Example::

    >>> import bytegraph, torch
    >>> f = bytegraph.compile(lambda x: x + 1, backend="eager")
    >>> with torch.compiler.set_stance("force_eager"):
    ...     _ = f(torch.ones(1))
    >>> len(f._entries)
    0
"""

from __future__ import annotations

import functools
import importlib.abc
import sys

#: marks a function of torch's that this module wrapped (never wrapped twice)
_MARK = "__bytegraph_follows__"


def _wrap(owner, name: str, after) -> None:
    """Replace ``owner.name`` by a function that calls it, then ``after(result)``."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def follows(*args, **kwargs):
        result = original(*args, **kwargs)
        after(result)
        return result

    setattr(follows, _MARK, True)
    setattr(owner, name, follows)


def _bytegraph_reset(_result=None) -> None:
    from .api import reset
    reset()


def _mirror_stance(_result=None) -> None:
    """Make torch's current stance bytegraph's (read after every change)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    stance = getattr(eval_frame, "_stance", None)
    from .decorators import follow_torch_stance
    follow_torch_stance(getattr(stance, "stance", "default"))


def _follow_dynamo() -> None:
    """Wrap torch._dynamo's ``reset`` and ``_set_stance`` (it is loaded)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return
    _wrap(dynamo, "reset", _bytegraph_reset)
    for module in ("torch._dynamo.decorators", "torch._dynamo.eval_frame"):
        if module in sys.modules:
            # (decorators holds its own reference to eval_frame's function)
            _wrap(sys.modules[module], "_set_stance", _mirror_stance)


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch._dynamo`` is imported, the finder
    that really has it supplies the spec, whose module, once executed, is followed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            _follow_dynamo()
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        try:
            loader.exec_module = exec_module   # (this spec's loader only)
        except AttributeError:
            return None
        return spec


def install() -> None:
    """Follow torch's switches from now on (bytegraph's import calls it)."""
    import torch
    compiler = getattr(torch, "compiler", None)
    if compiler is not None:
        _wrap(compiler, "reset", _bytegraph_reset)
        # torch.compiler.set_stance loads torch._dynamo and sets the stance before
        # the hook below could see it: mirror once afterwards, then follow its internals
        _wrap(compiler, "set_stance", lambda _r: (_follow_dynamo(), _mirror_stance()))
    if "torch._dynamo" in sys.modules:
        _follow_dynamo()
    elif not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())
