"""Callables: user functions (inlined), nested functions made during tracing,
bound methods, and builtins/library functions dispatched through tables."""

from __future__ import annotations

import functools
import inspect
import operator
import types
from typing import Callable, Dict, List, Optional

import torch

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource, closure_cell_source
from .base import Value
from .cells import CellValue
from .constants import ConstantValue, const
from .containers import DictValue, TupleValue, str_key
from .autograd_function import FUNCTION_APPLY, call_autograd_function
from .contexts import CONTEXTMANAGER_HELPER_CODE, GeneratorContextValue
from .objects import ClassValue


def bind_arguments(tx, code: types.CodeType, fn_name: str, args: List[Value], kwargs: Dict[str, Value],
                   default_at: Callable[[int], Value], kwdefault_of: Callable[[str], Optional[Value]],
                   n_defaults: int) -> Dict[str, Value]:
    """Bind call arguments to the parameters of ``code`` as CPython does.

    Returns a mapping of parameter name to value; raises the same
    ``TypeError`` as Python (as a symbolic user exception) on a bad call:
    the checks run in CPython's order (keywords, then the positional count,
    then missing positional, then missing keyword-only arguments) with its
    messages; ``fn_name`` is the function's ``__qualname__``.
    """
    names = code.co_varnames
    n_pos = code.co_argcount
    n_kwonly = code.co_kwonlyargcount
    n_posonly = code.co_posonlyargcount
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
    out: Dict[str, Value] = {}
    pos_names = names[:n_pos]
    for name, value in zip(pos_names, args):
        out[name] = value
    extra = args[n_pos:]
    idx = n_pos + n_kwonly
    if has_varargs:
        out[names[idx]] = TupleValue(list(extra))
        idx += 1
    varkw: Optional[DictValue] = None
    if has_varkw:
        varkw = DictValue()
        out[names[idx]] = varkw
    kw_names = set(names[n_posonly:n_pos + n_kwonly])
    for key, value in kwargs.items():
        if key in kw_names:
            if key in out:
                tx.raise_python_exception(TypeError(f"{fn_name}() got multiple values for argument '{key}'"))
            out[key] = value
        elif varkw is not None:
            varkw.entries[str_key(key)] = (const(key), value)
        else:
            posonly = [n for n in names[:n_posonly] if n in kwargs]
            if posonly:
                tx.raise_python_exception(TypeError(
                    f"{fn_name}() got some positional-only arguments passed as keyword arguments: "
                    f"'{', '.join(posonly)}'"))
            tx.raise_python_exception(TypeError(f"{fn_name}() got an unexpected keyword argument '{key}'"))
    if extra and not has_varargs:
        kwonly_given = sum(1 for n in names[n_pos:n_pos + n_kwonly] if n in out)
        if n_defaults:
            sig, plural = f"from {n_pos - n_defaults} to {n_pos}", True
        else:
            sig, plural = str(n_pos), n_pos != 1
        given = len(args)
        kwonly_sig = (f" positional argument{'s' if given != 1 else ''} (and {kwonly_given} keyword-only "
                      f"argument{'s' if kwonly_given != 1 else ''})" if kwonly_given else "")
        tx.raise_python_exception(TypeError(
            f"{fn_name}() takes {sig} positional argument{'s' if plural else ''} but {given}{kwonly_sig} "
            f"{'was' if given == 1 and not kwonly_given else 'were'} given"))
    first_default = n_pos - n_defaults
    missing = [name for name in pos_names[:first_default] if name not in out]
    if missing:
        tx.raise_python_exception(TypeError(_missing_message(fn_name, "positional", missing)))
    for i, name in enumerate(pos_names[first_default:]):
        if name not in out:
            out[name] = default_at(i)
    missing = []
    for name in names[n_pos:n_pos + n_kwonly]:
        if name not in out:
            d = kwdefault_of(name)
            if d is None:
                missing.append(name)
            else:
                out[name] = d
    if missing:
        tx.raise_python_exception(TypeError(_missing_message(fn_name, "keyword-only", missing)))
    return out


