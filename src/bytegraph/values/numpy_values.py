"""NumPy in model code: functions of NumPy called on Python constants.

``inputs_embeds *= np.sqrt(self.d_model)`` computes a number from constants:
NumPy's ufuncs and its array functions are pure on numbers, so the call is
folded while tracing (its inputs are already guarded as constants) and the
NumPy scalar it returns is a graph constant, passed to the tensor operation
as the program passes it (so the operation's type promotion is eager's).
Anything else -- an ``out=`` argument, a result that is an array (mutable),
a warning or floating-point error NumPy would report -- breaks cleanly.
The same functions called on arrays computed from tensors (``x.numpy()``)
become graph nodes: see values/ndarrays.py.
"""

from __future__ import annotations

import sys
import warnings

from ..errors import Unsupported
from .base import Value
from .constants import const
from .objects import ClassValue

#: NumPy's array functions that are pure and whose results on numbers are numbers
_PURE_FUNCTIONS = frozenset({
    "prod", "sum", "mean", "amax", "amin", "max", "min", "round", "around", "clip", "cumsum", "cumprod",
    "median", "std", "var", "ptp", "average", "dot", "inner", "floor_divide", "isclose", "allclose",
    "array_equal", "ndim", "size", "shape", "result_type", "promote_types", "can_cast", "iscomplexobj",
    "isrealobj", "isscalar", "deg2rad", "rad2deg", "nan_to_num", "real", "imag", "angle", "sinc", "log2",
    "gcd", "lcm",
})


def numpy_module():
    """NumPy if the program imported it (bytegraph never imports it itself)."""
    return sys.modules.get("numpy")


def is_numpy_callable(obj) -> bool:
    """A NumPy ufunc, or one of NumPy's array functions."""
    np = numpy_module()
    if np is None:
        return False
    if isinstance(obj, np.ufunc):
        # NumPy's own (np.frompyfunc makes ufuncs that run Python code)
        return _public(obj)
    from .ndarrays import _FUNCTIONS
    if obj is np.asarray or obj is np.array:  # (by identity: no attribute of a user object is read)
        return True
    return type(obj).__name__ == "_ArrayFunctionDispatcher" and type(obj).__module__ == "numpy" \
        and getattr(obj, "__name__", None) in _PURE_FUNCTIONS | _FUNCTIONS and _public(obj)


def _public(fn) -> bool:
    np = numpy_module()
    name = getattr(fn, "__name__", None)
    return isinstance(name, str) and getattr(np, name, None) is fn


def is_numpy_scalar(obj) -> bool:
    """A NumPy number or bool (``np.float64(2.0)``): immutable, a constant."""
    np = numpy_module()
    return np is not None and isinstance(obj, (np.number, np.bool_))


def _constant_argument(v: Value):
    """The Python object for an argument that is a known number, or a
    tuple/list of them (NumPy reads, never writes, its inputs)."""
    from .containers import ListValue, TupleValue
    if isinstance(v, (TupleValue, ListValue)):
        items = [_constant_argument(x) for x in v.items]
        return items if isinstance(v, ListValue) else tuple(items)
    if not v.is_constant():
        raise Unsupported(f"a NumPy function called on a {v.type_name()}", kind="numpy",
                          hint="NumPy calls on tensors or arrays run natively between graphs")
    obj = v.as_constant()
    if not (type(obj) in (int, float, bool, complex, str, type(None)) or is_numpy_scalar(obj)
            or isinstance(obj, tuple)):
        raise Unsupported(f"a NumPy function called on a {type(obj).__name__}", kind="numpy")
    return obj


