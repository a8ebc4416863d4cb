"""Class statements inside compiled code: ``__build_class__(body, name, *bases)``.

The body function runs in the trace, in a frame whose ``LOAD_NAME``/
``STORE_NAME`` go to a namespace (name -> value, in definition order).  From
that namespace the trace makes one real *template* class -- constants as
they are, each method a real function of the same code (cells left empty),
registered in the side-effect table as the function value it stands for --
so that every lookup the tracer makes on classes and instances (MRO walks,
descriptors, ``isinstance``) works on it unchanged, while calls of its
methods inline the traced function values.

The template is never the program's class.  Every call of the compiled
function makes a new class, as CPython does: the generated code builds it
with ``type(name, bases, namespace)`` from the rebuilt namespace (methods are
closures over the rebuilt cells, ``__classcell__`` included, so ``super()``
and ``__class__`` work), the first time something live needs it, and keeps it
in a temporary.  Codegen maps every load of the template object (a source
rooted at it, an instance's class, ``type(obj)``) to that class, and the
guards about the template (which nothing else can change) are dropped.

Only what ``type(name, bases, ns)`` builds the same way without running
program code is captured: metaclass ``type``; bases that are classes;
``object.__init_subclass__``; no namespace value with ``__set_name__``; and
namespace values that are constants, functions made in the body (plain, or
wrapped by ``staticmethod``/``classmethod``/``property``), dicts of constants
(``__annotations__``), or pre-existing objects.  Anything else breaks
(``class_statement``): the statement runs natively.
"""

from __future__ import annotations

import builtins
import types
import typing
import weakref
from typing import Dict, List

from ..errors import Unsupported
from ..sources import ObjectSource, chain
from .base import Value
from .cells import CellValue, EMPTY
from .constants import NONE, ConstantValue, const
from .objects import ClassValue, NO_ATTR, special_lookup

_WRAPPERS = (staticmethod, classmethod, property)


def _refuse(why: str):
    raise Unsupported(f"class statement: {why}", kind="class_statement",
                      hint="the class statement runs natively between graphs")


class TemplateClassValue(ClassValue):
    """A class made by a class statement in the trace (see the module
    docstring).  ``cls`` is the template; the value reconstructs as a new
    class built from ``name``, ``bases`` and the namespace values."""

    __slots__ = ("name", "bases", "namespace", "maker")

    def __init__(self, template: type, name: str, bases: List[Value], namespace: Dict[str, Value], maker=type):
        super().__init__(template, None)
        self.name = name
        self.bases = bases
        self.namespace = namespace
        #: what the generated code calls with (name, bases, namespace)
        self.maker = maker

    def children(self):
        return list(self.bases) + list(self.namespace.values())

    def reconstruct(self, cg):
        cg.push_callable(self.maker)
        cg.load_object(self.name)
        for b in self.bases:
            cg.reconstruct(b)
        cg.emit("BUILD_TUPLE", arg=len(self.bases))
        for key, value in self.namespace.items():
            cg.load_object(key)
            cg.reconstruct(value)
        cg.emit("BUILD_MAP", arg=len(self.namespace))
        cg.call(3)

    def __repr__(self):
        return f"TemplateClassValue({self.name})"


class DescriptorWrapperValue(Value):
    """``staticmethod(f)``, ``classmethod(f)`` or ``property(fget, fset,
    fdel, doc)`` of functions made in the trace (a decorated method in a
    class body).  Reconstructs as that call."""

    __slots__ = ("wrapper", "args")

    def __init__(self, wrapper: type, args: List[Value]):
        super().__init__()
        self.wrapper = wrapper
        self.args = args

    def python_type(self):
        return self.wrapper

    def get_attr(self, tx, name):
        if self.wrapper in (staticmethod, classmethod) and name == "__func__":
            return self.args[0]
        if self.wrapper is property and name in ("fget", "fset", "fdel"):
            i = ("fget", "fset", "fdel").index(name)
            return self.args[i] if i < len(self.args) else NONE
        return super().get_attr(tx, name)

    def children(self):
        return list(self.args)

    def reconstruct(self, cg):
        cg.push_callable(self.wrapper)
        cg.call_with(self.args, {})