def _missing_message(fn_name: str, kind: str, names: List[str]) -> str:
    """CPython's ``format_missing``: the names repr'd, joined in English."""
    names = [repr(n) for n in names]
    if len(names) == 1:
        text = names[0]
    elif len(names) == 2:
        text = f"{names[0]} and {names[1]}"
    else:
        text = ", ".join(names[:-2]) + f", {names[-2]}, and {names[-1]}"
    return f"{fn_name}() missing {len(names)} required {kind} argument{'' if len(names) == 1 else 's'}: {text}"


#: the functions behind ``nn.Module.__call__``
_MODULE_CALL_FUNCTIONS = frozenset({torch.nn.Module.__call__, torch.nn.Module._call_impl})


class UserFunctionValue(Value):
    """A pre-existing Python function (``types.FunctionType``); calls are inlined.

    Its identity is guarded where it came from; defaults and closure cells are
    read through sources below it (``fn.__defaults__[i]``,
    ``fn.__closure__[i]``), so their contents are guarded too.  Reconstructs
    through its source.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: types.FunctionType, source=None):
        super().__init__(source)
        self.fn = fn

    def real_object(self):
        return (self.fn,)

    def python_type(self):
        return types.FunctionType

    def get_attr(self, tx, name):
        src = AttrSource(self.source, name) if self.source is not None else None
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            # writable: read through the source, so a rename is guarded
            return tx.wrap(getattr(self.fn, name), src)
        if name == "__code__":
            return ConstantValue(self.fn.__code__)   # guarded whenever the function is
        if name in self.fn.__dict__:
            return tx.wrap(self.fn.__dict__[name], src)
        if not hasattr(self.fn, name):
            if self.source is not None:  # absent now: holds while it stays absent
                tx.guards.add(Guard("DICT_CONTAINS", AttrSource(self.source, "__dict__"), (name, False)))
            tx.raise_python_exception(AttributeError(f"'function' object has no attribute '{name}'"))
        if self.source is not None and name in ("__defaults__", "__kwdefaults__", "__globals__", "__dict__",
                                                  "__annotations__", "__closure__", "__self__",
                                                  "__type_params__"):
            return tx.wrap(getattr(self.fn, name), AttrSource(self.source, name))
        return super().get_attr(tx, name)

    def closure_cells(self, tx) -> List[CellValue]:
        cells = []
        for i, (name, cell) in enumerate(zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ())):
            src = closure_cell_source(self.source, i) if self.source is not None else None
            cells.append(tx.side_effects.cell_for(cell, name, src))
        return cells

    def call(self, tx, args, kwargs):
        fn = self.fn
        if fn.__code__ is CONTEXTMANAGER_HELPER_CODE:
            # cm(...) for a @contextlib.contextmanager function: the object only
            # records the call (no user code runs until it is entered)
            return GeneratorContextValue(self, self.closure_cells(tx)[0].read(tx), args, kwargs)
        if fn in _MODULE_CALL_FUNCTIONS and args:
            # nn.Module.__call__ reached explicitly (``super().__call__(x)`` in an
            # overridden __call__): the module call, hooks included, as call_module models it
            from .modules import NNModuleValue, call_module
            if isinstance(args[0], NNModuleValue):
                return call_module(tx, args[0], list(args[1:]), kwargs)
        if fn is FUNCTION_APPLY and args and isinstance(args[0], ClassValue) \
                and issubclass(args[0].cls, torch.autograd.Function):
            # MyFn.apply(...): one node calling the real apply (see autograd_function)
            return call_autograd_function(tx, args[0], list(args[1:]), kwargs)
        bound = self.bind(tx, args, kwargs)
        return tx.inline_call(fn.__code__, fn.__globals__, self.closure_cells(tx), bound, fn.__name__,
                              (self, list(args), dict(kwargs)))

    def bind(self, tx, args, kwargs) -> Dict[str, Value]:
        """The parameters of a call ``fn(*args, **kwargs)``, defaults read through the function's source."""
        fn = self.fn
        defaults = fn.__defaults__ or ()
        src = self.source

        def default_at(i):
            s = ItemSource(AttrSource(src, "__defaults__"), i) if src is not None else None
            return tx.wrap(defaults[i], s)

        def kwdefault_of(name):
            kwd = fn.__kwdefaults__ or {}
            if name not in kwd:
                return None
            s = ItemSource(AttrSource(src, "__kwdefaults__"), name) if src is not None else None
            return tx.wrap(kwd[name], s)

        return bind_arguments(tx, fn.__code__, fn.__qualname__, args, kwargs, default_at, kwdefault_of, len(defaults))

    def __repr__(self):
        return f"UserFunctionValue({self.fn.__qualname__})"


