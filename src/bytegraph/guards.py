"""Guards: the predicate that says when a cache entry is still valid.

The tracer adds a :class:`Guard` whenever a value's behaviour depended on
what its source held (a tensor's dtype and shape, a constant's value, which
function a global named, what a closure cell held).  Each guard has a named
kind (``TENSOR_MATCH``, ``ID_MATCH``, ...; see :data:`_PRIORITY`), and the
guards of one trace are collected in a :class:`GuardSet`.
:func:`bytegraph.guard_compiler.compile_guards` turns that set into **one
generated Python function** per cache entry (DESIGN.md §5).

Example::

    >>> import torch
    >>> from bytegraph.sources import LocalSource
    >>> gs = GuardSet()
    >>> gs.add(Guard.tensor(LocalSource("x"), torch.ones(2)))
    >>> gs.add(Guard.tensor(LocalSource("x"), torch.ones(2)))   # deduplicated
    >>> len(gs)
    1
"""

from __future__ import annotations

import abc
import dataclasses
import sys
import types
from typing import Any, Dict, List, Optional, Tuple

import torch

from .sources import Source

# Lower runs first.  Type checks are cheapest and reject most mismatches.
_PRIORITY = {
    "TYPE_MATCH": 0,
    "ID_MATCH": 1,
    "FUNCTION_MATCH": 1,
    "CONSTANT_MATCH": 2,
    "CELL_EMPTY": 2,
    "LEN_MATCH": 3,
    "DICT_KEYS": 4,
    "ODICT_KEYS": 4,
    "DICT_CONTAINS": 4,
    "SET_MATCH": 4,
    "TENSOR_MATCH": 5,
    "NO_ALIASING": 6,
    "ALIAS": 6,
    "NO_STORAGE_OVERLAP": 6,
    "NOT_IN_GLOBALS": 7,
    "LRU_CACHED": 7,
    "LRU_UNCACHED": 7,
    "BLOCK_MATCH": 7,
    "GRAD_MODE": 8,
    "AUTOCAST": 8,
    "DEFAULT_DTYPE": 8,
    "INFERENCE_MODE": 8,
    "DETERMINISTIC": 8,
    "DETERMINISTIC_WARN_ONLY": 8,
    "MATMUL_PRECISION": 8,
    "DEFAULT_DEVICE": 8,
    "TORCH_FUNCTION_MODES": 8,
    "ABC_CACHE_TOKEN": 8,
    "NUMPY_ERRSTATE": 8,
    "FN_DEFAULTS": 8,
    "FN_CODE": 8,
    "AUTOCAST_DEFAULTS": 8,
    "WARN_OK": 8,
    "SHAPE_ENV": 9,
    "SHAPE_ENV_EXPR": 9,
    # torch.distributed (distributed/): a process group's (name, rank, size);
    # a tensor subclass's flattening context (DTensor's mesh and placements)
    "DIST_GROUP": 8,
    "SUBCLASS_META": 5,
}


#: guard kinds that pin one object's identity (held weakly by the compiled check)
IDENTITY_KINDS = frozenset({"ID_MATCH", "FUNCTION_MATCH"})