def wrap_descriptor(tx, wrapper: type, args, kwargs):
    """``staticmethod``/``classmethod``/``property`` called on functions made
    in the trace, else None (the ordinary class call)."""
    from .functions import NestedFunctionValue
    if kwargs or not args:
        return None
    if wrapper is property:
        if len(args) > 4 or not all(isinstance(a, NestedFunctionValue) or (a.is_constant() and a.as_constant() is None)
                                    for a in args[:3]):
            return None
        if len(args) == 4 and not (args[3].is_constant() and type(args[3].as_constant()) in (str, type(None))):
            return None
    elif len(args) != 1 or not isinstance(args[0], NestedFunctionValue):
        return None
    return DescriptorWrapperValue(wrapper, list(args))


def _metaclass(bases: List[type], explicit):
    meta = explicit if explicit is not None else (type(bases[0]) if bases else type)
    for b in bases:
        if issubclass(type(b), meta):
            meta = type(b)
        elif not issubclass(meta, type(b)):
            return None
    return meta


def build_class(tx, args, kwargs) -> Value:
    """``__build_class__(func, name, *bases, **kwds)`` (see the module docstring)."""
    from .functions import NestedFunctionValue
    if len(args) < 2 or not isinstance(args[0], NestedFunctionValue) or not args[1].is_constant() \
            or type(args[1].as_constant()) is not str:
        _refuse("__build_class__ called other than by a class statement")
    body, name = args[0], args[1].as_constant()
    base_values = list(args[2:])
    if len(base_values) == 1 and base_values[0].real_object() == (typing.NamedTuple,):
        return _typed_named_tuple_class(tx, body, name, kwargs)
    bases = []
    for b in base_values:
        if not (isinstance(b, ClassValue) and isinstance(b.cls, type)):
            _refuse(f"a base of {name} that is not a class ({b.type_name()}: __mro_entries__)")
        bases.append(b.cls)
    explicit = None
    for key, value in kwargs.items():
        if key != "metaclass" or not value.is_constant():
            _refuse(f"class {name}: keyword {key}= (given to __init_subclass__ or the metaclass)")
        explicit = value.as_constant()
    if _metaclass(bases, explicit) is not type:
        _refuse(f"class {name} with a metaclass other than type")
    if not bases:
        base_values, bases = [tx.wrap(object, None)], [object]
    for b in bases:
        if b.__flags__ & (1 << 10) == 0:  # Py_TPFLAGS_BASETYPE
            tx.raise_python_exception(TypeError(f"type '{b.__name__}' is not an acceptable base type"))
        found = special_lookup(b, "__init_subclass__")
        if found is not NO_ATTR and found is not object.__dict__["__init_subclass__"]:
            _refuse(f"class {name}: a base with its own __init_subclass__ ({b.__qualname__})")

    namespace = _run_body(tx, body, name)
    real_ns = {}
    functions = {}
    for key, value in namespace.items():
        real_ns[key] = _real_of(tx, key, value, functions, name)
    for key, obj in real_ns.items():
        set_name = special_lookup(type(obj), "__set_name__")
        if key != "__classcell__" and set_name is not NO_ATTR and not (
                type(obj) in _WRAPPERS and set_name is type(obj).__dict__["__set_name__"]):
            # (property's own, in C, only records the name)
            _refuse(f"class {name}: {key} has __set_name__")
    try:
        template = type(name, tuple(bases), real_ns)
    except Exception as e:  # noqa: BLE001 - e.g. a layout conflict of the bases
        _refuse(f"class {name}: type() raised {type(e).__name__}: {e}")
    value = TemplateClassValue(template, name, base_values, namespace)
    _register(tx, template, value, functions)
    cell = namespace.get("__classcell__")
    if isinstance(cell, CellValue):
        cell.contents = value
    return value