class NestedFunctionValue(Value):
    """A function object created by ``MAKE_FUNCTION`` during tracing (lambdas,
    nested ``def``s, comprehension bodies).

    Holds its code, globals, defaults and a closure of :class:`CellValue`s in
    ``co_freevars`` order.  Calls are inlined.  If it escapes the trace it is
    rebuilt with real cells (C6): ``MAKE_FUNCTION`` over a closure tuple whose
    root cells come from ``LOAD_CLOSURE``, pre-existing cells from their
    sources, and new cells as fresh ``CellType`` objects shared by identity.
    """

    __slots__ = ("code", "f_globals", "defaults", "kwdefaults", "closure", "qualname", "attrs", "annotations",
                 "made_parts")

    def __init__(self, code, f_globals, defaults: Optional[TupleValue], kwdefaults: Optional[DictValue],
                 closure: List[CellValue], qualname: str):
        super().__init__()
        self.code = code
        self.f_globals = f_globals
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.closure = closure
        self.qualname = qualname
        #: attributes set on the function during the trace (functools.wraps, fn.tag = ...)
        self.attrs: Dict[str, Value] = {}
        #: MAKE_FUNCTION's annotations: a tuple value of (name, annotation) pairs
        #: flattened, or None.  CPython turns it into the ``__annotations__``
        #: dict on first access; so does get_attr (the dict then lives in attrs).
        self.annotations: Optional[Value] = None
        #: the parts MAKE_FUNCTION was given (flag bit -> value), which 3.13's
        #: SET_FUNCTION_ATTRIBUTE adds to one by one; None when not made by it
        self.made_parts: Optional[dict] = None

    def python_type(self):
        return types.FunctionType

    def get_attr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        if name == "__name__":
            return const(self.code.co_name)
        if name == "__qualname__":
            return const(self.qualname)
        if name == "__code__":
            return ConstantValue(self.code)
        if name == "__module__":
            return const(self.f_globals.get("__name__"))
        if name == "__doc__":
            first = self.code.co_consts[0] if self.code.co_consts else None
            return const(first if isinstance(first, str) else None)
        if name == "__type_params__" and hasattr(types.FunctionType, "__type_params__"):
            # (3.12+; a generic ``def f[T]`` sets them by an intrinsic the trace breaks on)
            return const(())
        if name == "__annotations__":
            # made once, on first access, and the same dict ever after (edits to it stay)
            d = DictValue()
            if self.annotations is not None:
                pairs = self.annotations.unpack(tx)
                for i in range(0, len(pairs), 2):
                    d.setitem(tx, pairs[i], pairs[i + 1])
            self.attrs[name] = d
            return d
        return super().get_attr(tx, name)

    def set_attr(self, tx, name, value):
        if name in ("__code__", "__defaults__", "__kwdefaults__", "__closure__", "__globals__", "__dict__"):
            raise Unsupported(f"setting {name} of a function made in the trace", kind="unsupported_setattr")
        self.attrs[name] = value

    def call(self, tx, args, kwargs):
        defaults = self.defaults.items if self.defaults is not None else []

        def kwdefault_of(name):
            if self.kwdefaults is None:
                return None
            hit = self.kwdefaults.entries.get(str_key(name))
            return hit[1] if hit else None

        bound = bind_arguments(tx, self.code, self._qualname(), args, kwargs,
                               lambda i: defaults[i], kwdefault_of, len(defaults))
        return tx.inline_call(self.code, self.f_globals, self.closure, bound, self.code.co_name,
                              (self, list(args), dict(kwargs)))

    def _qualname(self) -> str:
        """What CPython names the function in its argument errors (a set ``__qualname__`` too)."""
        q = self.attrs.get("__qualname__")
        return q.as_constant() if q is not None and q.is_constant() else self.qualname

    def children(self):
        out = list(self.closure)
        if self.defaults is not None:
            out.append(self.defaults)
        if self.kwdefaults is not None:
            out.append(self.kwdefaults)
        if self.annotations is not None:
            out.append(self.annotations)
        out.extend(self.attrs.values())  # set on the function by reconstruct
        return out

    def reconstruct(self, cg):
        self._make(cg)
        for name, value in self.attrs.items():
            cg.emit("COPY", arg=1)
            cg.reconstruct(value)
            cg.emit("SWAP", arg=2)
            cg.emit("STORE_ATTR", name)

    def _make(self, cg):
        flags = 0
        if self.f_globals is cg.root_globals:
            if self.defaults is not None:
                cg.reconstruct(self.defaults)
                flags |= 0x01
            if self.kwdefaults is not None:
                cg.reconstruct(self.kwdefaults)
                flags |= 0x02
            if self._pending_annotations():
                cg.reconstruct(self.annotations)
                flags |= 0x04
            if self.closure:
                for cell in self.closure:
                    cg.reconstruct(cell)
                cg.emit("BUILD_TUPLE", arg=len(self.closure))
                flags |= 0x08
            cg.load_object(self.code)
            cg.make_function(flags)
            return
        # Another module's globals: MAKE_FUNCTION would bind the root's globals.
        cg.push_callable(_make_function)
        cg.load_object(self.code)
        cg.load_object(self.f_globals)
        for part in (self.defaults, self.kwdefaults, self.annotations if self._pending_annotations() else None):
            if part is None:
                cg.load_object(None)
            else:
                cg.reconstruct(part)
        for cell in self.closure:
            cg.reconstruct(cell)
        cg.emit("BUILD_TUPLE", arg=len(self.closure))
        cg.call(6)

    def _pending_annotations(self) -> bool:
        """Annotations to give MAKE_FUNCTION: not once read as a dict (that dict is stored after)."""
        return self.annotations is not None and "__annotations__" not in self.attrs

    def __repr__(self):
        return f"NestedFunctionValue({self.qualname})"