class NumpyFunctionValue(Value):
    """A NumPy ufunc (``np.sqrt``) or pure array function (``np.prod``).

    A call on known numbers is folded into a constant; its identity is
    guarded where it was read (``np.sqrt`` through the module).  Reconstructs
    through its source or as the function object.
    """

    __slots__ = ("fn",)

    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def real_object(self):
        return (self.fn,)

    def python_type(self):
        return type(self.fn)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.fn

    def get_attr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return const(getattr(self.fn, name))
        return super().get_attr(tx, name)

    def call(self, tx, args, kwargs):
        from .ndarrays import CONSTRUCTORS, array_constructor, has_ndarray, numpy_call
        name = getattr(self.fn, "__name__", "?")
        if name in CONSTRUCTORS:
            return array_constructor(tx, name, args, kwargs)
        if has_ndarray([*args, *kwargs.values()]):
            # on arrays computed from tensors: a graph node (values.ndarrays)
            return numpy_call(tx, "function", name, list(args), dict(kwargs))
        if name not in _PURE_FUNCTIONS and not isinstance(self.fn, numpy_module().ufunc):
            raise Unsupported(f"np.{name}() of constants makes an array", kind="numpy",
                              hint="NumPy arrays of constants are not modelled; the call runs natively")
        return _fold(tx, self.fn, name, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.fn)

    def __repr__(self):
        return f"NumpyFunctionValue({getattr(self.fn, '__name__', self.fn)})"


def fold_call(tx, fn, args: list, kwargs: dict):
    """``fn(*args, **kwargs)`` on real constants, now, as a constant fold.

    NumPy scalars warn about floating-point problems (``np.float64(1) / 0``,
    an int8 overflow): a warning is an effect eager shows on every call, so
    such a fold breaks (the operation runs natively).  The program's own
    exceptions are raised into the trace."""
    if not any(type(a).__module__ == "numpy" for a in (*args, *kwargs.values())):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            tx.raise_python_exception(e)
    np = numpy_module()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with np.errstate(all="raise"):
                return fn(*args, **kwargs)
    except (Warning, FloatingPointError) as e:
        raise Unsupported(f"{getattr(fn, '__name__', fn)}() of NumPy scalars reports {type(e).__name__}: {e}",
                          kind="numpy", hint="the operation runs natively, where NumPy warns") from None
    except Exception as e:
        tx.raise_python_exception(e)


def _fold(tx, fn, name: str, args, kwargs) -> Value:
    """``fn(*args, **kwargs)`` on known numbers, now; its result a constant."""
    if any(k in ("out", "where") for k in kwargs):
        raise Unsupported(f"np.{name}() with out=/where=", kind="numpy")
    pos = [_constant_argument(a) for a in args]
    kw = {k: _constant_argument(v) for k, v in kwargs.items()}
    np = numpy_module()
    try:
        # a floating-point problem NumPy would warn about (sqrt(-1)) is an
        # effect eager shows: such a call runs natively
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with np.errstate(all="raise"):
                out = fn(*pos, **kw)
    except (TypeError, ValueError) as e:
        # NumPy's own refusal of the arguments (wrong count, bad type): the program gets it too
        tx.raise_python_exception(e)
    except Exception as e:  # noqa: BLE001 - FloatingPointError, RuntimeWarning, ...
        raise Unsupported(f"np.{name}() raised {type(e).__name__} while folding", kind="numpy") from None
    if type(out) in (int, float, bool, complex) or is_numpy_scalar(out):
        return const(out)
    if isinstance(out, tuple) and all(type(o) in (int, float, bool) or is_numpy_scalar(o) for o in out):
        return const(out)
    raise Unsupported(f"np.{name}() returns a {type(out).__name__}", kind="numpy",
                      hint="NumPy arrays are not modelled; the call runs natively")


def is_numpy_scalar_type(obj) -> bool:
    np = numpy_module()
    return np is not None and isinstance(obj, type) and issubclass(obj, (np.number, np.bool_)) \
        and obj.__module__ == "numpy"


class NumpyScalarTypeValue(ClassValue):
    """A NumPy scalar type (``np.float32``): a class whose call on a known
    number makes a NumPy scalar, folded to a constant."""

    __slots__ = ()

    def call(self, tx, args, kwargs):
        return _fold(tx, self.cls, self.cls.__name__, args, kwargs)