def _typed_named_tuple_class(tx, body, name: str, kwargs) -> Value:
    """``class P(typing.NamedTuple): ...``: ``__build_class__`` resolves the
    base to ``typing._NamedTuple`` (``__mro_entries__``), records
    ``__orig_bases__`` and calls ``NamedTupleMeta``, which makes the class
    with ``collections.namedtuple`` and copies the namespace onto it --
    library code of no other effect, run on the template and again by the
    generated code on the rebuilt namespace."""
    if kwargs:
        _refuse(f"NamedTuple class {name} with keywords")
    namespace = _run_body(tx, body, name)
    if "__classcell__" in namespace:
        _refuse(f"NamedTuple class {name} using __class__ or super()")
    namespace["__orig_bases__"] = ConstantValue((typing.NamedTuple,))
    functions: dict = {}
    real_ns = {key: _real_of(tx, key, value, functions, name) for key, value in namespace.items()}
    try:
        template = typing.NamedTupleMeta(name, (typing._NamedTuple,), real_ns)
    except (TypeError, ValueError, AttributeError) as e:
        tx.raise_python_exception(e)
    value = TemplateClassValue(template, name, [], namespace, maker=_make_typed_named_tuple)
    _register(tx, template, value, functions)
    return value


def _make_typed_named_tuple(name, bases, ns):
    """What ``__build_class__`` does for a ``typing.NamedTuple`` class body (see above)."""
    return typing.NamedTupleMeta(name, (typing._NamedTuple,), ns)


def _register(tx, template, value, functions) -> None:
    se = tx.side_effects
    se.templates[id(template)] = value
    se.template_refs.append(weakref.ref(template))
    se.alias_new(template, value)
    for fn_obj, fn_value in functions.values():
        if fn_value is not None:
            se.alias_new(fn_obj, fn_value)


def _run_body(tx, body, name: str) -> Dict[str, Value]:
    code = body.code
    if code.co_flags & 0x3:  # CO_OPTIMIZED | CO_NEWLOCALS: not a class body
        _refuse(f"{name}'s body is not a class body")
    if set(code.co_cellvars) & set(code.co_freevars):
        # (``__class__`` both the body's own cell and the enclosing one's: the
        # frame keeps cells by name)
        _refuse(f"class {name}: a cell and a free variable of the same name in its body")
    if set(code.co_varnames) & (set(code.co_cellvars) | set(code.co_freevars)):
        # (3.12+: a comprehension inlined in a class body saves and restores
        # the names it uses with LOAD_FAST_AND_CLEAR/STORE_FAST, on fast
        # slots of their own beside the free variable of the same name that
        # it reads with LOAD_DEREF; the frame keeps locals by name)
        _refuse(f"class {name}: a fast local and a cell of the same name in its body")
    frame = tx._child(code, body.f_globals, {}, body.closure, name)
    frame.namespace = {}
    result = frame.run()
    cell = frame.namespace.get("__classcell__")
    if cell is not None and cell is not result:
        _refuse(f"class {name}: __classcell__ does not hold the body's __class__ cell")
    if not (result is cell or (result.is_constant() and result.as_constant() is None)):
        _refuse(f"class {name}: the body returned something other than its __class__ cell")
    return frame.namespace


def _real_of(tx, key: str, value: Value, functions: dict, cls_name: str):
    """The object the template's namespace holds for ``value``."""
    from .containers import DictValue, ListValue, TupleValue
    from .functions import NestedFunctionValue
    if isinstance(value, NestedFunctionValue):
        return _template_function(tx, value, functions, cls_name)
    if isinstance(value, DescriptorWrapperValue):
        return value.wrapper(*[_real_of(tx, key, a, functions, cls_name) for a in value.args])
    if isinstance(value, CellValue) and key == "__classcell__":
        return _template_cell(value, functions)
    if value.is_constant():
        return value.as_constant()
    if value.source is None and type(value) in (DictValue, ListValue, TupleValue):
        # a container made in the trace: the template holds a copy, which
        # the trace maps back to this value (one object, one value)
        known = functions.get(id(value))
        if known is not None:
            return known[0]
        if type(value) is DictValue:
            real = {}
            for k, v in value.entries.values():
                if not k.is_constant():
                    _refuse(f"class {cls_name}: {key} is a dict with keys that are not constants")
                real[k.as_constant()] = _real_of(tx, key, v, functions, cls_name)
        else:
            items = [_real_of(tx, key, v, functions, cls_name) for v in value.items]
            real = items if type(value) is ListValue else tuple(items)
        functions[id(value)] = (real, value)
        return real
    real = value.real_object()
    if real is not None and value.source is not None:
        return real[0]
    _refuse(f"class {cls_name}: the class attribute {key} is a {value.type_name()} made in the trace")


def _template_cell(cell: CellValue, functions: dict):
    known = functions.get(("cell", id(cell)))
    if known is not None:
        return known[0]
    real = types.CellType()
    functions[("cell", id(cell))] = (real, None)
    return real


