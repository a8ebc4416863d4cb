"""CPython's own TypeError for a call of a C builtin that does not fit its
signature.

The wording of these errors is the builtin's argument parser's and changes
between versions (3.13's parsers say ``min() got an unexpected keyword
argument 'foo'`` where 3.11's said ``'foo' is an invalid keyword argument for
min()``; ``enumerate`` words it by hand), so bytegraph never writes it: once
a handler's model of the signature says a call does not fit, the running
interpreter's builtin is called with placeholders of the same shape (as many
positional arguments, the same keyword names).  Builtins check the shape of
a call before they look at any argument, so the placeholders reach nothing.
"""

from __future__ import annotations

from ..errors import Unsupported


def raise_signature_error(tx, fn, args, kwargs) -> None:
    """Raise (in the traced program) the TypeError the real ``fn`` raises for
    a call with ``len(args)`` positional arguments and ``kwargs``' keyword
    names.  Only for calls the handler knows do not fit: should the real
    builtin accept the shape after all, the model is wrong and the call is
    unsupported rather than guessed."""
    try:
        fn(*[None] * len(args), **dict.fromkeys(kwargs))
    except TypeError as e:
        tx.raise_python_exception(TypeError(*e.args))
    except Exception:  # noqa: BLE001 - anything else is not a signature error
        pass
    name = getattr(fn, "__qualname__", repr(fn))
    raise Unsupported(f"{name}() called with {len(args)} positional argument(s) and keywords {sorted(kwargs)}: "
                      "bytegraph's model of its signature rejects a call the builtin accepts",
                      kind="unsupported_builtin")