@dataclasses.dataclass(frozen=True)
class Guard:
    """One condition on one source.

    ``kind`` is one of the keys of ``_PRIORITY``; ``expected`` is what the
    source held at trace time (or, for ``TENSOR_MATCH``, a tuple of metadata).
    """

    kind: str
    source: Optional[Source]
    expected: Any = None
    #: further sources, for guards relating several values (aliasing)
    others: Tuple[Source, ...] = ()

    @staticmethod
    def tensor(source: Source, t: torch.Tensor, dynamic_dims=()) -> "Guard":
        """Metadata of ``t``; ``None`` marks a symbolic size (the shape guards check it)."""
        # sizes 0 and 1 are specialized (the shape environment does the same)
        shape = tuple(None if d in dynamic_dims and s > 1 else s for d, s in enumerate(t.shape))
        stride = None if dynamic_dims else tuple(t.stride())
        meta = (type(t), t.dtype, t.device, shape, stride, t.requires_grad)
        return Guard("TENSOR_MATCH", source, meta)

    def _hash_key(self):
        if self.kind == "SHAPE_ENV":
            return (self.kind, id(self.expected[0]))
        exp = self.expected
        try:
            hash(exp)
        except TypeError:
            exp = id(exp)
        identity = self.kind in IDENTITY_KINDS
        return (self.kind, self.source, id(self.expected) if identity else exp, self.others)

    def __hash__(self):
        return hash(self._hash_key())

    def __eq__(self, other):
        return isinstance(other, Guard) and self._hash_key() == other._hash_key()

    def describe(self) -> str:
        """Readable form for ``explain()`` and logs."""
        src = self.source.name() if self.source is not None else ""
        k, e = self.kind, self.expected
        if k == "TYPE_MATCH":
            return f"type({src}) is {e.__qualname__}"
        if k == "ID_MATCH":
            return f"{src} is {_short(e)}"
        if k == "FUNCTION_MATCH":
            return f"{src} is {_short(e)} with the same __code__"
        if k == "CONSTANT_MATCH":
            return f"{src} == {e!r}"
        if k == "LEN_MATCH":
            return f"len({src}) == {e}"
        if k == "CELL_EMPTY":
            return f"{src} is {'empty' if e else 'bound'}"
        if k == "SET_MATCH":
            return f"{src} == {set(e)!r}"
        if k == "DICT_CONTAINS":
            return f"{e[0]!r} {'in' if e[1] else 'not in'} {src}"
        if k == "DICT_KEYS":
            return f"list({src}.keys()) == {list(e)!r}"
        if k == "ODICT_KEYS":
            return f"list(dict.keys({src})) == {list(e)!r}"
        if k == "TENSOR_MATCH":
            typ, dtype, device, shape, stride, rg = e
            shape_text = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            stride_text = f" stride={list(stride)}" if stride is not None else ""
            return (f"{src}: {typ.__name__} dtype={dtype} device={device} "
                    f"shape={shape_text}{stride_text} requires_grad={rg}")
        if k == "ALIAS":
            return f"{src} is {self.others[0].name()}"
        if k == "NO_ALIASING":
            return ", ".join(s.name() for s in (self.source,) + self.others) + " are distinct objects"
        if k == "NOT_IN_GLOBALS":
            return f"global {e!r} not defined (builtin {e!r} used)"
        if k == "NO_STORAGE_OVERLAP":
            return ", ".join(s.name() for s in (self.source,) + self.others) + " share no memory"
        if k in _STATE_QUERIES:
            return f"{_STATE_QUERIES[k][0]} == {e}"
        if k == "DEFAULT_DEVICE":
            return f"{_DEFAULT_DEVICE[0]} == {e}"
        if k == "AUTOCAST":
            return "autocast off on every device" if e is None else f"autocast (device, dtype)s and cache == {e}"
        if k == "FN_DEFAULTS":
            return "the function's __defaults__ and __kwdefaults__ are the ones traced with"
        if k == "FN_CODE":
            return "the function's __code__ is the one traced"
        if k == "AUTOCAST_DEFAULTS":
            return f"(torch.get_autocast_dtype({e[0]!r}), torch.is_autocast_cache_enabled()) == {e[1:]}"
        if k == "LRU_CACHED":
            pos, kw, _ = e
            args = ", ".join([repr(a) for a in pos] + [f"{n}={v!r}" for n, v in kw])
            return f"{src}({args}) is a hit returning the object traced with"
        if k == "LRU_UNCACHED":
            pos, kw = e
            args = ", ".join([repr(a) for a in pos] + [f"{n}={v!r}" for n, v in kw])
            return f"{src}({args}) is not a hit the trace can use"
        if k == "WARN_OK":
            category, text, module, lineno, _ = e
            return (f"warnings.warn({text!r}, {category.__name__}) from {module}:{lineno} is no error and shown "
                    "without program code")
        if k == "BLOCK_MATCH":
            return f"{src} matches {e.identifier} as traced ({e.count} conditions: attributes, flags, hooks, shapes)"
        if k == "DIST_GROUP":
            return (f"process group {src or 'default'}: " +
                    ("not initialized" if not e else f"name {e[0]!r}, rank {e[1]} of {e[2]}" if len(e) == 3 else
                     "the same object"))
        if k == "SUBCLASS_META":
            return f"{src}: {e[0].__name__} with flattening context {e[1]!r}"
        if k == "SHAPE_ENV_EXPR":
            return f"shape: {e}"
        if k == "SHAPE_ENV":
            return "shape environment guards"
        return f"{k}({src}, {e!r})"