def _template_function(tx, fn, functions: dict, cls_name: str):
    known = functions.get(id(fn))
    if known is not None:
        return known[0]
    defaults = None
    if fn.defaults is not None:
        if not all(d.is_constant() for d in fn.defaults.items):
            _refuse(f"class {cls_name}: a method's defaults are not constants")
        defaults = tuple(d.as_constant() for d in fn.defaults.items)
    closure = tuple(_template_cell(c, functions) if c.source is None and c.real_cell is None
                    else types.CellType() for c in fn.closure)
    obj = types.FunctionType(fn.code, fn.f_globals, fn.code.co_name, defaults, closure or None)
    obj.__qualname__ = fn.qualname
    if fn.kwdefaults is not None or fn.attrs or fn.annotations is not None:
        _refuse(f"class {cls_name}: a method with keyword-only defaults, annotations or attributes")
    functions[id(fn)] = (obj, fn)
    return obj


class NamedTupleClassValue(ClassValue):
    """A class made by ``collections.namedtuple(...)`` in the trace, from
    constants: the template is the real call's result (the function only
    builds a class); it reconstructs as the same call, so every call of the
    compiled function makes its own class, as CPython does."""

    __slots__ = ("call_args",)

    def __init__(self, template: type, call_args: tuple):
        super().__init__(template, None)
        self.call_args = call_args  # (typename, field names, rename, defaults, module)

    def reconstruct(self, cg):
        import collections
        typename, fields, rename, defaults, module = self.call_args
        cg.push_callable(collections.namedtuple)
        cg.load_object(typename)
        cg.load_object(fields)
        cg.load_object(rename)
        cg.load_object(defaults)
        cg.load_object(module)
        cg.call(5, kw_names=("rename", "defaults", "module"))

    def __repr__(self):
        return f"NamedTupleClassValue({self.call_args[0]})"


def _constant_strings(tx, value: Value, what: str):
    """A str, or an iterable of str constants, as namedtuple takes field names."""
    if value.is_constant():
        c = value.as_constant()
        if type(c) is str or (type(c) in (tuple, list) and all(type(x) is str for x in c)):
            return c if type(c) is str else tuple(c)
    else:
        try:
            items = value.unpack(tx)
        except Unsupported:
            items = None
        if items is not None and all(i.is_constant() and type(i.as_constant()) is str for i in items):
            return tuple(i.as_constant() for i in items)
    raise Unsupported(f"collections.namedtuple() with {what} that are not string constants", kind="class_statement",
                      hint="the call runs natively between graphs")


def namedtuple_call(tx, args, kwargs) -> Value:
    """``collections.namedtuple(typename, field_names, *, rename, defaults, module)``."""
    import collections
    import inspect
    try:
        bound = inspect.signature(collections.namedtuple).bind(*args, **kwargs)
    except TypeError as e:
        tx.raise_python_exception(e)
    b = bound.arguments
    typename = b["typename"]
    if not typename.is_constant() or type(typename.as_constant()) is not str:
        raise Unsupported("collections.namedtuple() with a typename that is not a str constant",
                          kind="class_statement")
    fields = _constant_strings(tx, b["field_names"], "field names")
    options = {}
    for key, default in (("rename", False), ("defaults", None), ("module", None)):
        v = b.get(key)
        if v is None:
            options[key] = default
            continue
        if key == "defaults" and not v.is_constant():
            items = v.unpack(tx)
            if not all(i.is_constant() for i in items):
                raise Unsupported("collections.namedtuple() with defaults that are not constants",
                                  kind="class_statement")
            options[key] = tuple(i.as_constant() for i in items)
            continue
        if not v.is_constant():
            raise Unsupported(f"collections.namedtuple() with {key}= not a constant", kind="class_statement")
        options[key] = v.as_constant()
    if options["defaults"] is not None:
        options["defaults"] = tuple(options["defaults"])
    if options["module"] is None:
        # what namedtuple reads from its caller's frame (sys._getframe(1))
        options["module"] = tx.f_globals.get("__name__", "__main__")
    try:
        template = collections.namedtuple(typename.as_constant(), fields, **options)
    except (TypeError, ValueError) as e:
        tx.raise_python_exception(e)
    value = NamedTupleClassValue(template, (typename.as_constant(), fields, options["rename"], options["defaults"],
                                            options["module"]))
    tx.side_effects.templates[id(template)] = value
    tx.side_effects.template_refs.append(weakref.ref(template))
    tx.side_effects.alias_new(template, value)
    return value


