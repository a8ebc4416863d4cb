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
from typing import Dict, List

from ..errors import Unsupported
from ..sources import ObjectSource, chain
from .base import Value
from .cells import CellValue, EMPTY
from .constants import NONE, const
from .objects import ClassValue, NO_ATTR, special_lookup

_WRAPPERS = (staticmethod, classmethod, property)


def _refuse(why: str):
    raise Unsupported(f"class statement: {why}", kind="class_statement",
                      hint="the class statement runs natively between graphs")


class TemplateClassValue(ClassValue):
    """A class made by a class statement in the trace (see the module
    docstring).  ``cls`` is the template; the value reconstructs as a new
    class built from ``name``, ``bases`` and the namespace values."""

    __slots__ = ("name", "bases", "namespace")

    def __init__(self, template: type, name: str, bases: List[Value], namespace: Dict[str, Value]):
        super().__init__(template, None)
        self.name = name
        self.bases = bases
        self.namespace = namespace

    def children(self):
        return list(self.bases) + list(self.namespace.values())

    def reconstruct(self, cg):
        cg.push_callable(type)
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
    se = tx.side_effects
    se.templates[id(template)] = value
    se.track_existing(template, value)
    for fn_obj, fn_value in functions.values():
        if fn_value is not None:
            se.track_existing(fn_obj, fn_value)
    cell = namespace.get("__classcell__")
    if isinstance(cell, CellValue):
        cell.contents = value
    return value


def _run_body(tx, body, name: str) -> Dict[str, Value]:
    code = body.code
    if code.co_flags & 0x3:  # CO_OPTIMIZED | CO_NEWLOCALS: not a class body
        _refuse(f"{name}'s body is not a class body")
    if set(code.co_cellvars) & set(code.co_freevars):
        # (``__class__`` both the body's own cell and the enclosing one's: the
        # frame keeps cells by name)
        _refuse(f"class {name}: a cell and a free variable of the same name in its body")
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
    from .containers import DictValue
    from .functions import NestedFunctionValue
    if isinstance(value, NestedFunctionValue):
        return _template_function(tx, value, functions, cls_name)
    if isinstance(value, DescriptorWrapperValue):
        return value.wrapper(*[_real_of(tx, key, a, functions, cls_name) for a in value.args])
    if isinstance(value, CellValue) and key == "__classcell__":
        return _template_cell(value, functions)
    if value.is_constant():
        return value.as_constant()
    if type(value) is DictValue and value.source is None:
        out = {}
        for k, v in value.entries.values():
            if not (k.is_constant() and v.is_constant()):
                _refuse(f"class {cls_name}: {key} is a dict of values that are not constants")
            out[k.as_constant()] = v.as_constant()
        return out
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