def _make_function(code, f_globals, defaults, kwdefaults, annotations, closure):
    fn = types.FunctionType(code, f_globals, code.co_name, defaults, closure or None)
    fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        # MAKE_FUNCTION's flat (name, value, ...) tuple, as the dict CPython makes of it
        fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2]))
    fn.__qualname__ = code.co_qualname
    return fn


class BoundMethodValue(Value):
    """``obj.method``: a function value bound to a receiver value."""

    __slots__ = ("func", "receiver")

    def __init__(self, func: Value, receiver: Value, source=None):
        super().__init__(source)
        self.func = func
        self.receiver = receiver

    def python_type(self):
        return types.MethodType

    def call(self, tx, args, kwargs):
        return self.func.call(tx, [self.receiver] + list(args), kwargs)

    def get_attr(self, tx, name):
        if name == "__self__":
            return self.receiver
        if name == "__func__":
            return self.func
        return self.func.get_attr(tx, name)

    def children(self):
        return (self.func, self.receiver)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.push_callable(types.MethodType)
        cg.reconstruct(self.func)
        cg.reconstruct(self.receiver)
        cg.call(2)


@functools.lru_cache(maxsize=None)
def _text_signature(fn) -> Optional[inspect.Signature]:
    """The signature a C function declares (Argument Clinic), or None."""
    if type(fn) is not types.BuiltinFunctionType:
        return None
    try:
        return inspect.signature(fn)
    except (ValueError, TypeError):
        return None


