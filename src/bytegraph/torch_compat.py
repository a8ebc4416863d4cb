"""The torch internals whose shape differs between the supported torch versions.

bytegraph supports torch 2.13.x and 2.14.x.  It leans on torch internals
(FakeTensorMode, ShapeEnv, fx, AOTAutograd, inductor's ``compile_fx``,
``torch._guards``, ``autograd.Function``); where two supported versions
differ, the difference is resolved HERE, once, by probing what the installed
torch has (not by comparing version numbers), and the rest of the package
imports the resolved names.  Nothing else in the package looks at
``torch.__version__``.

Example::

    >>> from bytegraph import torch_compat
    >>> import torch
    >>> torch_compat.is_autograd_function_apply(torch.autograd.Function.__dict__["apply"])
    True
"""

from __future__ import annotations

import types

import torch

# --- autograd.Function.apply --------------------------------------------------
# torch 2.13: ``Function.apply`` is a Python classmethod (it binds default
# arguments, unwraps dead functorch wrappers, then calls the C
# ``_FunctionBase.apply``).  torch 2.14: ``Function.apply`` IS the C
# ``_FunctionBase.apply`` (a ``classmethod_descriptor``), which calls back into
# Python helpers itself, so ``MyFn.apply`` is a C method bound to ``MyFn``.
# Either way ``MyFn.apply(...)`` is one call bytegraph models as a single graph
# node, so it recognises both shapes.

_APPLY_ATTR = torch.autograd.Function.__dict__["apply"]

#: the Python function behind ``Function.apply`` when it is a Python
#: classmethod (torch 2.13), else None
FUNCTION_APPLY_PY = _APPLY_ATTR.__func__ if isinstance(_APPLY_ATTR, classmethod) else None

#: the C ``_FunctionBase.apply`` descriptor when ``Function.apply`` is that
#: descriptor itself (torch 2.14), else None
FUNCTION_APPLY_C = None if FUNCTION_APPLY_PY is not None else _APPLY_ATTR


def bound_apply(cls):
    """torch's own ``Function.apply`` bound to ``cls`` (not an ``apply`` that
    ``cls`` overrides): what ``super().apply`` in such an override reaches."""
    return _APPLY_ATTR.__get__(None, cls)


def is_autograd_function_apply(obj) -> bool:
    """Whether ``obj`` is torch's ``Function.apply`` as stored on the class:
    the Python function or the C descriptor, or either bound to a Function
    subclass (``MyFn.apply``, or ``super().apply`` in an override).
    """
    if obj is None:
        return False
    if obj is FUNCTION_APPLY_PY or obj is _APPLY_ATTR:
        return True
    if type(obj) is types.MethodType:  # 2.13: the classmethod bound to a class
        return FUNCTION_APPLY_PY is not None and obj.__func__ is FUNCTION_APPLY_PY \
            and isinstance(obj.__self__, type) and issubclass(obj.__self__, torch.autograd.Function)
    if FUNCTION_APPLY_C is not None and type(obj) is types.BuiltinMethodType:
        owner = obj.__self__
        return isinstance(owner, type) and issubclass(owner, torch.autograd.Function) \
            and obj.__name__ == "apply" and obj == bound_apply(owner)
    return False