def typed_named_tuple_call(tx, args, kwargs) -> Value:
    """``typing.NamedTuple(typename, [(name, type), ...])`` or
    ``NamedTuple(typename, name=type, ...)``: ``typing._make_nmtuple`` with the
    caller's module, on constants (as ``collections.namedtuple`` above)."""
    if not args or len(args) > 2 or not args[0].is_constant() or type(args[0].as_constant()) is not str:
        raise Unsupported("typing.NamedTuple() called with other than a typename constant", kind="class_statement")
    if len(args) == 2 and kwargs:
        tx.raise_python_exception(TypeError("Either list of fields or keywords can be provided to NamedTuple, "
                                            "not both"))
    if len(args) < 2 and _FUNCTIONAL_KEYWORDS_WARN:
        raise Unsupported("typing.NamedTuple() with keyword fields (deprecated: it warns)", kind="class_statement")
    pairs = []
    if len(args) == 2:
        for item in args[1].unpack(tx):
            parts = item.unpack(tx)
            if len(parts) != 2:
                raise Unsupported("typing.NamedTuple() fields that are not pairs", kind="class_statement")
            pairs.append(tuple(parts))
    else:
        pairs = [(const(k), v) for k, v in kwargs.items()]
    if not all(n.is_constant() and type(n.as_constant()) is str and t.is_constant() for n, t in pairs):
        raise Unsupported("typing.NamedTuple() fields that are not constants", kind="class_statement")
    fields = tuple((n.as_constant(), t.as_constant()) for n, t in pairs)
    module = tx.f_globals.get("__name__", "__main__")
    try:
        template = _make_functional_named_tuple(args[0].as_constant(), fields, module)
    except (TypeError, ValueError) as e:
        tx.raise_python_exception(e)
    value = _FunctionalClassValue(template, _make_functional_named_tuple, (args[0].as_constant(), fields, module))
    _register(tx, template, value, {})
    return value


def _make_functional_named_tuple(typename, fields, module):
    nt = typing._make_nmtuple(typename, fields, module=module)
    if _FUNCTIONAL_ORIG_BASES:
        nt.__orig_bases__ = (typing.NamedTuple,)
    return nt


def _probe_functional_named_tuple():
    """What ``typing.NamedTuple(...)`` of the running Python does beyond
    ``_make_nmtuple``: set ``__orig_bases__`` (3.12+), warn about keyword
    fields (3.13+)."""
    import warnings
    orig = hasattr(typing.NamedTuple("_Probe", []), "__orig_bases__")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        typing.NamedTuple("_Probe", a=int)
    return orig, bool(seen)


_FUNCTIONAL_ORIG_BASES, _FUNCTIONAL_KEYWORDS_WARN = _probe_functional_named_tuple()


class _FunctionalClassValue(ClassValue):
    """A class a library function made in the trace from constants
    (``typing.NamedTuple(...)``); reconstructs as ``maker(*call_args)``."""

    __slots__ = ("maker", "call_args")

    def __init__(self, template, maker, call_args):
        super().__init__(template, None)
        self.maker, self.call_args = maker, call_args

    def reconstruct(self, cg):
        cg.push_callable(self.maker)
        for a in self.call_args:
            cg.load_object(a)
        cg.call(len(self.call_args))


def drop_template_guards(side_effects, guards) -> None:
    """Guards about template classes hold whatever happens (nothing but the
    trace has them): dropped, so the cache entry does not keep them alive."""
    if not side_effects.templates:
        return
    ids = side_effects.templates

    def about_template(g):
        src = g.source
        if src is not None:
            root = chain(src)[0]
            if isinstance(root, ObjectSource) and id(root.obj) in ids:
                return True
        exp = g.expected
        return id(exp) in ids or (type(exp) is tuple and any(id(x) in ids for x in exp))
    kept = {g: None for g in guards if not about_template(g)}
    guards._guards = kept


__all__ = ["build_class", "wrap_descriptor", "TemplateClassValue", "drop_template_guards", "builtins", "const",
           "EMPTY"]