def _numpy_errstate():
    """NumPy's floating-point error handling (``np.geterr()``) as a tuple, or
    None before the program imported NumPy (bytegraph never imports it)."""
    np = sys.modules.get("numpy")
    return None if np is None else tuple(sorted(np.geterr().items()))


#: guards on process-wide state that one query reads: kind -> (as shown, query)
_STATE_QUERIES = {
    "GRAD_MODE": ("torch.is_grad_enabled()", torch.is_grad_enabled),
    "DEFAULT_DTYPE": ("torch.get_default_dtype()", torch.get_default_dtype),
    "INFERENCE_MODE": ("torch.is_inference_mode_enabled()", torch.is_inference_mode_enabled),
    # which kernels an op may use, and how precise float32 matmuls are: a
    # backend picks its kernels (and the trace its answers) from these
    "DETERMINISTIC": ("torch.are_deterministic_algorithms_enabled()", torch.are_deterministic_algorithms_enabled),
    "DETERMINISTIC_WARN_ONLY": ("torch.is_deterministic_algorithms_warn_only_enabled()",
                                torch.is_deterministic_algorithms_warn_only_enabled),
    "MATMUL_PRECISION": ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision),
    # torch-function modes change what every torch call means; one of them is
    # torch.set_default_device (the device of torch.ones(2) without device=)
    "TORCH_FUNCTION_MODES": ("torch._C._len_torch_function_stack()", torch._C._len_torch_function_stack),
    # a registration with any ABC (ABC.register) changes it: issubclass and
    # isinstance answers about ABCs that the trace computed hold until then
    "ABC_CACHE_TOKEN": ("abc.get_cache_token()", abc.get_cache_token),
    # how NumPy reports floating-point errors: a traced NumPy operation that
    # may raise a flag is captured only while NumPy ignores them (values.ndarrays)
    "NUMPY_ERRSTATE": ("numpy.geterr()", _numpy_errstate),
}

#: state queries guarded only by traces that read that state (not by every entry)
_ON_DEMAND_STATE = ("ABC_CACHE_TOKEN", "NUMPY_ERRSTATE")

#: checked only when a torch-function mode was active at trace time (3 µs a query)
_DEFAULT_DEVICE = ("torch.get_default_device()", torch.get_default_device)


#: settings a compiling backend bakes into its code (kernel choice, matmul
#: precision); the eager backend runs the real ops, which read them at run time
_BACKEND_STATE = ("DETERMINISTIC", "DETERMINISTIC_WARN_ONLY", "MATMUL_PRECISION")

#: query function -> guard kind, for a trace that reads the setting itself
STATE_QUERY_KINDS = {query: kind for kind, (_, query) in _STATE_QUERIES.items()}


def state_guard(kind: str) -> "Guard":
    """The guard that process-wide setting ``kind`` keeps its current value."""
    return Guard(kind, None, _STATE_QUERIES[kind][1]())


def global_state_guards(backend_name: str = "eager") -> List["Guard"]:
    """Guards on the process-wide torch settings a captured graph depends on
    (grad mode and autocast are guarded by the tracer, which also changes them).

    Example::

        >>> sorted(g.kind for g in global_state_guards())[:2]
        ['DEFAULT_DTYPE', 'INFERENCE_MODE']
        >>> "MATMUL_PRECISION" in {g.kind for g in global_state_guards("inductor")}
        True
    """
    out = [state_guard(kind) for kind in _STATE_QUERIES
           if kind != "GRAD_MODE" and kind not in _ON_DEMAND_STATE
           and (kind not in _BACKEND_STATE or backend_name != "eager")]
    if torch._C._len_torch_function_stack():
        out.append(Guard("DEFAULT_DEVICE", None, torch.get_default_device()))
    return out


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps")