def check_builtin_call(tx, fn, args, kwargs) -> None:
    """CPython's TypeError for a call of C function ``fn`` that does not fit
    its declared signature (too few or many arguments, an unknown keyword),
    raised before any handler looks at the arguments, as the C code parses
    them before doing anything."""
    sig = _text_signature(fn)
    if sig is None:
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        pass
    else:
        return
    # The exact message is CPython's own: the parser rejects a call with as
    # many placeholders before the function runs
    try:
        fn(*[None] * len(args), **{k: None for k in kwargs})
    except TypeError as e:
        tx.raise_python_exception(e)
    except Exception:  # noqa: BLE001 - the parser accepted it after all
        pass
    raise Unsupported(f"a call of {fn.__name__}() that its signature does not describe", kind="unsupported_builtin")


class BuiltinValue(Value):
    """A builtin or library function bytegraph knows how to model (``len``,
    ``isinstance``, ``operator.add``, ``math.sqrt``, ...).

    ``handler(tx, args, kwargs)`` implements the call symbolically; builtins
    without a handler are unsupported.  Reconstructs as the function object
    itself (a code constant).
    """

    __slots__ = ("fn", "handler")

    def __init__(self, fn, handler, source=None):
        super().__init__(source)
        self.fn = fn
        self.handler = handler


    def reads_caller_frame(self) -> bool:
        from .frame_blind import c_function_reads_caller_frame, is_explicit_break
        return not is_explicit_break(self.handler) and c_function_reads_caller_frame(self.fn)

    def real_object(self):
        return (self.fn,)

    def python_type(self):
        return type(self.fn)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.fn

    def call(self, tx, args, kwargs):
        check_builtin_call(tx, self.fn, args, kwargs)
        return self.handler(tx, list(args), kwargs)

    def get_attr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return const(getattr(self.fn, name))
        if type(self.fn) is type and name in vars(self.fn):
            # a builtin type's own method that is a modelled builtin itself (int.from_bytes)
            from .builtins_table import builtin_handler
            try:
                attr = getattr(self.fn, name)
            except AttributeError:  # a descriptor of the type's own (type.__abstractmethods__)
                attr = None
            handler = builtin_handler(attr) if attr is not None else None
            if handler is not None:
                return BuiltinValue(attr, handler)
        return super().get_attr(tx, name)

    def reconstruct(self, cg):
        cg.load_object(self.fn)

    def __repr__(self):
        return f"BuiltinValue({getattr(self.fn, '__name__', self.fn)})"


class PartialValue(Value):
    """A ``functools.partial`` object: made during tracing, or pre-existing
    (``source`` set; its ``args`` tuple and ``keywords`` dict are then the
    wrapped real ones, so their identity holds and a write to ``p.keywords``
    changes what a later call passes, as in CPython).

    A partial made in the trace keeps its parts as values; ``p.args`` and
    ``p.keywords`` of it are its own objects (one each), so once read it
    cannot be rebuilt after the graph (``partial(...)`` would make new ones).
    """

    __slots__ = ("func", "args", "kwargs", "args_value", "keywords", "opaque_parts", "exposed")

    def __init__(self, func: Value, args: List[Value], kwargs: Dict[str, Value], *, args_value=None,
                 keywords=None, opaque_parts: bool = False):
        super().__init__()
        self.func = func
        self.args = args
        self.kwargs = kwargs
        #: the ``args`` tuple as a value (pre-existing, or read once)
        self.args_value = args_value
        #: the ``keywords`` dict as a value (pre-existing, or read once): the call reads it
        self.keywords = keywords
        #: made from a pre-existing partial that CPython may have flattened into this one
        self.opaque_parts = opaque_parts
        self.exposed = False

    def python_type(self):
        return functools.partial

    def _kwargs(self):
        if self.keywords is None:
            return self.kwargs
        return {k.as_constant(): v for k, v in self.keywords.entries.values()}

    def call(self, tx, args, kwargs):
        return self.func.call(tx, self.args + list(args), {**self._kwargs(), **kwargs})

    def get_attr(self, tx, name):
        if name in ("func", "args", "keywords") and self.opaque_parts:
            raise Unsupported(f"partial.{name} of a partial of a pre-existing partial", kind="unsupported_attribute")
        if name == "func":
            return self.func
        if name == "args":
            if self.args_value is None:
                self.args_value = TupleValue(list(self.args))
                self.exposed = True
            return self.args_value
        if name == "keywords":
            if self.keywords is None:
                from .containers import DictValue
                self.keywords = DictValue.from_pairs([(const(k), v) for k, v in self.kwargs.items()])
                self.exposed = True
            return self.keywords
        return super().get_attr(tx, name)

    def children(self):
        extra = [v for v in (self.args_value, self.keywords) if v is not None]
        return [self.func, *self.args, *self.kwargs.values(), *extra]

    def reconstruct(self, cg):
        if self.source is not None:
            self.source.emit_load(cg)
            return
        if self.exposed:
            raise Unsupported("a partial made in the trace whose args/keywords were read, after the graph",
                              kind="unreconstructable", hint="the frame runs eagerly")
        cg.push_callable(functools.partial)
        cg.reconstruct(self.func)
        cg.call_with(self.args, self._kwargs(), leading=1)