def autocast_state():
    """The autocast settings a graph's meaning depends on: ``None`` when autocast
    is off on every device, else ((device, dtype) of each enabled device, cache flag).

    Example::

        >>> import torch
        >>> autocast_state() is None
        True
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     autocast_state()
        ((('cpu', torch.bfloat16),), True)
    """
    if not torch._C._is_any_autocast_enabled():
        return None
    enabled = []
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                enabled.append((device, torch.get_autocast_dtype(device)))
        except RuntimeError:  # a device type this build does not know
            continue
    return tuple(enabled), torch.is_autocast_cache_enabled()


def _name_of(obj) -> Optional[str]:
    """``obj``'s qualified name, read only where reading it runs no program
    code (a ``getattr`` on any object could call its class's or its module's
    ``__getattr__``): classes, functions, builtins and modules."""
    t = type(obj)
    try:
        if issubclass(t, type):
            return type.__dict__["__qualname__"].__get__(obj)
        if t in (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                 types.WrapperDescriptorType, types.MethodWrapperType):
            return obj.__qualname__
        if t is types.ModuleType:
            name = obj.__dict__.get("__name__")
            return name if type(name) is str else None
    except Exception:
        return None
    return None


def _short(obj) -> str:
    if isinstance(obj, _Forgotten):
        return f"<{obj.type_name} {obj.__qualname__}>"
    name = _name_of(obj)
    if name:
        return f"<{type(obj).__name__} {name}>"
    return f"<{type(obj).__name__} at {id(obj):#x}>"


class GuardSet:
    """The guards of one trace, deduplicated."""

    def __init__(self):
        self._guards: Dict[Guard, None] = {}

    def add(self, guard: Guard) -> None:
        self._guards[guard] = None

    def __iter__(self):
        return iter(self._guards)

    def __len__(self):
        return len(self._guards)



_NUMERIC_KEY_TYPES = (bool, int, float, complex, tuple, frozenset)


def typed(x):
    """``x`` with the type of every number, tuple and frozenset in it: equal
    exactly when the objects are equal and of the same types (``1``,
    ``1.0`` and ``True`` are equal as values)."""
    t = type(x)
    if t is tuple:
        return (t, tuple(typed(item) for item in x))
    if t in (frozenset, set):
        return (t, frozenset(typed(item) for item in x))
    return (t, x)


def _has_numbers(c) -> bool:
    return any(type(x) in _NUMERIC_KEY_TYPES and (type(x) not in (tuple, frozenset) or _has_numbers(x)) for x in c)


def key_types(keys) -> tuple:
    """The types of ``keys``, and of the items of tuple keys (what ``==``
    between equal numbers ignores)."""
    def of(k):
        t = type(k)
        if t is tuple:
            return (t, tuple(of(item) for item in k))
        if t is frozenset:
            return (t, tuple(sorted(repr(of(item)) for item in k)))
        return t
    return tuple(of(k) for k in keys)



def storages_disjoint(*tensors) -> bool:
    """No two of ``tensors`` use the same storage (empty storages never collide).

    Example::

        >>> import torch
        >>> a = torch.ones(4)
        >>> storages_disjoint(a, torch.ones(4)), storages_disjoint(a, a[1:])
        (True, False)
    """
    seen = set()
    for t in tensors:
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter and hasattr(t, "__tensor_flatten__"):
            # a wrapper subclass (DTensor) has no storage of its own: its inner tensors' count
            inner = [getattr(t, name) for name in t.__tensor_flatten__()[0]]
            tensors_inner = [x for x in inner if isinstance(x, torch.Tensor)]
            if not storages_disjoint(*tensors_inner):
                return False
            ptrs = [x.untyped_storage().data_ptr() for x in tensors_inner]
        else:
            ptrs = [t.untyped_storage().data_ptr()]
        for ptr in ptrs:
            if ptr:
                if ptr in seen:
                    return False
                seen.add(ptr)
    return True



class _Forgotten:
    """Stands in for an identity-guarded object in a compiled guard's records,
    so the cache does not keep the object alive."""

    __slots__ = ("__qualname__", "type_name", "cls")

    def __init__(self, obj):
        self.__qualname__ = _name_of(obj) or f"{id(obj):#x}"
        self.type_name = type(obj).__name__
        self.cls = type(obj)