class GetterValue(Value):
    """``operator.itemgetter(*keys)`` or ``operator.attrgetter(*names)`` created
    in the trace (constant keys).  Calls index or read attributes symbolically;
    reconstructs by calling the same constructor again."""

    __slots__ = ("kind", "keys")

    def __init__(self, kind, keys: tuple):
        super().__init__()
        self.kind = kind  # operator.itemgetter or operator.attrgetter
        self.keys = keys

    def python_type(self):
        return self.kind

    def _one(self, tx, obj: Value, key) -> Value:
        if self.kind is operator.itemgetter:
            from .operators import getitem
            return getitem(tx, obj, const(key))
        for name in key.split("."):
            obj = obj.get_attr(tx, name)
        return obj

    def call(self, tx, args, kwargs):
        if len(args) != 1 or kwargs:
            tx.raise_python_exception(TypeError(f"{self.kind.__name__} expected 1 argument, got {len(args)}"))
        values = [self._one(tx, args[0], k) for k in self.keys]
        return values[0] if len(values) == 1 else TupleValue(values)

    def reconstruct(self, cg):
        cg.push_callable(self.kind)
        for k in self.keys:
            cg.load_object(k)
        cg.call(len(self.keys))


class WrapsValue(Value):
    """The decorator ``functools.wraps(wrapped)`` returns, made in the trace:
    applied to a function made in the trace, it copies ``wrapped``'s name,
    qualname, module, doc, annotations and ``__dict__`` onto it and sets
    ``__wrapped__``, as ``functools.update_wrapper`` does.  Reconstructs as
    ``functools.wraps(wrapped)``."""

    __slots__ = ("wrapped",)

    def __init__(self, wrapped: Value):
        super().__init__()
        self.wrapped = wrapped

    def python_type(self):
        return functools.partial

    def children(self):
        return (self.wrapped,)

    def call(self, tx, args, kwargs):
        if len(args) != 1 or kwargs or not isinstance(args[0], NestedFunctionValue):
            raise Unsupported("functools.wraps(...) applied to something other than a function made in the trace",
                              kind="unsupported_call")
        wrapper, wrapped = args[0], self.wrapped
        if isinstance(wrapped, NestedFunctionValue):
            extra = dict(wrapped.attrs)
        elif isinstance(wrapped, UserFunctionValue):
            src = wrapped.source
            extra = {k: tx.wrap(v, ItemSource(AttrSource(src, "__dict__"), k) if src is not None else None)
                     for k, v in wrapped.fn.__dict__.items()}
        else:
            raise Unsupported(f"functools.wraps of a {wrapped.type_name()}", kind="unsupported_call")
        for name in functools.WRAPPER_ASSIGNMENTS:
            wrapper.attrs[name] = wrapped.get_attr(tx, name)
        wrapper.attrs.update(extra)
        wrapper.attrs["__wrapped__"] = wrapped
        return wrapper

    def reconstruct(self, cg):
        cg.push_callable(functools.wraps)
        cg.reconstruct(self.wrapped)
        cg.call(1)
